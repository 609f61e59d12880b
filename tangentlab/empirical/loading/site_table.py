"""The site table: for each model family, where each named site lives and which norms read it.

One :class:`FamilyTable` per family (a :class:`SiteSpec` per site kind), keyed by Hugging Face
``model_type`` in :data:`FAMILIES`. :mod:`tangentlab.empirical.loading.sites` resolves names against it
and hooks the modules; the site names and the norm vocabulary are explained there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["LN", "RMS", "SiteSpec", "FamilyTable", "FAMILIES", "supported_families",
           "register_family"]

LN, RMS = "LayerNorm", "RMSNorm"


@dataclass(frozen=True)
class SiteSpec:
    """One site kind in one family.

    Attributes:
        module: dotted path relative to ``model.base_model``; ``{l}`` is the block index.
        hook: ``"output"``, ``"input"`` or ``"tap"`` (see the module docstring).
        after_norm: ``"LayerNorm"``/``"RMSNorm"`` when the site is a norm's output, else None.
        before_norm: the norm type that next reads the site (directly, or after the residual
            add it goes into) before any linear map does, else None.
        norm_only: every path from the site to the loss enters a norm of type ``before_norm``
            before any other layer (in a pre-LN stream every reader is a norm). With LayerNorm
            the gradient at the site is then exactly orthogonal to the all-ones vector.
        text: what the vector is, in one line.
    """

    module: str
    hook: str
    after_norm: str | None
    before_norm: str | None
    norm_only: bool
    text: str


@dataclass(frozen=True)
class FamilyTable:
    """The sites of one model family.

    Attributes:
        family: the canonical family name; ``model_types``: the HF ``model_type`` values it covers.
        norm: the family's norm type (``LayerNorm`` or ``RMSNorm``).
        layout: ``pre-LN``, ``post-LN``, ``parallel`` (GPT-NeoX), ``sandwich`` (Gemma-2: norms
            before and after each sub-layer) or ``output-norm`` (OLMo-2: norms after each
            sub-layer only).
        layers: path of the block list relative to ``model.base_model``.
        sites: kind → :class:`SiteSpec` (``resid_mid``/``ln_final`` absent where there is none).
        note: a family-level remark recorded with each site.
        provider: the module whose import registers the family's classes with transformers'
            ``AutoConfig``/``AutoModel`` (empty: transformers knows the family). Imported on
            first use by :func:`register_family`, never at import time.
    """

    family: str
    model_types: tuple[str, ...]
    norm: str
    layout: str
    layers: str
    sites: Mapping[str, SiteSpec]
    note: str = ""
    provider: str = ""


def _pre_ln(*, norm: str, layers: str, embed: str, ln_final: str, attn: str, mlp: str,
            mid_tap: str, embed_text: str) -> dict[str, SiteSpec]:
    """The sites of a sequential pre-norm block ``x + attn(n1(x))``, then ``+ mlp(n2(.))``."""
    L = layers + ".{l}"
    return {
        "embed": SiteSpec(embed, "output", None, norm, True, embed_text),
        "resid_pre": SiteSpec(L, "input", None, norm, True,
                              f"raw residual stream entering the block (pre-LN: feeds the block's "
                              f"input {norm} and the skip)"),
        "resid_mid": SiteSpec(f"{L}.{mid_tap}", "tap", None, norm, True,
                              f"raw residual stream after the attention add (feeds the MLP's {norm} "
                              "and the skip)"),
        "resid_post": SiteSpec(L, "output", None, norm, True,
                               "raw residual stream after the block (pre-LN, unnormalised)"),
        "attn_out": SiteSpec(f"{L}.{attn}", "output", None, norm, True,
                             "attention output projection before the residual add"),
        "mlp_out": SiteSpec(f"{L}.{mlp}", "output", None, norm, True,
                            "MLP output before the residual add"),
        "ln_final": SiteSpec(ln_final, "output", norm, None, False,
                             f"final {norm} output (input to the LM head)"),
    }


def _llama_like(family: str, model_types: tuple[str, ...], *, note: str = "",
                embed_text: str = "token embeddings (input to block 0; RoPE acts inside attention)",
                norm: str = RMS) -> FamilyTable:
    return FamilyTable(family, model_types, norm, "pre-LN", "layers", _pre_ln(
        norm=norm, layers="layers", embed="embed_tokens", ln_final="norm", attn="self_attn",
        mlp="mlp", mid_tap="post_attention_layernorm", embed_text=embed_text), note)


def _bert_like(family: str, model_types: tuple[str, ...]) -> FamilyTable:
    L = "encoder.layer.{l}"
    sites = {
        "embed": SiteSpec("embeddings", "output", LN, None, False,
                          "token+position embeddings after the embedding LayerNorm"),
        "resid_pre": SiteSpec(L, "input", LN, None, False,
                              "stream entering the block (post-LN: a LayerNorm output)"),
        "resid_mid": SiteSpec(f"{L}.attention.output", "output", LN, None, False,
                              "LayerNorm(stream + attention) between attention and MLP"),
        "resid_post": SiteSpec(L, "output", LN, None, False,
                               "block output after its final LayerNorm (post-LN: normalised)"),
        "attn_out": SiteSpec(f"{L}.attention.output.dense", "output", None, LN, True,
                             "attention output projection before dropout, residual add and "
                             "LayerNorm"),
        "mlp_out": SiteSpec(f"{L}.output.dense", "output", None, LN, True,
                            "MLP output projection before dropout, residual add and LayerNorm"),
    }
    return FamilyTable(family, model_types, LN, "post-LN", "encoder.layer", sites,
                       "post-LN encoder: no final norm (no ln_final)")


def _build_tables() -> dict[str, FamilyTable]:
    gpt2 = FamilyTable("gpt2", ("gpt2",), LN, "pre-LN", "h", _pre_ln(
        norm=LN, layers="h", embed="drop", ln_final="ln_f", attn="attn", mlp="mlp", mid_tap="ln_2",
        embed_text="token+position embeddings (input to block 0)"))

    neox_sites = _pre_ln(norm=LN, layers="layers", embed="emb_dropout", ln_final="final_layer_norm",
                         attn="attention", mlp="mlp", mid_tap="post_attention_layernorm",
                         embed_text="token embeddings (input to block 0; rotary positions act "
                                    "inside attention)")
    neox = FamilyTable(
        "gpt_neox", ("gpt_neox",), LN, "parallel", "layers", neox_sites,
        "use_parallel_residual=True (Pythia): resid_post = resid_pre + attn_out + mlp_out, both "
        "sub-layers read resid_pre through their own LayerNorm, so there is no resid_mid")

    gemma2_L = "layers.{l}"
    gemma2_sites = dict(_pre_ln(
        norm=RMS, layers="layers", embed="embed_tokens", ln_final="norm", attn="self_attn",
        mlp="mlp", mid_tap="pre_feedforward_layernorm",
        embed_text="token embeddings scaled by sqrt(d) (input to block 0)"))
    gemma2_sites["attn_out"] = SiteSpec(
        f"{gemma2_L}.post_attention_layernorm", "output", RMS, RMS, True,
        "attention output after its post-attention RMSNorm, before the residual add")
    gemma2_sites["mlp_out"] = SiteSpec(
        f"{gemma2_L}.post_feedforward_layernorm", "output", RMS, RMS, True,
        "MLP output after its post-feedforward RMSNorm, before the residual add")

    olmo2_L = "layers.{l}"
    olmo2_sites = {
        "embed": SiteSpec("embed_tokens", "output", None, None, False,
                          "token embeddings (input to block 0; no input norm in OLMo-2 blocks)"),
        "resid_pre": SiteSpec(olmo2_L, "input", None, None, False,
                              "raw residual stream entering the block (read by attention without "
                              "a norm; q/k are normed inside attention)"),
        "resid_mid": SiteSpec(f"{olmo2_L}.mlp", "tap", None, None, False,
                              "raw residual stream after the attention add (read by the MLP "
                              "without a norm)"),
        "resid_post": SiteSpec(olmo2_L, "output", None, None, False,
                               "raw residual stream after the block"),
        "attn_out": SiteSpec(f"{olmo2_L}.post_attention_layernorm", "output", RMS, None, False,
                             "attention output after its RMSNorm, before the residual add"),
        "mlp_out": SiteSpec(f"{olmo2_L}.post_feedforward_layernorm", "output", RMS, None, False,
                            "MLP output after its RMSNorm, before the residual add"),
        "ln_final": SiteSpec("norm", "output", RMS, None, False,
                             "final RMSNorm output (input to the LM head)"),
    }

    mb_L = "layers.{l}"
    modernbert_sites = {
        "embed": SiteSpec("embeddings", "output", LN, None, False,
                          "token embeddings after the embedding LayerNorm (input to block 0, "
                          "whose attention reads it without a further norm)"),
        "resid_pre": SiteSpec(mb_L, "input", None, LN, True,
                              "raw residual stream entering the block (pre-LN; block 0 has no "
                              "attention norm: its input is the normed embedding)"),
        "resid_mid": SiteSpec(f"{mb_L}.mlp_norm", "tap", None, LN, True,
                              "raw residual stream after the attention add (feeds mlp_norm and "
                              "the skip)"),
        "resid_post": SiteSpec(mb_L, "output", None, LN, True,
                               "raw residual stream after the block (pre-LN, unnormalised)"),
        "attn_out": SiteSpec(f"{mb_L}.attn", "output", None, LN, True,
                             "attention output projection before the residual add"),
        "mlp_out": SiteSpec(f"{mb_L}.mlp", "output", None, LN, True,
                            "MLP output before the residual add"),
        "ln_final": SiteSpec("final_norm", "output", LN, None, False,
                             "final LayerNorm output (input to the MLM head)"),
    }

    planted_sites = {
        "embed": SiteSpec("embed", "output", None, None, False,
                          "planted activations: a token's neighbourhood on a curved manifold "
                          "(tangentlab.validate.planted)"),
        "resid_pre": SiteSpec("blocks.{l}", "input", None, None, False,
                              "stream entering the (identity) block"),
        "resid_mid": SiteSpec("blocks.{l}.mlp", "tap", None, None, False,
                              "stream after the (zero) attention add"),
        "resid_post": SiteSpec("blocks.{l}", "output", None, None, False,
                               "stream after the (identity) block"),
        "attn_out": SiteSpec("blocks.{l}.attn", "output", None, None, False,
                             "the zero attention linear's output"),
        "mlp_out": SiteSpec("blocks.{l}.mlp", "output", None, None, False,
                            "the zero MLP linear's output"),
        "ln_final": SiteSpec("ln_final", "output", None, None, False,
                             "the identity final map (no norm), input to the planted loss head"),
    }

    tables = [
        gpt2,
        neox,
        _llama_like("llama", ("llama",)),
        _llama_like("mistral", ("mistral",)),
        _llama_like("qwen2", ("qwen2", "qwen3"), note="qwen3 adds RMSNorm on q/k inside attention"),
        _llama_like("phi3", ("phi3",), note="residual dropouts are identities in eval mode"),
        _llama_like("gemma", ("gemma",),
                    embed_text="token embeddings scaled by sqrt(d) (input to block 0)",
                    note="Gemma's RMSNorm multiplies by (1 + weight)"),
        FamilyTable("gemma2", ("gemma2",), RMS, "sandwich", "layers", gemma2_sites,
                    "RMSNorm before and after each sub-layer; logits are soft-capped"),
        _llama_like("olmo", ("olmo",), norm=LN,
                    note="OLMo's LayerNorm has no learnable parameters"),
        FamilyTable("olmo2", ("olmo2",), RMS, "output-norm", "layers", olmo2_sites,
                    "norms after each sub-layer only (plus q/k norms inside attention)"),
        _bert_like("bert", ("bert",)),
        _bert_like("roberta", ("roberta", "camembert", "xlm-roberta")),
        FamilyTable("modernbert", ("modernbert",), LN, "pre-LN", "layers", modernbert_sites,
                    "block 0's attention norm is an Identity (the embedding is already normed)"),
        FamilyTable("planted", ("planted", "planted_mlm"), "none", "pre-LN", "blocks", planted_sites,
                    "planted-truth model (tangentlab.validate.planted; planted_mlm: masked LM)",
                    provider="tangentlab.validate.planted"),
    ]
    out: dict[str, FamilyTable] = {}
    for t in tables:
        for mt in t.model_types:
            out[mt] = t
    return out


#: HF ``model_type`` → :class:`FamilyTable` (read-only).
FAMILIES: Mapping[str, FamilyTable] = MappingProxyType(_build_tables())


def supported_families() -> tuple[str, ...]:
    """Every ``model_type`` with a site table, sorted."""
    return tuple(sorted(FAMILIES))


def register_family(model_type: str) -> bool:
    """Import the module that registers ``model_type`` with transformers, if it has one.

    Returns whether a provider was imported (idempotent: a module is imported once). The
    ``planted`` family's classes live in :mod:`tangentlab.validate.planted`; loading a planted
    checkpoint therefore needs no import of it first.
    """
    import importlib

    table = FAMILIES.get(model_type)
    if table is None or not table.provider:
        return False
    importlib.import_module(table.provider)
    return True

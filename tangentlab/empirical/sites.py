"""Named sites per model family: a table from TransformerLens-style names to Hugging Face modules.

Site names (``l`` is a block index; negative indices count from the end, ``blocks.-1`` = last):

- ``embed``: the output of the embedding module, the input of block 0;
- ``blocks.{l}.resid_pre``: the residual stream entering block l (``resid_pre.0`` equals ``embed``;
  ``resid_pre.l`` equals ``resid_post.(l-1)``);
- ``blocks.{l}.resid_mid``: the residual stream between the attention and the MLP sub-layers,
  where the family has one (sequential blocks). Pythia's GPT-NeoX blocks are *parallel*
  (``resid_post = resid_pre + attn_out + mlp_out``, both sub-layers read ``resid_pre``), so a
  GPT-NeoX model with ``use_parallel_residual=True`` has no ``resid_mid``;
- ``blocks.{l}.resid_post``: the output of block l;
- ``blocks.{l}.attn_out`` / ``blocks.{l}.mlp_out``: what the sub-layer contributes before the
  residual add (for Gemma-2 and OLMo-2, after the sub-layer's own output norm; for BERT-style
  post-LN blocks, the output projection before dropout, residual add and LayerNorm);
- ``ln_final``: the final norm's output, the input of the LM head (BERT/RoBERTa have none).

TransformerLens hook names are accepted as aliases: ``blocks.3.hook_resid_post``,
``blocks.0.hook_attn_out``, ``ln_final.hook_normalized``, ... (``hook_embed`` is not: in
TransformerLens it is the token embedding alone, without positions).

Every site records where it sits relative to the norms (:class:`SiteInfo`): ``after_norm`` (the
site is the output of a LayerNorm/RMSNorm), ``before_norm`` (the next layer that reads the site,
directly or after the residual add it goes into, is a norm of that type, before any linear map)
and ``norm_only`` (every path from the site to the loss enters such a norm before any other
layer, so the norms' Jacobians constrain the gradient exactly: with LayerNorm the gradient rows
sum to zero; with RMSNorm, at a site that is itself a norm's whole input (``norm_input``), the
gradient is orthogonal to the activation up to the norm's epsilon). The table is per family; the
per-layer facts (block 0, the last block feeding only the final norm) are resolved by
:func:`site_info`.

How a site is hooked (:func:`site_module` returns an object with ``register_forward_hook``, so
:mod:`~tangentlab.empirical.capture` needs no family knowledge):

- ``output``: a forward hook on the module; returning a tensor replaces the output;
- ``input``: a forward pre-hook on the module (its first input); returning a tensor replaces the
  input the module sees, which is the whole stream for a block;
- ``tap``: the input of a sub-module whose tensor the block *also* adds back through its skip
  connection (``resid_mid``). A replacement is propagated to the skip path too (the difference is
  added to the block's output), and while gradients are enabled the stream entering the block is
  made to require grad, so the captured tensor is the real stream tensor and its gradient includes
  the skip path.

Weights are measured raw (no TransformerLens weight processing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType

from tangentlab.errors import UnknownNameError

__all__ = [
    "SITE_KINDS",
    "SiteSpec",
    "FamilyTable",
    "SiteInfo",
    "FAMILIES",
    "supported_families",
    "family_table",
    "available_sites",
    "normalize_site",
    "site_module",
    "site_info",
    "site_semantics",
    "n_blocks",
]

SITE_KINDS = ("embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "ln_final")
_BLOCK_KINDS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
_BLOCK = re.compile(r"^blocks\.(-?\d+)\.(?:hook_)?(resid_pre|resid_mid|resid_post|attn_out|mlp_out)$")
_GLOBAL_ALIASES = {"embed": "embed", "ln_final": "ln_final", "ln_final.hook_normalized": "ln_final"}

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
    """

    family: str
    model_types: tuple[str, ...]
    norm: str
    layout: str
    layers: str
    sites: Mapping[str, SiteSpec]
    note: str = ""


@dataclass(frozen=True)
class SiteInfo:
    """A resolved site of one loaded model: the table entry with layer-specific facts filled in.

    ``norm_input``: the site is itself the whole input of the only norm that reads it (the last
    block's output before the final norm), so for RMSNorm the gradient is orthogonal to the site's
    own activation (up to the norm's epsilon).
    """

    site: str
    kind: str
    layer: int | None
    family: str
    model_type: str
    layout: str
    module: str
    hook: str
    after_norm: str | None
    before_norm: str | None
    norm_only: bool
    norm_input: bool
    text: str

    def to_dict(self) -> dict:
        """The site's facts as a JSON-able dict (what the manifest records)."""
        return asdict(self)


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
        FamilyTable("planted", ("planted",), "none", "pre-LN", "blocks", planted_sites,
                    "planted-truth model (tangentlab.validate.planted): identity blocks, no norm"),
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


def _model_type(model) -> str:
    cfg = getattr(model, "config", None)
    return str(getattr(cfg, "model_type", "") or type(model).__name__)


def family_table(model) -> FamilyTable:
    """The site table of ``model`` (by its ``config.model_type``).

    Raises:
        UnknownNameError: the family has no site table (the message lists those that do).
    """
    mt = _model_type(model)
    try:
        return FAMILIES[mt]
    except KeyError:
        raise UnknownNameError(
            f"model type {mt!r} ({type(model).__name__}) has no site table; supported model "
            f"types: {', '.join(supported_families())}"
        ) from None


def _parallel(model) -> bool:
    return _model_type(model) == "gpt_neox" and bool(
        getattr(model.config, "use_parallel_residual", True))


def _kinds(model, table: FamilyTable) -> tuple[str, ...]:
    kinds = [k for k in _BLOCK_KINDS if k in table.sites]
    if _parallel(model):
        kinds.remove("resid_mid")
    return tuple(kinds)


def _get(root, path: str):
    mod = root
    for part in path.split("."):
        mod = mod[int(part)] if part.isdigit() else getattr(mod, part)
    return mod


def _layers(model, table: FamilyTable):
    try:
        return _get(model.base_model, table.layers)
    except (AttributeError, IndexError, TypeError):
        raise UnknownNameError(
            f"model {type(model).__name__} (model type {_model_type(model)!r}) lacks "
            f"{table.layers!r}, where the {table.family} site table expects its blocks"
        ) from None


def n_blocks(model) -> int:
    """Number of Transformer blocks."""
    return len(_layers(model, family_table(model)))


def normalize_site(model, site: str) -> str:
    """The canonical name of ``site`` (aliases and negative indices resolved).

    Raises:
        UnknownNameError: unknown name, block index out of range, a kind the family lacks, or a
            family without a site table.
    """
    table = family_table(model)
    n = len(_layers(model, table))
    kinds = _kinds(model, table)
    s = str(site).strip()
    if s in _GLOBAL_ALIASES:
        name = _GLOBAL_ALIASES[s]
        if name not in table.sites:
            raise UnknownNameError(
                f"site {name!r} does not exist in a {table.family} model ({table.note}); "
                f"available: embed, blocks.<l>.{{{','.join(kinds)}}}"
            )
        return name
    m = _BLOCK.match(s)
    if not m:
        extra = ", ln_final" if "ln_final" in table.sites else ""
        raise UnknownNameError(
            f"unknown site {site!r}; use embed{extra} or blocks.<l>.{'|'.join(kinds)} with "
            f"0 <= l < {n} (TransformerLens names such as blocks.0.hook_resid_post also work)"
        )
    idx, kind = int(m.group(1)), m.group(2)
    if not -n <= idx < n:
        raise UnknownNameError(f"site {site!r}: block index out of range; the model has {n} blocks")
    if kind not in kinds:
        why = table.note if kind == "resid_mid" and _parallel(model) else "no such site"
        raise UnknownNameError(
            f"site {site!r} does not exist in a {table.family} model ({why}); block sites "
            f"available: {', '.join(kinds)}"
        )
    return f"blocks.{idx % n}.{kind}"


def available_sites(model) -> list[str]:
    """Every site name the model supports, in forward order."""
    table = family_table(model)
    kinds = _kinds(model, table)
    order = [k for k in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post") if k in kinds]
    out = ["embed"]
    for i in range(len(_layers(model, table))):
        out += [f"blocks.{i}.{k}" for k in order]
    if "ln_final" in table.sites:
        out.append("ln_final")
    return out


def _split(site: str) -> tuple[str, int | None]:
    if site.startswith("blocks."):
        _, idx, kind = site.split(".")
        return kind, int(idx)
    return site, None


def site_info(model, site: str) -> SiteInfo:
    """The resolved table entry of ``site`` in ``model`` (recorded in manifests)."""
    table = family_table(model)
    name = normalize_site(model, site)
    kind, layer = _split(name)
    spec = table.sites[kind]
    n = len(_layers(model, table))
    after, before, only, text = spec.after_norm, spec.before_norm, spec.norm_only, spec.text
    if kind == "resid_pre" and layer is not None:
        # resid_pre.l is the tensor embed (l = 0) or resid_post.(l-1) produced
        prev = table.sites["embed"] if layer == 0 else table.sites["resid_post"]
        after = prev.after_norm
        if table.family == "modernbert" and layer == 0:
            before, only = None, False  # block 0's attention norm is an Identity
    last = layer is not None and layer == n - 1
    feeds_final = ("mlp_out", "attn_out") if table.layout == "parallel" else ("mlp_out",)
    norm_input = False
    if last and "ln_final" in table.sites and table.norm != "none" and (
            kind == "resid_post" or kind in feeds_final):
        # the last block's output (and what is added straight into it) reaches only the final norm
        before, only = table.norm, True
        norm_input = kind == "resid_post"
        text += f"; read only by the final {table.norm}"
    module = spec.module.replace("{l}", str(layer)) if layer is not None else spec.module
    note = f" [{table.note}]" if table.note else ""
    return SiteInfo(site=name, kind=kind, layer=layer, family=table.family,
                    model_type=_model_type(model), layout=table.layout, module=module,
                    hook=spec.hook, after_norm=after, before_norm=before, norm_only=only,
                    norm_input=norm_input, text=text + note)


def site_semantics(model, site: str) -> str:
    """One line saying what the site's vector is in this model (recorded in manifests)."""
    info = site_info(model, site)
    rel = []
    if info.after_norm:
        rel.append(f"after {info.after_norm}")
    if info.before_norm:
        rel.append(f"{'only ' if info.norm_only else ''}into {info.before_norm}")
    where = f" ({'; '.join(rel)})" if rel else ""
    return f"{info.family} {info.site}: {info.text}{where}"


# -- hook points ---------------------------------------------------------------------------------
def _first_input(args: tuple, kwargs: dict):
    if args:
        return args[0], 0
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"], "hidden_states"
    if kwargs:
        key = next(iter(kwargs))
        return kwargs[key], key
    return None, None


def _with_input(args: tuple, kwargs: dict, where, value):
    if where == 0:
        return (value,) + tuple(args[1:]), kwargs
    kw = dict(kwargs)
    kw[where] = value
    return args, kw


class _Handles:
    """Several hook handles removed together (what ``register_forward_hook`` returns)."""

    def __init__(self, handles):
        self._handles = list(handles)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


class _InputHook:
    """A forward hook on the first input of ``module`` (a forward pre-hook underneath)."""

    def __init__(self, module):
        self.module = module

    def register_forward_hook(self, hook, *, prepend: bool = False):
        def pre(mod, args, kwargs):
            x, where = _first_input(args, kwargs)
            if x is None:
                return None
            out = hook(mod, args, x)
            if out is None or out is x:
                return None
            return _with_input(args, kwargs, where, out)

        return self.module.register_forward_pre_hook(pre, with_kwargs=True, prepend=prepend)


def _add_to_output(output, delta):
    if isinstance(output, tuple):
        return (output[0] + delta,) + tuple(output[1:])
    return output + delta


class _TapHook:
    """The input of ``module`` inside ``block``, where the block also adds that tensor back."""

    def __init__(self, block, module):
        self.block = block
        self.module = module

    def register_forward_hook(self, hook, *, prepend: bool = False):
        import torch

        state: dict = {}

        def block_pre(_mod, args, kwargs):
            state.clear()
            x, where = _first_input(args, kwargs)
            if (x is not None and torch.is_grad_enabled() and not x.requires_grad
                    and x.is_floating_point()):
                return _with_input(args, kwargs, where, x.detach().requires_grad_(True))
            return None

        def tap_pre(mod, args, kwargs):
            x, where = _first_input(args, kwargs)
            if x is None:
                return None
            out = hook(mod, args, x)
            if out is None or out is x:
                return None
            if out.shape != x.shape:
                return _with_input(args, kwargs, where, out)  # the capture reports the shape
            state["delta"] = out - x
            return _with_input(args, kwargs, where, out)

        def block_post(_mod, _args, output):
            delta = state.pop("delta", None)
            return None if delta is None else _add_to_output(output, delta)

        return _Handles([
            self.block.register_forward_pre_hook(block_pre, with_kwargs=True, prepend=True),
            self.module.register_forward_pre_hook(tap_pre, with_kwargs=True, prepend=prepend),
            self.block.register_forward_hook(block_post, prepend=True),
        ])


def site_module(model, site: str):
    """The hook point of ``site``.

    An object with ``register_forward_hook(hook)`` whose hook sees the site's tensor as ``output``
    (a ``torch.nn.Module`` for ``output`` sites).
    """
    table = family_table(model)
    info = site_info(model, site)
    try:
        mod = _get(model.base_model, info.module)
    except (AttributeError, IndexError, TypeError):
        raise UnknownNameError(
            f"site {info.site!r}: model {type(model).__name__} lacks module {info.module!r} "
            f"that the {table.family} site table names"
        ) from None
    if info.hook == "output":
        return mod
    if info.hook == "input":
        return _InputHook(mod)
    block = _layers(model, table)[info.layer]
    return _TapHook(block, mod)

"""TransformerLens-style site names mapped onto Hugging Face modules.

Site names (``l`` is a block index; negative indices count from the end, ``blocks.-1`` = last):

- ``embed``: the input to block 0 (token + position embeddings; after BERT's embedding LayerNorm);
- ``blocks.{l}.resid_post``: the output of block l (the residual stream after it; for post-LN BERT
  this is after the block's final LayerNorm, for pre-LN GPT-2/Llama it is the raw residual sum);
- ``blocks.{l}.attn_out``: the attention sub-layer's output projection, before it is added to the
  residual stream (BERT: ``attention.output.dense``, before dropout/residual/LayerNorm);
- ``blocks.{l}.mlp_out``: the MLP's output before the residual add (BERT: ``output.dense``);
- ``ln_final``: the final LayerNorm/RMSNorm output (GPT-2 ``ln_f``, Llama ``norm``; BERT has none).

Families: ``bert`` (and ``roberta``-like models with ``encoder.layer``), ``gpt2``, and
Llama-style (``llama``, ``mistral``, ``qwen2``, SmolLM2, ... with ``layers[l].self_attn/.mlp``).
Weights are measured raw (no TransformerLens weight processing).
"""

from __future__ import annotations

import re

from tangentlab.errors import UnknownNameError

__all__ = ["SITE_KINDS", "available_sites", "normalize_site", "site_module", "site_semantics", "n_blocks"]

SITE_KINDS = ("embed", "resid_post", "attn_out", "mlp_out", "ln_final")
_BLOCK = re.compile(r"^blocks\.(-?\d+)\.(resid_post|attn_out|mlp_out)$")


def _layers(model):
    base = model.base_model
    if hasattr(base, "h"):  # gpt2
        return "gpt2", base, base.h
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):  # bert-like
        return "bert", base, base.encoder.layer
    if hasattr(base, "layers"):  # llama-like
        return "llama", base, base.layers
    raise UnknownNameError(
        f"no site mapping for model type {type(model).__name__}; supported: BERT-, GPT-2- and "
        "Llama-style models"
    )


def n_blocks(model) -> int:
    """Number of Transformer blocks."""
    return len(_layers(model)[2])


def normalize_site(model, site: str) -> str:
    """The canonical name of ``site`` (negative block indices resolved); unknown → UnknownNameError."""
    style, _, layers = _layers(model)
    n = len(layers)
    if site in ("embed", "ln_final"):
        if site == "ln_final" and style == "bert":
            raise UnknownNameError("site 'ln_final' does not exist in a BERT-style model (no final norm)")
        return site
    m = _BLOCK.match(site)
    if not m:
        raise UnknownNameError(
            f"unknown site {site!r}; use embed, ln_final or blocks.<l>.resid_post|attn_out|mlp_out "
            f"with 0 <= l < {n}"
        )
    idx = int(m.group(1))
    if not -n <= idx < n:
        raise UnknownNameError(f"site {site!r}: block index out of range; the model has {n} blocks")
    return f"blocks.{idx % n}.{m.group(2)}"


def available_sites(model) -> list[str]:
    """Every site name the model supports, in forward order."""
    style, _, layers = _layers(model)
    out = ["embed"]
    for i in range(len(layers)):
        out += [f"blocks.{i}.attn_out", f"blocks.{i}.mlp_out", f"blocks.{i}.resid_post"]
    if style != "bert":
        out.append("ln_final")
    return out


def site_module(model, site: str):
    """The ``torch.nn.Module`` whose forward output (first element if a tuple) is ``site``."""
    style, base, layers = _layers(model)
    site = normalize_site(model, site)
    if site == "embed":
        return {"gpt2": lambda: base.drop, "bert": lambda: base.embeddings,
                "llama": lambda: base.embed_tokens}[style]()
    if site == "ln_final":
        return base.ln_f if style == "gpt2" else base.norm
    _, idx, kind = site.split(".")
    blk = layers[int(idx)]
    if kind == "resid_post":
        return blk
    if style == "gpt2":
        return blk.attn if kind == "attn_out" else blk.mlp
    if style == "bert":
        return blk.attention.output.dense if kind == "attn_out" else blk.output.dense
    return blk.self_attn if kind == "attn_out" else blk.mlp


def site_semantics(model, site: str) -> str:
    """One line saying what the site's vector is in this model (recorded in manifests)."""
    style, _, _ = _layers(model)
    site = normalize_site(model, site)
    kind = site.split(".")[-1]
    text = {
        ("bert", "embed"): "token+position embeddings after the embedding LayerNorm",
        ("bert", "resid_post"): "block output after its final LayerNorm (post-LN: normalised)",
        ("gpt2", "embed"): "token+position embeddings (input to block 0)",
        ("llama", "embed"): "token embeddings (input to block 0; RoPE acts inside attention)",
        ("gpt2", "resid_post"): "raw residual stream after the block (pre-LN, unnormalised)",
        ("llama", "resid_post"): "raw residual stream after the block (pre-LN, unnormalised)",
    }.get((style, kind))
    if text is None:
        text = {"attn_out": "attention output projection before the residual add",
                "mlp_out": "MLP output before the residual add",
                "ln_final": "final normalisation output (input to the LM head)"}[kind]
    return f"{style} {site}: {text}"

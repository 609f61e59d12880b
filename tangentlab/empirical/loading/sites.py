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
:mod:`~tangentlab.empirical.loading.capture` needs no family knowledge):

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

from tangentlab.empirical.loading.site_table import (
    FAMILIES,
    FamilyTable,
    SiteSpec,
    supported_families,
)
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
    "normalize_site_in_config",
    "site_module",
    "site_info",
    "site_semantics",
    "n_blocks",
]

SITE_KINDS = ("embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "ln_final")
_BLOCK_KINDS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
_BLOCK = re.compile(r"^blocks\.(-?\d+)\.(?:hook_)?(resid_pre|resid_mid|resid_post|attn_out|mlp_out)$")
_GLOBAL_ALIASES = {"embed": "embed", "ln_final": "ln_final", "ln_final.hook_normalized": "ln_final"}

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


def _normalize(table: FamilyTable, n: int, kinds: tuple[str, ...], parallel: bool,
               site: str) -> str:
    """The canonical name of ``site`` in a ``table`` model of ``n`` blocks with block ``kinds``."""
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
        why = table.note if kind == "resid_mid" and parallel else "no such site"
        raise UnknownNameError(
            f"site {site!r} does not exist in a {table.family} model ({why}); block sites "
            f"available: {', '.join(kinds)}"
        )
    return f"blocks.{idx % n}.{kind}"


def normalize_site(model, site: str) -> str:
    """The canonical name of ``site`` (aliases and negative indices resolved).

    Raises:
        UnknownNameError: unknown name, block index out of range, a kind the family lacks, or a
            family without a site table.
    """
    table = family_table(model)
    return _normalize(table, len(_layers(model, table)), _kinds(model, table), _parallel(model),
                      site)


#: config.json keys that hold the number of blocks, tried in order
_N_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


def normalize_site_in_config(config: Mapping, site: str) -> str:
    """:func:`normalize_site` from a checkpoint's ``config.json`` alone (no weights loaded).

    ``config``: the parsed ``config.json`` (``model_type``, the number of blocks under
    ``num_hidden_layers``/``n_layer``/``num_layers``, GPT-NeoX's ``use_parallel_residual``).

    Raises:
        UnknownNameError: as :func:`normalize_site`, or a config without a site table or block
            count.
    """
    mt = str(config.get("model_type") or "")
    table = FAMILIES.get(mt)
    if table is None:
        raise UnknownNameError(
            f"model type {mt!r} has no site table; supported model types: "
            f"{', '.join(supported_families())}"
        )
    n = next((config[k] for k in _N_LAYER_KEYS if isinstance(config.get(k), int)), None)
    if n is None or isinstance(n, bool) or n < 1:
        raise UnknownNameError(
            f"the {mt} config gives no block count ({'/'.join(_N_LAYER_KEYS)}); is it a complete "
            "config.json?"
        )
    parallel = mt == "gpt_neox" and bool(config.get("use_parallel_residual", True))
    kinds = tuple(k for k in _BLOCK_KINDS if k in table.sites and not (parallel and k == "resid_mid"))
    return _normalize(table, int(n), kinds, parallel, site)


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


def _input_pre_hook(hook, on_edit=None):
    """The one body of both input wrappers: a forward pre-hook (``with_kwargs``).

    It calls ``hook(module, args, x)`` on the first input ``x``; a new tensor it returns replaces
    ``x`` (after ``on_edit(x, new)``), ``None`` or ``x`` itself leaves the input as it was.
    """

    def pre(mod, args, kwargs):
        x, where = _first_input(args, kwargs)
        if x is None:
            return None
        out = hook(mod, args, x)
        if out is None or out is x:
            return None
        if on_edit is not None:
            on_edit(x, out)
        return _with_input(args, kwargs, where, out)

    return pre


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
        return self.module.register_forward_pre_hook(_input_pre_hook(hook), with_kwargs=True,
                                                     prepend=prepend)


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

        def keep_delta(x, out):
            if out.shape == x.shape:  # otherwise the capture reports the shape
                state["delta"] = out - x

        tap_pre = _input_pre_hook(hook, on_edit=keep_delta)

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

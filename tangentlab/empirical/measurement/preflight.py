"""Pre-flight checks of ``measure``: every input checked before any weights are loaded.

:func:`preflight` resolves and checks, in seconds and without loading a model:

- the config (bounds, choices, the relations between keys; the old key names still work);
- the output path (:func:`tangentlab.runs.check_output_dir`);
- the trajectory: every checkpoint's revision (a Hub id through its cache), its ``config.json``
  (a JSON object of a family with a site table) and its weight files; every checkpoint must
  have the first one's structure (family, width, depth, heads, MLP width, vocabulary), so a
  checkpoint of another family, width or depth in the middle of a trajectory is refused before
  the first is measured;
- the sites, against the family's site table
  (:func:`~tangentlab.empirical.loading.sites.normalize_site_in_config`): a misspelt site, a block out of range, a kind the family lacks
  (``resid_mid`` in Pythia's parallel blocks);
- the rank (2r ≤ d, d from ``config.json``);
- the proxies (:func:`plan_proxies`): one spec per site, each a known extractor or a readable
  ``basis:`` source, whose shape is checked against d and the rank, and whose SAELens
  ``hook_name`` is checked against its site (:func:`check_hook`); the matrix itself is not read;
- the eval text, frequency table and text column named in the config (existence only).

A GGUF trajectory has no ``config.json``; its sites, rank and dictionaries are checked right
after the model is loaded, before any forward pass (:func:`plan_proxies` again). The dtype is
checked on the device by :func:`tangentlab.empirical.measurement.protocol.measure_trajectory` before loading.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tangentlab.empirical.measurement.measure_config import is_site_entry
from tangentlab.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    RankError,
    ShapeError,
    SiteMismatchError,
    UnknownNameError,
)

if TYPE_CHECKING:  # annotations only
    from tangentlab.empirical.loading.checkpoints import Trajectory
    from tangentlab.empirical.measurement.measure_config import MeasureConfig
    from tangentlab.measure.dictionaries import DictionaryInfo

__all__ = ["SiteProxy", "Preflight", "preflight", "read_configs", "plan_proxies", "check_hook",
           "same_tensor", "is_site_entry", "proxy_manifest", "loaded_site_plan",
           "ORTHONORMALISATION"]

#: config.json keys compared across a trajectory (the first present of each group), so that
#: every checkpoint has one structure
_STRUCTURE = {
    "model_type": ("model_type",),
    "hidden size": ("hidden_size", "n_embd", "d_model"),
    "blocks": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "heads": ("num_attention_heads", "n_head"),
    "MLP width": ("intermediate_size", "n_inner"),
    "vocabulary": ("vocab_size",),
    "parallel residual": ("use_parallel_residual",),
}


@dataclass(frozen=True)
class SiteProxy:
    """The proxy of one site: its spec and, for a ``basis:`` spec, what the source holds.

    Attributes:
        site: the canonical site name; ``spec``: the proxy (``pca``, ``basis:PATH``, ...).
        given: how the site was written where the spec was given (None: the default proxy).
        dictionary: the :class:`~tangentlab.measure.dictionaries.DictionaryInfo` of a basis.
        hook_site: the site the dictionary's SAELens ``hook_name`` resolves to, when it has one.
        orientation: how the basis is read (``columns``: (d, m); ``rows``: (m, d)); ``atoms``: m;
        ``select``: the atom selection rule that applies (``all``, ``first`` or ``energy``).
    """

    site: str
    spec: str
    given: str | None = None
    dictionary: DictionaryInfo | None = None
    hook_site: str | None = None
    orientation: str | None = None
    atoms: int | None = None
    select: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest record (the basis's source, shape, format and hook when a basis)."""
        out: dict[str, Any] = {"spec": self.spec, "method": self.spec.partition(":")[0],
                               "given_for": self.given}
        if self.dictionary is not None:
            out.update(self.dictionary.to_dict(), hook_site=self.hook_site,
                       orientation=self.orientation, atoms=self.atoms, select=self.select,
                       orthonormalisation=ORTHONORMALISATION)
        return out


#: how a basis's selected atoms become the proxy's orthonormal columns (the manifest's words)
ORTHONORMALISATION = ("QR of the selected atoms in index order (tangentlab.measure.subspace."
                      "orthonormalize: numpy.linalg.qr, signs making R's diagonal positive, so "
                      "column j lies in the span of selected atoms 0..j)")


@dataclass(frozen=True)
class Preflight:
    """What :func:`preflight` resolved: the config, the checkpoints, the sites and their proxies.

    ``sites``, ``hidden_size`` and ``proxies`` are None for a GGUF trajectory (checked after
    loading); ``configs`` holds each checkpoint's parsed ``config.json`` (empty for GGUF).
    """

    cfg: MeasureConfig
    trajectory: Trajectory
    checkpoints: tuple
    sites: tuple[str, ...] | None
    hidden_size: int | None
    proxies: Mapping[str, SiteProxy] | None
    configs: tuple[dict, ...] = field(default=())


def _first(config: Mapping, keys: Sequence[str]):
    return next((config[k] for k in keys if k in config), None)


def read_configs(checkpoints: Sequence) -> tuple[dict, ...]:
    """Every checkpoint's ``config.json``, checked to share the first one's structure.

    Raises:
        CheckpointError: a config that is missing, not JSON, not a JSON object, or whose family,
            width, depth, heads, MLP width or vocabulary differs from the first checkpoint's.
    """
    out: list[dict] = []
    first_sig = None
    for ck in checkpoints:
        f = Path(ck.path) / "config.json"
        try:
            cfg = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"checkpoint {ck.name!r}: {str(f)!r} is unreadable "
                                  f"({type(exc).__name__})") from None
        if not isinstance(cfg, dict):
            raise CheckpointError(f"checkpoint {ck.name!r}: {str(f)!r} holds a "
                                  f"{type(cfg).__name__}, not a JSON object of model settings")
        sig = {name: _first(cfg, keys) for name, keys in _STRUCTURE.items()}
        if first_sig is None:
            first_sig = sig
        else:
            diff = [f"{k} {first_sig[k]!r} → {sig[k]!r}" for k in sig if sig[k] != first_sig[k]]
            if diff:
                raise CheckpointError(
                    f"checkpoint {ck.name!r} (step {ck.step}) does not match the trajectory's "
                    f"first checkpoint {checkpoints[0].name!r}: {'; '.join(diff)}; a trajectory "
                    "holds checkpoints of one model"
                )
        out.append(cfg)
    return tuple(out)


def same_tensor(a: str, b: str) -> bool:
    """Whether canonical sites ``a`` and ``b`` name one tensor.

    ``resid_pre.0`` is ``embed``, and ``resid_pre.(l+1)`` is ``resid_post.l``.
    """
    def key(s: str) -> str:
        parts = s.split(".")
        if s == "embed":
            return "blocks.0.resid_pre"
        if len(parts) == 3 and parts[2] == "resid_post":
            return f"blocks.{int(parts[1]) + 1}.resid_pre"
        return s

    return key(a) == key(b)


def check_hook(site: str, info, normalize: Callable[[str], str]) -> str | None:
    """The site a dictionary's SAELens ``hook_name`` names, checked to be ``site``'s tensor.

    ``normalize`` maps a site name (TransformerLens hook names included) to its canonical form.
    Returns None when the source names no hook (a plain file or a sparsify folder).

    Raises:
        SiteMismatchError: the hook is another site, or no site of this model.
    """
    from tangentlab.measure.dictionaries import hook_name

    hook = hook_name(info.meta) if info.fmt == "saelens" else None
    if hook is None:
        return None
    try:
        at = normalize(hook)
    except UnknownNameError:
        at = None
    if at is None or not same_tensor(at, site):
        where = f"site {at!r}" if at else "no site tangentlab measures"
        raise SiteMismatchError(
            f"dictionary {info.source!r} was trained at hook {hook!r} ({where}) but is given for "
            f"site {site!r}; give it as {at or 'its own site'}=basis:... (or pass its weights "
            "file itself to skip the hook check)"
        )
    return at


def _check_spec(spec: str) -> None:
    from tangentlab.measure.proxies import PROXY_NAMES, make_proxy

    if spec.startswith("basis:"):
        est = make_proxy(spec)  # unknown options are ConfigErrors
        for name, allowed in (("orientation", ("auto", "rows", "columns")),
                              ("select", ("auto", "first", "energy"))):
            if getattr(est, name) not in allowed:
                raise ConfigError(f"proxy {spec!r}: {name} must be {', '.join(allowed)}; got "
                                  f"{getattr(est, name)!r}")
    elif spec.partition(":")[0].lower() in ("saelens", "hub") or spec.endswith(
            (".npy", ".safetensors")):
        raise UnknownNameError(
            f"unknown proxy {spec!r}: a dictionary or basis is given after 'basis:', as "
            f"basis:{spec} (with a site: SITE=basis:{spec})")
    elif spec.lower() not in PROXY_NAMES:
        raise UnknownNameError(
            f"unknown proxy {spec!r}; choose one of {', '.join(PROXY_NAMES)}, basis:PATH, or "
            "SITE=NAME for one site"
        )


def _check_basis(sp: SiteProxy, d: int, rank: int, normalize) -> SiteProxy:
    """``sp`` with its dictionary inspected and checked against d, the rank and its site."""
    from tangentlab.measure.dictionaries import inspect_dictionary
    from tangentlab.measure.proxies import make_proxy

    est = make_proxy(sp.spec)
    info = inspect_dictionary(est.source, key=est.key)
    rows, cols = info.shape
    orient = est.orientation if est.orientation != "auto" else info.orientation
    if orient is None:
        orient = "columns" if rows == d else "rows" if cols == d else None
    feat, atoms = (rows, cols) if orient == "columns" else (cols, rows)
    if orient is None or feat != d:
        raise ShapeError(
            f"basis {est.source!r} for site {sp.site!r} has shape {info.shape} but the model's "
            f"activations have d={d}" + ("" if orient is None else f" (read as {orient})")
            + "; was it trained for another model or site?"
        )
    if rank > atoms:
        raise RankError(f"rank {rank} but basis {est.source!r} for site {sp.site!r} has only "
                        f"{atoms} atoms; lower the rank")
    hook_site = check_hook(sp.site, info, normalize)
    select = est.select if est.select != "auto" else ("energy" if atoms > d else "first")
    return SiteProxy(sp.site, sp.spec, sp.given, info, hook_site, orient, atoms,
                     "all" if rank == atoms else select)


def proxy_manifest(plan: Mapping[str, SiteProxy], fixed: Mapping[str, Any]) -> dict[str, dict]:
    """The manifest's ``proxies``: per site its spec and, for a basis, what was kept.

    ``fixed``: {site: Q_T (d, r)}. For a basis the record adds ``atoms_kept``, the indices of
    the dictionary's atoms that lie in span(Q_T)
    (:func:`~tangentlab.measure.dictionaries.atoms_in_span`; the selected atoms, for a
    dictionary in general position).
    """
    import numpy as np

    from tangentlab.measure.dictionaries import atoms_in_span, load_dictionary

    out = {}
    for site, sp in plan.items():
        rec = sp.to_dict()
        Q = fixed.get(site)
        if sp.dictionary is not None and Q is not None:
            M = load_dictionary(sp.dictionary.source, key=sp.dictionary.key).matrix
            D = M if sp.orientation == "columns" else M.T
            rec["atoms_kept"] = atoms_in_span(D, np.asarray(Q))
        out[site] = rec
    return out


def plan_proxies(entries: Sequence[str], sites: Sequence[str], normalize: Callable[[str], str],
                 *, d: int | None = None, rank: int | None = None) -> dict[str, SiteProxy]:
    """The proxy of each canonical site from the config's ``proxy`` entries.

    ``NAME`` serves every site without its own ``SITE=NAME`` entry; a plain ``basis:`` entry may
    serve one site only (a dictionary belongs to one site). With ``d`` and ``rank`` each basis
    is inspected and checked (:func:`check_hook` included).

    Raises:
        ConfigError: an entry for a site not measured, two entries for one site, a site left
            without a proxy, or a plain basis for several sites.
        UnknownNameError: an unknown proxy name or site name.
        ShapeError, RankError, SiteMismatchError, DataError: a basis that does not fit.
    """
    default = None
    own: dict[str, SiteProxy] = {}
    for entry in entries:
        entry = str(entry).strip()
        if not is_site_entry(entry):
            default = entry
            continue
        given, _, spec = entry.partition("=")
        spec = spec.strip()
        try:
            site = normalize(given.strip())
        except UnknownNameError as exc:
            raise UnknownNameError(f"proxy {entry!r}: {exc}") from None
        if site not in sites:
            raise ConfigError(f"proxy {entry!r} names site {site!r}, which is not measured "
                              f"(sites: {', '.join(sites)}); add it to sites or drop the entry")
        if site in own:
            raise ConfigError(f"proxy entries {own[site].given}=… and {given}=… both name site "
                              f"{site!r}; give one")
        _check_spec(spec)
        own[site] = SiteProxy(site, spec, given.strip())
    rest = [s for s in sites if s not in own]
    if rest and default is None:
        raise ConfigError(f"site(s) {', '.join(rest)} have no proxy; add SITE=NAME for each, or "
                          "one NAME (e.g. pca) for every site without its own")
    if default is not None:
        _check_spec(default)
        if default.startswith("basis:") and len(rest) > 1:
            raise ConfigError(
                f"proxy {default!r} would apply one dictionary to {len(rest)} sites "
                f"({', '.join(rest)}); a dictionary belongs to one site: use SITE=basis:... "
                "for each site (or measure one site)"
            )
    plan = {s: own.get(s) or SiteProxy(s, default) for s in sites}
    if d is not None and rank is not None:
        plan = {s: _check_basis(p, d, rank, normalize) if p.spec.startswith("basis:") else p
                for s, p in plan.items()}
    return plan


def loaded_site_plan(pf, model, cfg) -> tuple[tuple[str, ...], int, dict]:
    """(sites, d, site → SiteProxy) of the loaded first ``model``, as ``pf`` found them.

    A GGUF trajectory had no config.json to check: its sites, rank and dictionaries are checked
    here, after loading and before any forward pass.
    """
    from tangentlab.empirical.loading.sites import normalize_site

    sites = tuple(normalize_site(model, s) for s in cfg.sites)
    d = int(model.config.hidden_size)
    if pf is not None and pf.sites is not None:
        if sites != pf.sites or d != pf.hidden_size:
            raise CheckpointError(
                f"the loaded model has sites {sites} and d={d} but its config.json said "
                f"{pf.sites} and d={pf.hidden_size}; is the checkpoint folder consistent?")
        return sites, d, dict(pf.proxies)
    if len(set(sites)) != len(sites):
        raise ConfigError(f"sites {cfg.sites} name the same site twice")
    if 2 * cfg.rank > d:
        raise RankError(
            f"rank {cfg.rank} is too large for hidden size d={d}: the matched-rank controls "
            f"need 2r <= d, so use rank <= {d // 2}"
        )
    return sites, d, plan_proxies(cfg.proxy, sites, lambda s: normalize_site(model, s),
                                  d=d, rank=cfg.rank)


def _check_eval_text(cfg, traj, *, fraction_given: bool = False) -> None:
    """The eval text, frequency table and text column the config names exist and fit.

    ``fraction_given``: eval_fraction was set by the caller (a flag, ``--set`` or a config file),
    which needs an eval_text to split.
    """
    from tangentlab.empirical.loading.corpus import BUILTIN_CORPORA, DATASET_FORMATS

    src = cfg.eval_text
    if src:
        prefix, sep, rest = src.partition(":")
        path = Path(rest if sep and prefix in DATASET_FORMATS else src).expanduser()
        if src not in BUILTIN_CORPORA and not path.exists():
            raise UnknownNameError(
                f"eval text {src!r} is neither a built-in corpus ({', '.join(BUILTIN_CORPORA)}) "
                "nor an existing file or folder"
            )
        tabular = (sep and prefix in ("json", "parquet")) or path.is_dir() or \
            path.suffix in (".jsonl", ".json", ".parquet")
        if cfg.text_column != "text" and not tabular:
            raise ConfigError(
                f"text_column={cfg.text_column!r} applies to .jsonl/json/parquet eval text, but "
                f"{src!r} is plain text or a built-in corpus"
            )
    elif cfg.text_column != "text":
        raise ConfigError(f"text_column={cfg.text_column!r} names the column of eval_text; give "
                          "eval_text too")
    elif fraction_given:
        raise ConfigError(
            f"eval_fraction={cfg.eval_fraction} (--eval-fraction) splits the documents of "
            "eval_text, but no eval_text (--eval-text) is given: the training run's own held-out "
            "documents are measured as they are. Give --eval-text too, or drop --eval-fraction")
    if cfg.frequency_table and not Path(cfg.frequency_table).expanduser().is_file():
        raise DataError(f"frequency table {cfg.frequency_table!r} does not exist; give a CSV of "
                        "token_id,count")
    counts_from_split = not cfg.frequency_table and (bool(src) or traj.frequency_file is None)
    if cfg.eval_fraction >= 1 and counts_from_split:
        raise ConfigError(
            "eval_fraction=1 makes all of the eval text eval text and leaves none to count token "
            "frequencies on; give a frequency_table (--frequency-table) or an eval_fraction < 1"
        )


def preflight(trajectory, out_dir=None, *, seed: int | None = 0, overrides=None,
              config_path=None, gguf: bool = False, out_kind: str | None = None) -> Preflight:
    """Check every input of :func:`~tangentlab.empirical.measurement.protocol.measure_trajectory` up front.

    Reads configs and file headers only (no model weights, no tokenizer, no eval text). See the
    module docstring for what is checked; each failure is a typed error naming the input.
    ``out_kind``: the run kind ``out_dir`` may already hold (None: any run, or nothing).
    """
    from tangentlab.empirical.loading.sites import normalize_site_in_config
    from tangentlab.empirical.loading.trajectory import resolve_trajectory
    from tangentlab.empirical.measurement.measure_config import (
        resolve_measure_config,
        spread_indices,
    )
    from tangentlab.runs import check_output_dir

    cfg = resolve_measure_config(overrides, config_path, seed)
    if out_dir is not None:
        check_output_dir(out_dir, kind=out_kind)
    traj = resolve_trajectory(trajectory, gguf=gguf)
    cks = list(traj.checkpoints)
    if cfg.max_checkpoints and len(cks) > cfg.max_checkpoints:
        cks = [cks[i] for i in sorted(spread_indices(len(cks), cfg.max_checkpoints))]
    from tangentlab.empirical.measurement.measure_config import MeasureConfig

    given = "eval_fraction" in (overrides or {}) or \
        cfg.eval_fraction != MeasureConfig.__dataclass_fields__["eval_fraction"].default
    _check_eval_text(cfg, traj, fraction_given=given)
    for entry in cfg.proxy:  # the names, before any site is known
        _check_spec(str(entry).partition("=")[2].strip() if is_site_entry(entry) else str(entry))
    if any(ck.gguf_file for ck in cks):
        return Preflight(cfg, traj, tuple(cks), None, None, None)
    configs = read_configs(cks)
    first = configs[0]

    def normalize(site: str) -> str:
        return normalize_site_in_config(first, site)

    sites = tuple(normalize(s) for s in cfg.sites)
    if len(set(sites)) != len(sites):
        raise ConfigError(f"sites {cfg.sites} name the same site twice ({', '.join(sites)})")
    d = _first(first, _STRUCTURE["hidden size"])
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise CheckpointError(f"checkpoint {cks[0].name!r}: config.json gives no hidden size "
                              "(hidden_size, n_embd or d_model)")
    if 2 * cfg.rank > d:
        raise RankError(
            f"rank {cfg.rank} is too large for hidden size d={d}: the matched-rank controls "
            f"need 2r <= d, so use rank <= {d // 2}"
        )
    proxies = plan_proxies(cfg.proxy, sites, normalize, d=d, rank=cfg.rank)
    return Preflight(cfg, traj, tuple(cks), sites, d, proxies, configs)


"""Read a basis or a dictionary's decoder matrix from disk (or the Hugging Face Hub cache).

Sources (:func:`load_dictionary`):

- a ``.npy`` file holding one 2-D array (read with ``allow_pickle=False``);
- a ``.safetensors`` file: the tensor named by ``key``, else its only tensor, else the first of
  ``W_dec``, ``decoder.weight``, ``basis``, ``components``, ``Q``;
- a SAELens folder (``cfg.json`` + ``sae_weights.safetensors``): ``W_dec``, stored
  ``(d_sae, d_in)``, one dictionary atom per **row**;
- a sparsify (EleutherAI) folder (``cfg.json`` + ``sae.safetensors``): ``W_dec``, stored
  ``(num_latents, d_in)``, one atom per **row**;
- ``hub:ORG/NAME`` or ``hub:ORG/NAME/SUBFOLDER``: that repository (or one folder of it, e.g. a
  sparsify hookpoint ``layers.6`` or a SAELens ``blocks.8.hook_resid_pre``) fetched through
  ``huggingface_hub.snapshot_download`` and its cache (``HF_HUB_OFFLINE=1``: cache only), then
  read as above;
- ``saelens:RELEASE/SAE_ID``: a SAELens *release name* and SAE id (for example
  ``saelens:gpt2-small-res-jb/blocks.8.hook_resid_pre``), looked up in ``sae_lens``' own registry
  (its ``pretrained_saes.yaml``, through ``get_pretrained_saes_directory``) and read as the
  ``hub:REPO/FOLDER`` it names. This needs the optional ``sae_lens`` package
  (``pip install 'tangentlab[sae]'``); without it the source is a :class:`DataError` saying so.

:func:`inspect_dictionary` reads only what a file says about itself (the matrix shape, the
tensor name, the folder's ``cfg.json``), not the matrix, so a basis can be checked against a
model before any weights are loaded. :func:`hook_name` is the hook a SAELens ``cfg.json`` names
(``hook_name``, ``metadata.hook_name``, or the pre-6.0 ``hook_point``).

The orientation a format fixes is recorded (``rows`` for SAE decoders); plain files leave it to
the caller (:class:`~tangentlab.measure.proxies.BasisProxy` applies its rule).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tangentlab.errors import DataError, ShapeError, UnknownNameError

__all__ = ["DictionaryMatrix", "DictionaryInfo", "DECODER_KEYS", "SAELENS_PREFIX",
           "load_dictionary", "inspect_dictionary", "hook_name", "resolve_saelens_release",
           "atoms_in_span"]

#: the source prefix of a SAELens release name (``saelens:RELEASE/SAE_ID``)
SAELENS_PREFIX = "saelens:"

#: tensor names tried, in order, in a safetensors file with several tensors
DECODER_KEYS = ("W_dec", "decoder.weight", "basis", "components", "Q")


@dataclass(frozen=True)
class DictionaryMatrix:
    """A 2-D matrix read from a source.

    Attributes:
        matrix: float64 array as stored (2-D).
        orientation: ``"rows"`` (one atom per row) or ``"columns"`` when the format fixes it,
            None when the caller must decide.
        fmt: ``npy``, ``safetensors``, ``saelens`` or ``sparsify``.
        source: what was asked for; ``path``: the file read; ``key``: the tensor name (or None).
        meta: what the format's ``cfg.json`` says (hook name, d_in, ...), when there is one.
    """

    matrix: np.ndarray
    orientation: str | None
    fmt: str
    source: str
    path: str
    key: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DictionaryInfo:
    """What a source says about its matrix without reading it (:func:`inspect_dictionary`).

    Attributes:
        shape: the stored matrix shape ``(rows, columns)``.
        orientation, fmt, source, path, key, meta: as in :class:`DictionaryMatrix`.
    """

    shape: tuple[int, int]
    orientation: str | None
    fmt: str
    source: str
    path: str
    key: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The manifest record: source, path, format, key, shape, orientation, hook name."""
        return {"source": self.source, "path": self.path, "format": self.fmt, "key": self.key,
                "shape": list(self.shape), "stored_orientation": self.orientation,
                "hook_name": hook_name(self.meta)}


def _pick_key(keys: list[str], key: str | None, path: Path) -> str:
    if key is None:
        if len(keys) == 1:
            return keys[0]
        key = next((k for k in DECODER_KEYS if k in keys), None)
        if key is None:
            raise DataError(
                f"{str(path)!r} holds tensors {keys[:10]}; name the basis with "
                f"key=... (tried {', '.join(DECODER_KEYS)})"
            )
    elif key not in keys:
        raise DataError(f"{str(path)!r} has no tensor {key!r}; it holds {keys[:10]}")
    return key


def _read_safetensors(path: Path, key: str | None) -> tuple[np.ndarray, str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            key = _pick_key(list(fh.keys()), key, path)
            t = fh.get_tensor(key)
    except (SafetensorError, OSError) as exc:
        raise DataError(f"cannot read {str(path)!r} as safetensors ({exc})") from None
    return t.detach().to("cpu").double().numpy(), key


def _safetensors_shape(path: Path, key: str | None) -> tuple[tuple[int, ...], str]:
    """The shape of the tensor ``key`` picks (as :func:`_read_safetensors`), from the header."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as fh:
            key = _pick_key(list(fh.keys()), key, path)
            shape = tuple(int(x) for x in fh.get_slice(key).get_shape())
    except (SafetensorError, OSError) as exc:
        raise DataError(f"cannot read {str(path)!r} as safetensors ({exc})") from None
    return shape, key


def _check(arr: np.ndarray, path: Path) -> np.ndarray:
    if arr.ndim != 2:
        raise ShapeError(f"{str(path)!r} holds an array of shape {arr.shape}; a basis must be 2-D")
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise DataError(f"{str(path)!r} holds a {arr.dtype} array; a basis must be real numbers")
    return np.asarray(arr, dtype=np.float64)


def _cfg(folder: Path) -> dict:
    try:
        return json.loads((folder / "cfg.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{str(folder / 'cfg.json')!r} is unreadable ({exc})") from None


_SAE_FOLDERS = (("sae_weights.safetensors", "saelens"), ("sae.safetensors", "sparsify"))


def _kind(p: Path, key: str | None) -> tuple[str, Path, str | None]:
    """(format, weights file, key) of a local source ``p``, checked to exist."""
    if p.is_dir():
        for weights, fmt in _SAE_FOLDERS:
            if (p / weights).is_file() and (p / "cfg.json").is_file():
                return fmt, p / weights, key or "W_dec"
        raise DataError(
            f"folder {str(p)!r} is neither a SAELens dictionary (cfg.json + "
            "sae_weights.safetensors) nor a sparsify one (cfg.json + sae.safetensors)"
        )
    if not p.is_file():
        raise DataError(f"basis file {str(p)!r} does not exist")
    if p.suffix == ".npy":
        if key is not None:
            raise DataError(f"key={key!r} applies to .safetensors files, not {str(p)!r}")
        return "npy", p, None
    if p.suffix == ".safetensors":
        return "safetensors", p, key
    raise DataError(
        f"basis {str(p)!r}: use a .npy or .safetensors file, a SAELens/sparsify folder, "
        "hub:ORG/NAME[/FOLDER] or saelens:RELEASE/SAE_ID"
    )


def _from_path(p: Path, source: str, key: str | None) -> DictionaryMatrix:
    fmt, f, key = _kind(p, key)
    if fmt == "npy":
        try:
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read {str(f)!r} as .npy ({exc})") from None
        return DictionaryMatrix(_check(arr, f), None, "npy", source, str(f))
    arr, k = _read_safetensors(f, key)
    if fmt == "safetensors":
        return DictionaryMatrix(_check(arr, f), None, "safetensors", source, str(f), k)
    return DictionaryMatrix(_check(arr, f), "rows", fmt, source, str(f), k, _cfg(p))


def _info_from_path(p: Path, source: str, key: str | None) -> DictionaryInfo:
    fmt, f, key = _kind(p, key)
    if fmt == "npy":
        try:
            arr = np.load(f, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read {str(f)!r} as .npy ({exc})") from None
        shape, k = tuple(arr.shape), None
        if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
            raise DataError(f"{str(f)!r} holds a {arr.dtype} array; a basis must be real numbers")
    else:
        shape, k = _safetensors_shape(f, key)
    if len(shape) != 2:
        raise ShapeError(f"{str(f)!r} holds an array of shape {shape}; a basis must be 2-D")
    meta = _cfg(p) if fmt in ("saelens", "sparsify") else {}
    orientation = "rows" if fmt in ("saelens", "sparsify") else None
    return DictionaryInfo((int(shape[0]), int(shape[1])), orientation, fmt, source, str(f), k,
                          meta)


def hook_name(meta: dict[str, Any]) -> str | None:
    """The hook a SAELens ``cfg.json`` names, or None.

    ``hook_name`` (SAELens 6), ``metadata.hook_name``, or ``hook_point`` (before 6.0).
    """
    if not isinstance(meta, dict):
        return None
    for holder in (meta, meta.get("metadata") if isinstance(meta.get("metadata"), dict) else {}):
        for k in ("hook_name", "hook_point"):
            v = holder.get(k)
            if isinstance(v, str) and v:
                return v
    return None


def resolve_saelens_release(spec: str) -> tuple[str, str]:
    """``RELEASE/SAE_ID`` → ``(repo_id, folder)`` through ``sae_lens``' registry.

    The registry is ``sae_lens``' ``get_pretrained_saes_directory()`` (its
    ``pretrained_saes.yaml``); ``sae_lens`` is imported only here.

    Raises:
        DataError: ``sae_lens`` is not installed (install the ``sae`` extra), or the release
            stores its SAEs in a format that needs a conversion function.
        UnknownNameError: no such release, or no such SAE id in it (the message lists some).
    """
    release, sep, sae_id = str(spec).strip().partition("/")
    if not release or not sep or not sae_id:
        raise UnknownNameError(
            f"{SAELENS_PREFIX}{spec}: write {SAELENS_PREFIX}RELEASE/SAE_ID, e.g. "
            f"{SAELENS_PREFIX}gpt2-small-res-jb/blocks.8.hook_resid_pre"
        )
    directory = _saelens_directory()
    lookup = directory.get(release)
    if lookup is None:
        near = sorted(r for r in directory if r.split("-")[0] == release.split("-")[0])[:8]
        raise UnknownNameError(
            f"SAELens has no release {release!r}"
            + (f"; releases like it: {', '.join(near)}" if near else "")
            + "; or give the repository as hub:ORG/NAME/FOLDER"
        )
    saes = dict(getattr(lookup, "saes_map", {}) or {})
    if sae_id not in saes:
        raise UnknownNameError(
            f"SAELens release {release!r} has no SAE {sae_id!r}; it has {len(saes)}, e.g. "
            f"{', '.join(list(saes)[:6])}"
        )
    conv = getattr(lookup, "conversion_func", None)
    if conv:
        raise DataError(
            f"SAELens release {release!r} stores its SAEs in another format (conversion "
            f"{conv!r}); tangentlab reads SAELens-format folders (cfg.json + "
            "sae_weights.safetensors): convert it with sae_lens and pass the folder"
        )
    return str(lookup.repo_id), str(saes[sae_id])


def _saelens_directory() -> dict:
    try:
        from sae_lens.loading.pretrained_saes_directory import get_pretrained_saes_directory
    except ImportError:
        try:  # sae_lens before 6: the registry lived in sae_lens.toolkit
            from sae_lens.toolkit.pretrained_saes_directory import (
                get_pretrained_saes_directory,
            )
        except ImportError:
            raise DataError(
                "SAELens release names (saelens:RELEASE/SAE_ID) are looked up in sae_lens' "
                "registry: install the sae extra (pip install 'tangentlab[sae]'), or give the "
                "folder as hub:ORG/NAME/FOLDER or a local path"
            ) from None
    return dict(get_pretrained_saes_directory())


def atoms_in_span(D: np.ndarray, Q: np.ndarray, tol: float = 1e-8) -> list[int]:
    """Indices of the atoms (columns of ``D``, shape (d, m)) lying in span(``Q``), ``Q`` (d, r).

    An atom is in the span when its unit vector keeps a squared norm ≥ 1 − ``tol`` under the
    projection ``Q Qᵀ`` (zero atoms never are). For a basis built by QR of r selected atoms of
    a dictionary in general position these are exactly the selected atoms.
    """
    D = np.asarray(D, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    norms = np.linalg.norm(D, axis=0)
    ok = norms > 0
    U = D[:, ok] / norms[ok]
    kept = np.sum((Q.T @ U) ** 2, axis=0) >= 1.0 - tol
    return [int(i) for i in np.flatnonzero(ok)[kept]]


def _hub_folder(spec: str, *, cache_dir=None, offline: bool | None = None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    parts = spec.strip("/").split("/")
    if len(parts) < 2:
        raise UnknownNameError(f"hub:{spec}: write hub:ORG/NAME or hub:ORG/NAME/FOLDER")
    repo, sub = "/".join(parts[:2]), "/".join(parts[2:])
    if offline is None:
        v = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
        offline = v.strip().upper() in {"1", "ON", "YES", "TRUE"}
    if cache_dir is None:
        if os.environ.get("HF_HUB_CACHE"):
            cache_dir = os.environ["HF_HUB_CACHE"]
        elif os.environ.get("HF_HOME"):
            cache_dir = str(Path(os.environ["HF_HOME"]) / "hub")
    patterns = [sub, f"{sub}/*"] if sub else ["*.json", "*.safetensors", "*.npy"]
    endpoint = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or None
    try:
        folder = Path(snapshot_download(repo, cache_dir=cache_dir, local_files_only=offline,
                                        allow_patterns=patterns, endpoint=endpoint))
    except (RepositoryNotFoundError, RevisionNotFoundError, LocalEntryNotFoundError,
            HFValidationError) as exc:
        where = "in the Hub cache (offline)" if offline else "on the Hub"
        raise UnknownNameError(
            f"dictionary repository {repo!r} was not found {where} ({type(exc).__name__})"
        ) from None
    target = folder / sub if sub else folder
    if not target.exists():
        raise UnknownNameError(f"{repo!r} has no folder {sub!r}")
    return target


def _locate(source: str, key: str | None, cache_dir, offline) -> Path:
    """The local path of ``source`` (``hub:`` and ``saelens:`` sources fetched through the cache)."""
    s = str(source)
    if s.startswith(SAELENS_PREFIX):
        repo, folder = resolve_saelens_release(s[len(SAELENS_PREFIX):])
        s = f"hub:{repo}/{folder}".rstrip("/")
    if not s.startswith("hub:"):
        return Path(s).expanduser()
    folder = _hub_folder(s[4:], cache_dir=cache_dir, offline=offline)
    if folder.is_dir() and not (folder / "cfg.json").is_file() and not any(
            (folder / w).is_file() for w, _ in _SAE_FOLDERS):
        files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.npy"))
        if len(files) != 1:
            raise DataError(
                f"{source}: found {len(files)} basis files ({[f.name for f in files][:5]}); "
                "name a folder with one SAE, or one file"
            )
        folder = files[0]
    return folder


def load_dictionary(source: str | Path, *, key: str | None = None, cache_dir=None,
                    offline: bool | None = None) -> DictionaryMatrix:
    """Read the matrix of ``source`` (see the module docstring).

    Raises:
        DataError: missing or unreadable file, unknown format, no tensor to pick, or a SAELens
            release name without ``sae_lens`` installed.
        ShapeError: the array is not 2-D.
        UnknownNameError: a ``hub:`` repository or folder, or a SAELens release or SAE id,
            that cannot be found.
    """
    return _from_path(_locate(str(source), key, cache_dir, offline), str(source), key)


def inspect_dictionary(source: str | Path, *, key: str | None = None, cache_dir=None,
                       offline: bool | None = None) -> DictionaryInfo:
    """What ``source`` holds (shape, format, key, ``cfg.json``) without reading the matrix.

    Raises the same errors as :func:`load_dictionary` (a ``hub:`` source is fetched the same way).
    """
    return _info_from_path(_locate(str(source), key, cache_dir, offline), str(source), key)

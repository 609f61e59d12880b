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
  read as above. SAELens *release names* map to such a repository and folder in SAELens'
  ``pretrained_saes.yaml``.

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

__all__ = ["DictionaryMatrix", "DECODER_KEYS", "load_dictionary"]

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


def _read_safetensors(path: Path, key: str | None) -> tuple[np.ndarray, str]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            keys = list(fh.keys())
            if key is None:
                if len(keys) == 1:
                    key = keys[0]
                else:
                    key = next((k for k in DECODER_KEYS if k in keys), None)
                    if key is None:
                        raise DataError(
                            f"{str(path)!r} holds tensors {keys[:10]}; name the basis with "
                            f"key=... (tried {', '.join(DECODER_KEYS)})"
                        )
            elif key not in keys:
                raise DataError(f"{str(path)!r} has no tensor {key!r}; it holds {keys[:10]}")
            t = fh.get_tensor(key)
    except (SafetensorError, OSError) as exc:
        raise DataError(f"cannot read {str(path)!r} as safetensors ({exc})") from None
    return t.detach().to("cpu").double().numpy(), key


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


def _from_path(p: Path, source: str, key: str | None) -> DictionaryMatrix:
    if p.is_dir():
        for weights, fmt in (("sae_weights.safetensors", "saelens"), ("sae.safetensors", "sparsify")):
            if (p / weights).is_file() and (p / "cfg.json").is_file():
                arr, k = _read_safetensors(p / weights, key or "W_dec")
                return DictionaryMatrix(_check(arr, p / weights), "rows", fmt, source,
                                        str(p / weights), k, _cfg(p))
        raise DataError(
            f"folder {str(p)!r} is neither a SAELens dictionary (cfg.json + "
            "sae_weights.safetensors) nor a sparsify one (cfg.json + sae.safetensors)"
        )
    if not p.is_file():
        raise DataError(f"basis file {str(p)!r} does not exist")
    if p.suffix == ".npy":
        if key is not None:
            raise DataError(f"key={key!r} applies to .safetensors files, not {str(p)!r}")
        try:
            arr = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read {str(p)!r} as .npy ({exc})") from None
        return DictionaryMatrix(_check(arr, p), None, "npy", source, str(p))
    if p.suffix == ".safetensors":
        arr, k = _read_safetensors(p, key)
        return DictionaryMatrix(_check(arr, p), None, "safetensors", source, str(p), k)
    raise DataError(
        f"basis {str(p)!r}: use a .npy or .safetensors file, a SAELens/sparsify folder, or "
        "hub:ORG/NAME[/FOLDER]"
    )


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


def load_dictionary(source: str | Path, *, key: str | None = None, cache_dir=None,
                    offline: bool | None = None) -> DictionaryMatrix:
    """Read the matrix of ``source`` (see the module docstring).

    Raises:
        DataError: missing or unreadable file, unknown format, or no tensor to pick.
        ShapeError: the array is not 2-D.
        UnknownNameError: a ``hub:`` repository or folder that cannot be found.
    """
    s = str(source)
    if s.startswith("hub:"):
        folder = _hub_folder(s[4:], cache_dir=cache_dir, offline=offline)
        if folder.is_dir() and not (folder / "cfg.json").is_file() and not any((folder / w).is_file()
                                       for w in ("sae_weights.safetensors", "sae.safetensors")):
            files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.npy"))
            if len(files) != 1:
                raise DataError(
                    f"{s}: found {len(files)} basis files ({[f.name for f in files][:5]}); "
                    "name a folder with one SAE, or one file"
                )
            folder = files[0]
        return _from_path(folder, s, key)
    return _from_path(Path(s).expanduser(), s, key)

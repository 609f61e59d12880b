"""Resumable measurement: each finished checkpoint is written atomically to a partial folder.

``measure_trajectory`` measures checkpoint by checkpoint. After each one it saves, under
``<out>.partial/`` (a hidden sibling of the run folder), everything the later steps need from it:
its results rows (JSON, floats round-trip exactly), its checkpoint record, and per site the
frequency scatter, the centroids of the trajectory statistic and the refit proxy (npz). With
``resume=True`` a later call loads the checkpoints already there instead of measuring them again,
so the final ``results.csv`` equals an uninterrupted run's byte for byte. The partial folder
records the config hash and the checkpoint list; a partial folder of a different config or
trajectory is refused. It is removed once the run folder is complete, and also when the run
stops on a tangentlab error (bad input: the CLI's contract is no partial output); any other
interruption (a kill, Ctrl-C, a crash) keeps it for ``--resume``.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError

__all__ = ["PartialRun", "partial_dir"]

_META = "partial.json"


def partial_dir(out_dir: str | Path) -> Path:
    """The partial folder of the run folder ``out_dir``: ``.<name>.partial`` beside it."""
    out = Path(out_dir)
    return out.with_name(f".{out.name}.partial")


class PartialRun:
    """The checkpoints finished so far of one measurement (see the module docstring)."""

    def __init__(self, out_dir: str | Path, *, config_hash: str, checkpoints: list[str],
                 resume: bool):
        self.folder = partial_dir(out_dir)
        self.meta = {"config_hash": config_hash, "checkpoints": list(checkpoints)}
        meta = self.meta
        if self.folder.exists() and not resume:
            shutil.rmtree(self.folder)
        if self.folder.exists():
            try:
                old = json.loads((self.folder / _META).read_text())
            except (OSError, ValueError):
                old = None
            if old != meta:
                raise ConfigError(
                    f"the partial measurement in {str(self.folder)!r} was made with another "
                    "config or trajectory; run without --resume to start afresh"
                )

    def _create(self) -> None:
        """Make the folder (on the first save only).

        So a run refused before any checkpoint (bad input) leaves nothing behind.
        """
        from tangentlab.runs import atomic_write_json

        if not (self.folder / _META).is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.folder / _META, self.meta)

    def _stem(self, index: int) -> Path:
        return self.folder / f"checkpoint_{index:05d}"

    def has(self, index: int) -> bool:
        """Whether checkpoint ``index`` (position in the trajectory) is finished."""
        return self._stem(index).with_suffix(".json").is_file()

    def save(self, index: int, rows: list[dict], info: dict, sites: dict[str, dict]) -> None:
        """Save checkpoint ``index``: its rows, its record and its per-site arrays.

        The arrays are ``{site: {name: array or None}}``. They go first, the rows last: a
        checkpoint counts as finished only once its JSON exists.
        """
        import numpy as np

        from tangentlab.runs import atomic_write_bytes, atomic_write_text

        arrays = {}
        for i, named in enumerate(sites.values()):
            for name, arr in named.items():
                if arr is not None:
                    arrays[f"{i}__{name}"] = np.asarray(arr)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        self._create()
        stem = self._stem(index)
        atomic_write_bytes(stem.with_suffix(".npz"), buf.getvalue())
        atomic_write_text(stem.with_suffix(".json"),
                          json.dumps({"rows": rows, "info": info, "sites": list(sites)},
                                     default=_plain))

    def load(self, index: int) -> tuple[list[dict], dict, dict[str, dict]]:
        """(rows, checkpoint record, {site: {name: array}}) of a finished checkpoint."""
        import numpy as np

        stem = self._stem(index)
        doc = json.loads(stem.with_suffix(".json").read_text())
        sites: dict[str, dict] = {s: {} for s in doc["sites"]}
        with np.load(stem.with_suffix(".npz")) as z:
            for key in z.files:
                i, name = key.split("__", 1)
                sites[doc["sites"][int(i)]][name] = z[key]
        return doc["rows"], doc["info"], sites

    def clear(self) -> None:
        """Remove the partial folder (the run folder is complete)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _plain(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot save {type(obj).__name__} in a partial measurement")

"""Atomic file writes: a temporary file in the same folder, flushed, then renamed over the target.

A reader never sees a half-written file, and a killed writer leaves only a hidden temporary
file. :mod:`tangentlab.runs` re-exports every public name here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "current_umask"]


def current_umask() -> int:
    """The process umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tmp_path(path: Path) -> Path:
    """A fresh temporary file beside ``path``, with the permissions a plain ``open`` would give.

    ``mkstemp`` creates files with mode 0600; the final file should be readable like any other
    output (0666 minus the umask), so the mode is set before anything is written.
    """
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    return Path(name)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (numpy scalars and arrays are converted)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


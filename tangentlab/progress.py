"""Progress bars that stay quiet in CI and in pipes.

A bar is shown only when stderr is a terminal and neither ``CI`` nor ``TANGENTLAB_QUIET`` is set
to a true value. ``TANGENTLAB_PROGRESS=1`` forces bars on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["progress_enabled", "progress", "log"]


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in {"", "0", "false", "no"}


def progress_enabled() -> bool:
    """Whether progress output should be drawn (see module docstring)."""
    if _truthy("TANGENTLAB_PROGRESS"):
        return True
    if _truthy("CI") or _truthy("TANGENTLAB_QUIET"):
        return False
    return sys.stderr.isatty()


def progress(iterable: Iterable[Any] | None = None, **kwargs: Any):
    """A ``tqdm`` bar, disabled when :func:`progress_enabled` is false. Kwargs go to tqdm."""
    from tqdm.auto import tqdm

    kwargs.setdefault("disable", not progress_enabled())
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def log(message: str) -> None:
    """One status line on stderr (always shown unless ``TANGENTLAB_QUIET`` is set)."""
    if not _truthy("TANGENTLAB_QUIET"):
        print(message, file=sys.stderr, flush=True)

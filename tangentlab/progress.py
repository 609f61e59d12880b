"""Progress bars that stay quiet in CI and in pipes, and status lines that never do.

A bar is shown only when stderr is a terminal and neither ``CI`` nor ``TANGENTLAB_QUIET`` is set
to a true value. ``TANGENTLAB_PROGRESS=1`` forces bars on.

Steps without a bar (loading a checkpoint, loading and tokenizing the eval text: 10-30 s) print
one status line when they start and one when they end (:func:`status`), so a log or a pipe is
never silent; ``TANGENTLAB_QUIET=1`` silences those too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["progress_enabled", "progress", "log", "status"]


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


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    """Print ``message ...`` on stderr now and ``message: done in X s`` when the block ends.

    Used around steps that have no progress bar. Nothing more is printed if the block raises (the
    error says what happened). Quiet under ``TANGENTLAB_QUIET``, like :func:`log`.
    """
    log(f"{message} ...")
    start = time.perf_counter()
    yield
    log(f"{message}: done in {time.perf_counter() - start:.1f} s")

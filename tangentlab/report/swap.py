"""Render into a staging folder, then swap the pages and figures in: a failed render loses nothing.

The report's outputs are ``report.html``, ``report.md`` and the ``figures/`` folder of a target
directory (the run directory, or ``tangentlab report --out DIR``). :func:`staged_report` yields a
fresh staging folder *inside* the target (``.report.partial-*``, so every rename stays on one
file system and :func:`tangentlab.runs.remove_partials` clears one a kill left behind). Only when
everything was written there are the old outputs replaced:

1. ``figures/`` is renamed into the staging folder and the new ``figures/`` renamed in its place
   (two renames; if the second fails the first is undone);
2. ``report.md`` then ``report.html`` are each replaced by one ``os.replace``;
3. the staging folder, holding the old figures, is removed.

Each staging folder holds an owner file (``.owner``: the pid and host of the render writing it,
as a run lock's holder record).
The next render removes every staging folder whose owner is a process of this host that no longer
runs (a render killed with ``kill -9`` leaves one), and any staging folder older than an hour
(one from another host, or without an owner file); a folder of a render still running is left
alone, and nothing but ``.report.partial-*`` folders is touched.
Any error before step 1 leaves the old report and figures as they were; a target that cannot be
written is an :class:`~tangentlab.errors.OutputPathError` raised before anything is touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tangentlab.errors import OutputPathError

__all__ = ["REPORT_FILES", "FIGURES_DIR", "STALE_AFTER_S", "OWNER_FILE", "staged_report"]

#: The page files a report writes at the top of its target directory.
REPORT_FILES: tuple[str, ...] = ("report.md", "report.html")
#: The folder of its figures.
FIGURES_DIR = "figures"


#: A staging folder older than this (seconds) was left by a render that was killed; it is removed.
STALE_AFTER_S = 3600.0


#: The file in a staging folder naming the render that writes it (a
#: :class:`~tangentlab.locks.LockHolder` record: pid, host, start time).
OWNER_FILE = ".owner"


def _owner_gone(folder: Path) -> bool:
    """Whether the render that made ``folder`` was a process of this host that no longer runs."""
    import json

    from tangentlab.locks import LockHolder

    try:
        holder = LockHolder.from_dict(json.loads((folder / OWNER_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return holder.pid != os.getpid() and holder.is_alive() is False


def _staging(target: Path) -> Path:
    """A fresh staging folder in ``target``, after removing those a killed render left.

    A folder whose owner still runs, or a young one of unknown owner, is left alone.
    """
    try:
        target.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for p in target.glob(".report.partial-*"):
            try:
                if p.is_dir() and (_owner_gone(p) or now - p.stat().st_mtime > STALE_AFTER_S):
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:
                continue
        tmp = Path(tempfile.mkdtemp(prefix=".report.partial-", dir=target))
    except OSError as exc:
        raise OutputPathError(
            f"cannot write the report into {str(target)!r} ({exc.strerror or exc}); nothing was "
            "changed. Pass --out DIR to write the report to a folder you can write") from exc
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)  # mkdtemp gives 0700; the figures are ordinary output
    import json

    from tangentlab.locks import LockHolder

    (tmp / OWNER_FILE).write_text(json.dumps(LockHolder.me("report").to_dict()) + "\n")
    return tmp


@contextlib.contextmanager
def staged_report(target: str | Path) -> Iterator[Path]:
    """Yield a staging folder; on success swap its pages and ``figures/`` into ``target``.

    Write ``report.html``, ``report.md`` and ``figures/*.png`` into the yielded folder. On any
    exception inside the block the staging folder is removed and ``target`` is left untouched.
    """
    target = Path(target)
    staging = _staging(target)
    try:
        yield staging
        new_figs, old_figs = staging / FIGURES_DIR, target / FIGURES_DIR
        parked = staging / (FIGURES_DIR + ".old")
        if old_figs.exists():
            os.replace(old_figs, parked)
        if new_figs.exists():
            try:
                os.replace(new_figs, old_figs)
            except BaseException:  # the first rename is undone
                if parked.exists():
                    os.replace(parked, old_figs)
                raise
        for name in REPORT_FILES:
            if (staging / name).exists():
                os.replace(staging / name, target / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

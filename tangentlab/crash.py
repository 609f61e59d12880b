"""Crash logs: what the CLI keeps when a command fails with an unexpected (internal) error.

An exception that is not a :class:`~tangentlab.errors.TangentlabError` is a bug or an
environment problem, not bad input. The CLI (:func:`tangentlab.cli.main`) then prints one line
naming what failed and the path of a crash log, and exits :data:`CRASH_EXIT_CODE` (3). The log
holds the traceback, the command line, the parsed arguments, the resolved config where a command
recorded one (:func:`note`), and the package versions.

Where the log goes (:func:`crash_dirs`):

1. ``RUN/logs/`` of the run directory the command was writing (:func:`remember_run_dir`, called
   by :func:`tangentlab.runs.run_lock`), when that directory exists and already is a run (a
   training run has ``train_config.json``, others ``manifest.json``), so that a crash never
   turns an empty ``--out`` into a folder the next attempt would refuse;
2. otherwise ``$TANGENTLAB_CRASH_DIR`` if set, else ``$XDG_CACHE_HOME/tangentlab/crashes/``
   (``~/.cache/tangentlab/crashes/`` without ``XDG_CACHE_HOME``);
3. if none of these is writable, the system's temporary folder. Never the current folder.

``--debug`` or ``TANGENTLAB_DEBUG=1`` shows the traceback instead of writing a log.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CRASH_EXIT_CODE",
    "DEBUG_ENV",
    "CRASH_DIR_ENV",
    "debug_enabled",
    "remember_run_dir",
    "note",
    "crash_dirs",
    "one_line",
    "print_traceback",
    "write_crash_log",
    "reset",
]

#: The CLI's exit code for an internal error (a crash log was written).
CRASH_EXIT_CODE = 3
#: Set to 1 (or pass ``--debug``) to see tracebacks instead of crash logs.
DEBUG_ENV = "TANGENTLAB_DEBUG"
#: Overrides the fallback crash-log folder (the user cache).
CRASH_DIR_ENV = "TANGENTLAB_CRASH_DIR"

_state: dict[str, Any] = {"run_dir": None, "context": {}}


def debug_enabled() -> bool:
    """Whether ``TANGENTLAB_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in {"", "0", "false", "no"}


def remember_run_dir(run_dir: str | Path) -> None:
    """Record the run directory this process writes: a crash log goes to its ``logs/``."""
    _state["run_dir"] = Path(run_dir)


def note(**context: Any) -> None:
    """Record context for a crash log (e.g. ``note(config=cfg_dict)``); JSON-able values."""
    _state["context"].update(context)


def reset() -> None:
    """Forget the remembered run directory and context (the CLI calls it per command)."""
    from tangentlab.runs import forget_locked_run_dirs

    _state["run_dir"] = None
    _state["context"] = {}
    forget_locked_run_dirs()


def _cache_dir() -> Path:
    explicit = os.environ.get(CRASH_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tangentlab" / "crashes"


def crash_dirs() -> list[Path]:
    """The folders a crash log may go to, in order of preference (see the module docstring)."""
    out: list[Path] = []
    from tangentlab.runs import LOGS_DIR, locked_run_dir, run_kind

    run_dir = _state["run_dir"] or locked_run_dir()
    if run_dir is not None and Path(run_dir).is_dir():
        if run_kind(run_dir) is not None:  # a folder that is not a run yet stays untouched
            out.append(Path(run_dir) / LOGS_DIR)
    out.append(_cache_dir())
    out.append(Path(tempfile.gettempdir()) / "tangentlab-crashes")
    return out


def _locked() -> Path | None:
    from tangentlab.runs import locked_run_dir

    return locked_run_dir()


def _jsonable(obj: Any) -> Any:
    try:
        json.dumps(obj)
        return obj
    except (TypeError, ValueError):
        if isinstance(obj, Mapping):
            return {str(k): _jsonable(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple, set, frozenset)):
            return [_jsonable(v) for v in obj]
        return repr(obj)


def _render(exc: BaseException, argv: Sequence[str], args: Mapping[str, Any] | None) -> str:
    from tangentlab._version import __version__
    from tangentlab.runs import package_versions

    lines = [
        "tangentlab crash log",
        f"time: {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
        f"tangentlab: {__version__}",
        f"command: tangentlab {' '.join(argv)}",
        f"cwd: {os.getcwd()}",
        f"pid: {os.getpid()}",
        f"platform: {platform.platform()}",
        f"run directory: {_state['run_dir'] or _locked() or '(none)'}",
        f"error: {type(exc).__module__}.{type(exc).__qualname__}: {exc}",
        "",
        "versions:",
        json.dumps(package_versions(), indent=2),
        "",
        "arguments:",
        json.dumps(_jsonable(dict(args or {})), indent=2, sort_keys=True),
        "",
        "context (resolved config and what the command recorded):",
        json.dumps(_jsonable(_state["context"]), indent=2, sort_keys=True),
        "",
        "traceback:",
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip(),
        "",
    ]
    return "\n".join(lines)


def write_crash_log(
    exc: BaseException,
    *,
    argv: Sequence[str] = (),
    args: Mapping[str, Any] | None = None,
) -> Path | None:
    """Write the crash log of ``exc`` to the first writable folder of :func:`crash_dirs`.

    Returns its path, or ``None`` if no folder could take it.
    """
    try:
        text = _render(exc, argv, args)
    except Exception as render_error:  # never let the crash handler crash
        text = ("tangentlab crash log (partial: rendering failed with "
                f"{render_error!r})\n\n" + "".join(traceback.format_exception(exc)))
    name = f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    for folder in crash_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            return path
        except OSError:
            continue
    return None


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, cut at ``limit`` characters."""
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def print_traceback(exc: BaseException, file=None) -> None:
    """The full traceback on stderr (what ``--debug`` shows)."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=file or sys.stderr)

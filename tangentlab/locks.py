"""Run locks: one writer per run directory, across processes, with the holder named.

``run_lock(run_dir)`` holds a ``filelock`` lock on ``PARENT/.NAME.lock`` with a record of the
holder beside it; :mod:`tangentlab.runs` re-exports every public name here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.atomic import atomic_write_json
from tangentlab.errors import OutputPathError, RunLockedError

__all__ = ["LockHolder", "run_lock", "lock_paths", "read_lock_holder", "locked_run_dir",
           "forget_locked_run_dirs"]

_log = logging.getLogger("tangentlab.runs")


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a run directory's lock."""

    pid: int
    host: str
    started: str
    command: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The holder record as a JSON-able dict."""
        return {"pid": self.pid, "host": self.host, "started": self.started,
                "command": self.command}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LockHolder:
        """A holder record read back from its JSON dict."""
        return cls(pid=int(d["pid"]), host=str(d["host"]), started=str(d["started"]),
                   command=str(d.get("command", "")))

    @classmethod
    def me(cls, command: str) -> LockHolder:
        """This process's holder record (pid, host, start time, ``command``)."""
        return cls(pid=os.getpid(), host=socket.gethostname(),
                   started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), command=command)

    def describe(self) -> str:
        """One line naming the holder, for error messages."""
        what = f" ({self.command})" if self.command else ""
        return f"pid {self.pid} on {self.host}, started {self.started}{what}"

    def is_alive(self) -> bool | None:
        """Whether the holder still runs: ``None`` when it runs on another host (unknowable)."""
        if self.host != socket.gethostname():
            return None
        return _pid_alive(self.pid)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if os.name == "nt":  # os.kill would terminate it there; assume it runs
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def lock_paths(run_dir: str | Path) -> tuple[Path, Path]:
    """(lock file, holder JSON) of a run directory: ``PARENT/.NAME.lock`` and ``.NAME.lock.json``.

    Symbolic links are resolved first, so ``runs/latest`` and the folder it points at share a lock.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    lock = run_dir.parent / f".{run_dir.name}.lock"
    return lock, lock.with_name(lock.name + ".json")


def read_lock_holder(run_dir: str | Path) -> LockHolder | None:
    """The holder recorded beside a run directory's lock (``None`` if none or unreadable).

    A record can outlive its holder (a killed process releases the lock, not the record):
    :func:`run_lock` then takes it over.
    """
    _, info = lock_paths(run_dir)
    try:
        return LockHolder.from_dict(json.loads(info.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


#: Locks this process holds: resolved lock path -> [pid, depth, holder, FileLock].
_HELD: dict[Path, list[Any]] = {}
_HELD_GUARD = threading.Lock()


#: The run directories this process has locked, most recent last (where a crash log goes).
_LOCKED_RUN_DIRS: list[Path] = []


def locked_run_dir() -> Path | None:
    """The run directory this process locked most recently (None if it locked none)."""
    return _LOCKED_RUN_DIRS[-1] if _LOCKED_RUN_DIRS else None


def forget_locked_run_dirs() -> None:
    """Forget the run directories locked so far (:func:`tangentlab.crash.reset` calls this)."""
    _LOCKED_RUN_DIRS.clear()


@contextlib.contextmanager
def run_lock(run_dir: str | Path, *, command: str = "") -> Iterator[LockHolder]:
    """Hold the advisory lock of ``run_dir`` while writing it; yields this process's record.

    The lock is a ``filelock`` lock on ``PARENT/.NAME.lock`` (see :func:`lock_paths`), waiting at
    most half a second; the holder's pid, host, start time and ``command`` are written atomically
    to ``PARENT/.NAME.lock.json``. Both files are removed on release (and folders created for
    them, if still empty); a killed process leaves them behind. ``run_dir`` itself is neither
    created nor required.

    - Another live process holding it: :class:`~tangentlab.errors.RunLockedError`, naming the
      holder (the CLI exits 4).
    - A record left by a process that died (same host, pid no longer running; the operating
      system released its lock): taken over, and the takeover is logged as a warning on the
      ``tangentlab.runs`` logger and kept in the new record (``"took_over"``).
    - The same process (same pid, any thread) locking the same directory again: re-entrant. A
      forked child is another process: it gets :class:`~tangentlab.errors.RunLockedError`.

    The run directory is also remembered as the place for a crash log
    (:func:`locked_run_dir`, which :mod:`tangentlab.crash` reads).

    Example::

        with run_lock(out, command="empirical measure"):
            measure_trajectory(traj, out)
    """
    lock_file, info = lock_paths(run_dir)
    _LOCKED_RUN_DIRS.append(Path(run_dir))
    with _HELD_GUARD:
        held = _HELD.get(lock_file)
        if held is not None and held[0] == os.getpid():
            held[1] += 1
            reentrant = held[2]
        else:
            reentrant = None
    if reentrant is not None:
        try:
            yield reentrant
        finally:
            with _HELD_GUARD:
                _HELD[lock_file][1] -= 1
        return

    import filelock

    created = [d for d in (lock_file.parent, *lock_file.parent.parents) if not d.exists()]
    # a short wait covers a peer that is just releasing (it unlinks the lock file first)
    lock = filelock.FileLock(str(lock_file), timeout=0.5)
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        _acquire_current(lock, lock_file)
    except filelock.Timeout:
        holder = None
        for _ in range(20):  # the holder writes its record just after locking
            holder = read_lock_holder(run_dir)
            if holder is not None:
                break
            time.sleep(0.05)
        _remove_empty(created)
        who = holder.describe() if holder is not None else "another process (no record yet)"
        raise RunLockedError(
            f"run directory {str(run_dir)!r} is in use by {who}; wait for it to finish, or "
            "choose another --out"
        ) from None
    except OSError as exc:  # a read-only parent, ... (filelock.Timeout, an OSError, is caught above)
        _remove_empty(created)
        raise OutputPathError(
            f"cannot lock run directory {str(run_dir)!r}: cannot create {str(lock_file)!r} "
            f"({exc.strerror or type(exc).__name__}); choose a --out in a writable folder"
        ) from None
    try:
        me = LockHolder.me(command)
        record: dict[str, Any] = me.to_dict()
        previous = read_lock_holder(run_dir)
        if previous is not None and previous != me:
            alive = previous.is_alive()
            state = {False: "no longer running", None: "on another host"}.get(
                alive, "running but no longer holding the lock")
            _log.warning(
                "took over the lock of %s left by %s (%s)", run_dir, previous.describe(), state)
            record["took_over"] = previous.to_dict()
        atomic_write_json(info, record)
    except BaseException:
        _release(lock, lock_file, info)
        _remove_empty(created)
        raise
    with _HELD_GUARD:
        _HELD[lock_file] = [os.getpid(), 0, me, lock]
    try:
        yield me
    finally:
        with _HELD_GUARD:
            _HELD.pop(lock_file, None)
        _release(lock, lock_file, info)
        _remove_empty(created)


def _acquire_current(lock: Any, lock_file: Path, attempts: int = 20) -> None:
    """Acquire ``lock``, and make sure the locked file is still the one at ``lock_file``.

    A releasing holder unlinks the lock file before unlocking it (:func:`_release`); a process
    that had opened the old file just before could otherwise lock an unlinked file while a third
    locks a new one. Recent ``filelock`` versions check this themselves; older ones do not.
    """
    for _ in range(attempts):
        lock.acquire()
        fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
        if fd is None:
            return
        try:
            locked = os.fstat(fd)
            current = os.stat(lock_file)
        except OSError:
            current = None
        if current is not None and locked.st_nlink > 0 and os.path.samestat(locked, current):
            return
        lock.release()
    lock.acquire()


def _release(lock: Any, lock_file: Path, info: Path) -> None:
    """Remove the record and the lock file while still holding the lock, then unlock.

    A peer that opened the old file finds it unlinked and retries on a fresh one.
    """
    try:
        info.unlink(missing_ok=True)
        lock_file.unlink(missing_ok=True)
    finally:
        lock.release()


def _remove_empty(created: list[Path]) -> None:
    """Remove the folders :func:`run_lock` created for its lock file, if they stayed empty."""
    for d in created:  # deepest first
        try:
            d.rmdir()
        except OSError:
            return

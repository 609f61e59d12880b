"""Kill a ``tangentlab`` subprocess at a chosen point (reusable by any kill-and-resume test).

The code under test marks points with :func:`tangentlab._faults.pause_point` (for example
``checkpoint:3`` inside the checkpoint writer). :func:`start_paused` runs ``python -m tangentlab
ARGV`` with ``TANGENTLAB_TEST_PAUSE_AT=POINT`` and returns once the process has reached the point
and paused there; the test then kills it (:func:`kill_at` does both)::

    from tests.killing import kill_at

    rc = kill_at(["empirical", "train", ..., "--out", str(run)], "checkpoint:3", tmp_path)
    assert rc == -signal.SIGKILL
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import tangentlab
from tangentlab._faults import PAUSE_AT_ENV, PAUSE_FILE_ENV, PAUSE_SECONDS_ENV

__all__ = ["tangentlab_cmd", "subprocess_env", "start_paused", "kill_at", "alive",
           "worker_outlives_killed_parent", "mark_started", "SMALL_REPRODUCE"]

#: ``reproduce`` options for the smallest run that still has every kind of stage: one
#: architecture, one derivation, one synthetic experiment, no validation battery.
SMALL_REPRODUCE = ["--set", "archs=decoder", "--set", "synthetic=river-valley",
                   "--set", "derivations=river-valley", "--set", "validate=false"]

_ROOT = Path(tangentlab.__file__).resolve().parents[1]


def tangentlab_cmd(argv: Sequence[str]) -> list[str]:
    """The command line running ``tangentlab ARGV`` with this interpreter."""
    return [sys.executable, "-m", "tangentlab", *map(str, argv)]


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, quiet, offline, one thread, with this checkout importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TANGENTLAB_QUIET", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    for name in (PAUSE_AT_ENV, PAUSE_FILE_ENV, PAUSE_SECONDS_ENV, "TANGENTLAB_DEBUG"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def start_paused(argv: Sequence[str], point: str, workdir: Path, *,
                 env: Mapping[str, str] | None = None, timeout: float = 300,
                 pause_seconds: float = 600) -> subprocess.Popen:
    """Start ``tangentlab ARGV`` and return once it pauses at ``point`` (it then sleeps there).

    Raises AssertionError (with the process's stderr) if it exits or times out first. The caller
    must kill or wait for the returned process.
    """
    marker = Path(workdir) / f".paused-{os.getpid()}-{time.monotonic_ns()}"
    full_env = subprocess_env({**dict(env or {}), PAUSE_AT_ENV: point,
                               PAUSE_FILE_ENV: str(marker),
                               PAUSE_SECONDS_ENV: str(pause_seconds)})
    proc = subprocess.Popen(tangentlab_cmd(argv), env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"tangentlab {' '.join(map(str, argv))} exited with "
                                 f"{proc.returncode} before reaching {point!r}:\n{err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            raise AssertionError(f"tangentlab did not reach {point!r} within {timeout} s")
        time.sleep(0.05)
    marker.unlink()
    return proc


def kill_at(argv: Sequence[str], point: str, workdir: Path, *, sig: int = signal.SIGKILL,
            env: Mapping[str, str] | None = None, timeout: float = 300) -> int:
    """Run ``tangentlab ARGV``, send ``sig`` when it reaches ``point``; returns its exit status
    (``-sig`` for a process killed by the signal, like ``Popen.returncode``)."""
    proc = start_paused(argv, point, workdir, env=env, timeout=timeout)
    proc.send_signal(sig)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return proc.returncode


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, does not). Linux (``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def mark_started(folder: str | Path) -> None:
    """Write this process's pid to ``FOLDER/started`` atomically (a temporary name, then a rename):
    a reader that sees the file sees the whole pid, never the empty file a plain write shows first.
    """
    tmp = Path(folder, f".started.{os.getpid()}")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, Path(folder, "started"))


def worker_outlives_killed_parent(parent_script: str, folder: Path, *args: str,
                                  after_kill: Callable[[], None] | None = None) -> bool:
    """Whether a worker outlives its parent: run ``parent_script`` (``python SCRIPT FOLDER ARGS``, from
    the repository root), wait for its worker to write its pid to ``FOLDER/started``, SIGKILL the
    parent, call ``after_kill``, and give the worker 10 s to die. The worker is killed at the end
    whatever happened (Linux: reads ``/proc``). The worker writes the file with
    :func:`mark_started`."""
    script = Path(folder) / "parent.py"
    script.write_text(parent_script)
    started = Path(folder) / "started"
    parent = subprocess.Popen([sys.executable, str(script), str(folder), *args], env=subprocess_env(),
                              cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            if parent.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("no worker started")
            time.sleep(0.05)
        worker = int(started.read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        if after_kill is not None:
            after_kill()
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        return alive(worker)
    finally:
        parent.kill()
        if started.exists():
            try:
                os.kill(int(started.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass

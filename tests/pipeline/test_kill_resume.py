"""Kill `tangentlab reproduce` inside a training stage and inside a measure stage, resume, and get
the same results as an uninterrupted run (slow; real tiny models, real worker processes)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.killing import SMALL_REPRODUCE

# one architecture, one derivation and one synthetic experiment keep the run short
ARGS = ["reproduce", "--quick", "--jobs", "2", "--device", "cpu", *SMALL_REPRODUCE]
_VOLATILE = re.compile(r"\d+(\.\d+)? ?s\b|seconds|time|/|\d{4}-\d{2}-\d{2}|reused|hash|wall|"
                       r"CPU|jobs|resum|commit|command|pid", re.IGNORECASE)


def _start(out: Path) -> subprocess.Popen:
    env = dict(os.environ, TANGENTLAB_QUIET="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "tangentlab", *ARGS, "--out", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def _stage(out: Path, name: str) -> str | None:
    try:
        return json.loads((out / "manifest.json").read_text())["stages"].get(name, {}).get("status")
    except (OSError, ValueError, KeyError):
        return None


def _kill_when(proc: subprocess.Popen, ready, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"reproduce ended (rc {proc.returncode}) before {what}: "
                        f"{proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)  # the reproduce process only: its workers must die with it
    proc.wait()


def _files(run: Path) -> dict[str, bytes]:
    keep = ("results.csv", "checks.json")
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.name in keep}


def _report_numbers(run: Path) -> list[str]:
    return [line for line in (run / "report.md").read_text().splitlines()
            if re.search(r"\d", line) and not _VOLATILE.search(line)]


@pytest.mark.slow
def test_kill_in_training_and_in_measure_then_resume_gives_the_same_results(tmp_path,
                                                                           quick_reproduce):
    # the uninterrupted run: the session's small quick reproduce (the same stages, one at a time;
    # the --jobs equivalence test holds it to the --jobs 2 results)
    base, rc, err, _ = quick_reproduce(1, small=True)
    assert rc == 0, err[-3000:]
    killed = tmp_path / "killed"

    # 1. kill while train/decoder runs and has saved at least one complete checkpoint
    proc = _start(killed)
    ckpts = killed / "train" / "decoder" / "checkpoints"
    _kill_when(proc, lambda: _stage(killed, "train/decoder") == "running"
               and len(list(ckpts.glob("step_*/train_state.json"))) >= 2, "a training checkpoint")
    time.sleep(1.0)  # a worker that outlived its parent would write more checkpoints now
    n_saved = len(list(ckpts.glob("step_*")))
    time.sleep(2.0)
    assert len(list(ckpts.glob("step_*"))) == n_saved, "the training worker outlived the kill"
    assert _stage(killed, "train/decoder") == "running"

    # 2. resume; kill again while the measurement runs
    proc = _start(killed)
    _kill_when(proc, lambda: _stage(killed, "measure/decoder") == "running", "the measurement")
    assert _stage(killed, "train/decoder") == "done"
    assert not (killed / "measure" / "decoder" / "results.csv").exists()

    # 3. resume to the end
    proc = _start(killed)
    assert proc.wait() == 0, proc.stderr.read().decode()[-3000:]
    manifest = json.loads((killed / "manifest.json").read_text())
    assert manifest["stages"]["train/decoder"]["reused"] is True

    a, b = _files(base), _files(killed)
    assert set(a) == set(b) and len(a) >= 3
    for name in a:
        assert a[name] == b[name], f"{name} differs after kill and resume"
    final = sorted((base / "train/decoder/checkpoints").glob("step_*"))[-1].relative_to(base)
    final = f"{final}/model.safetensors"
    assert (base / final).read_bytes() == (killed / final).read_bytes()
    assert _report_numbers(base) == _report_numbers(killed) and _report_numbers(base)

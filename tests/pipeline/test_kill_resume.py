"""Kill `tangentlab reproduce` inside a training stage and inside a measure stage, resume, and
get the bytes the whole `--jobs 2` run wrote (slow; real tiny models, real worker processes).

One small run answers two questions, each of which needs a run of its own otherwise:

- **kill and resume**: a run killed twice (``SIGKILL`` to the reproduce process only, while it
  runs two stage workers: they must die with it) and resumed ends with the results of an
  uninterrupted run;
- **``--jobs`` equivalence**: a stage's results do not depend on how many stages ran at once,
  nor on which: the small quick reproduce (decoder, one derivation, one experiment) is resumed to
  its end with ``--jobs 1`` (so its measurement runs alone), and the session's whole quick
  reproduce ran ``--jobs 2``, every stage next to others.

The small run's stages must write the same files (``results.csv``, ``checks.json``,
``bridge.csv``) with the same bytes as the whole run's, and the final decoder checkpoint the
same weights. A failure names the file; it can come from either property (the test that held
them apart cost a second small reproduce, about 40 s of every ``make test``).
"""

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
ARGS = ["reproduce", "--quick", "--device", "cpu", *SMALL_REPRODUCE]
# the files whose bytes must not depend on how many stages ran at once, nor on a kill
_COMPARED = ("results.csv", "checks.json", "bridge.csv")
# stages whose results depend on which other stages ran (the theory table lists the derivations
# that ran, the report renders every stage): compared below by derivation, or not at all
_WHOLE_RUN = ("theory", "report")
_VOLATILE = re.compile(r"\d+(\.\d+)? ?s\b|seconds|time|/|\d{4}-\d{2}-\d{2}|reused|hash|wall|"
                       r"CPU|jobs|resum|commit|command|pid", re.IGNORECASE)


def _start(out: Path, jobs: int) -> subprocess.Popen:
    env = dict(os.environ, TANGENTLAB_QUIET="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "tangentlab", *ARGS, "--jobs", str(jobs),
                             "--out", str(out)],
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


def _report_numbers(run: Path) -> list[str]:
    return [line for line in (run / "report.md").read_text().splitlines()
            if re.search(r"\d", line) and not _VOLATILE.search(line)]


def _theory_checks(run: Path) -> dict[str, list[dict]]:
    """Each derivation's checks without their timings."""
    verify = json.loads((run / "theory" / "verify.json").read_text())
    return {d["name"]: [{k: v for k, v in c.items() if k != "seconds"} for c in d["checks"]]
            for d in verify["derivations"]}


@pytest.mark.slow
def test_jobs_1_killed_twice_and_resumed_equals_the_whole_jobs_2_run(tmp_path, quick_reproduce):
    two, rc2, err2, _ = quick_reproduce(2)
    assert rc2 == 0, err2[-3000:]
    killed = tmp_path / "killed"

    # 1. kill while train/decoder runs (beside theory and river-valley: --jobs 2) and has saved
    # at least one complete checkpoint
    proc = _start(killed, 2)
    ckpts = killed / "train" / "decoder" / "checkpoints"
    _kill_when(proc, lambda: _stage(killed, "train/decoder") == "running"
               and len(list(ckpts.glob("step_*/train_state.json"))) >= 2, "a training checkpoint")
    time.sleep(1.0)  # a worker that outlived its parent would write more checkpoints now
    n_saved = len(list(ckpts.glob("step_*")))
    time.sleep(2.0)
    assert len(list(ckpts.glob("step_*"))) == n_saved, "the training worker outlived the kill"
    assert _stage(killed, "train/decoder") == "running"

    # 2. resume; kill again while the measurement runs
    proc = _start(killed, 2)
    _kill_when(proc, lambda: _stage(killed, "measure/decoder") == "running", "the measurement")
    assert _stage(killed, "train/decoder") == "done"
    assert not (killed / "measure" / "decoder" / "results.csv").exists()

    # 3. resume to the end, one stage at a time: the measurement runs with --jobs 1
    proc = _start(killed, 1)
    assert proc.wait() == 0, proc.stderr.read().decode()[-3000:]
    m1, m2 = (json.loads((r / "manifest.json").read_text()) for r in (killed, two))
    assert m1["stages"]["train/decoder"]["reused"] is True
    assert m1["jobs"] == 1 and m2["jobs"] == 2
    assert all(s["status"] == "done" for s in m2["stages"].values())
    assert set(m1["stages"]) < set(m2["stages"])  # the small run's stages, all in the whole run

    def compared_files(run: Path) -> set[str]:  # of the small run's stages, both ways
        return {str(p.relative_to(run)) for stage in m1["stages"] if stage not in _WHOLE_RUN
                for p in (run / stage).rglob("*") if p.name in _COMPARED}

    compared = compared_files(killed)
    assert compared == compared_files(two), "the killed run and the whole run wrote other files"
    for rel in sorted(compared):
        assert (killed / rel).read_bytes() == (two / rel).read_bytes(), (
            f"{rel} differs: killed twice and resumed (the measurement at --jobs 1) against the "
            "whole --jobs 2 run")
    assert {"measure/decoder/results.csv", "measure/decoder/bridge.csv",
            "synthetic/river-valley/results.csv", "synthetic/river-valley/checks.json"} <= compared
    final = sorted((two / "train/decoder/checkpoints").glob("step_*"))[-1].relative_to(two)
    final = f"{final}/model.safetensors"
    assert (two / final).read_bytes() == (killed / final).read_bytes()
    # the theory checks' numbers too, derivation by derivation (their timings naturally differ)
    c1, c2 = _theory_checks(killed), _theory_checks(two)
    assert set(c1) == {"river-valley"} and c1["river-valley"] == c2["river-valley"]
    assert _report_numbers(killed)  # the resumed run's report renders its numbers
    # every stage kept its own log
    assert {p.name for p in (two / "logs").glob("*.log")} >= {"train__encoder.log", "report.log"}
    assert {p.name for p in (killed / "logs").glob("*.log")} >= {"train__decoder.log",
                                                                  "report.log"}

"""``scripts/twin_shards.sh``: which shards of a twin it runs, how, how many at once, and what it
leaves in the records that get committed.

The worktree's ``.venv/bin/python`` is a stand-in that records each call (its argv, working
folder, ``PYTHONPATH`` and ``HF_HUB_OFFLINE``, and how many calls ran at that moment) and
finishes the shard as the real ``validate --end-to-end --resume`` does, by writing its
``manifest.json`` with the absolute argv a real run records. The real command's resume and
sharding are tested in ``tests/validate/test_end_to_end_records.py`` and
``test_end_to_end_shards.py``; this file tests the script around it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "twin_shards.sh"

#: The stand-in for the worktree's python: records the call under a lock, waits until TOGETHER
#: calls have started (at most 60 s), so that calls the script lets overlap do overlap however
#: loaded the machine, then writes the shard's manifest (or fails for shard FAIL_SHARD).
STUB = r'''
import fcntl, json, os, sys, time
log = os.environ["STUB_LOG"]
out = sys.argv[sys.argv.index("--out") + 1]
shard = sys.argv[sys.argv.index("--shard") + 1]

def count(step):
    with open(log + ".lock", "a+") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        now, started = (json.load(open(log + ".n")) if os.path.exists(log + ".n") else (0, 0))
        now, started = now + step, started + max(step, 0)
        json.dump((now, started), open(log + ".n", "w"))
        if step > 0:
            with open(log, "a") as f:
                f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "now": now,
                                    "pythonpath": os.environ.get("PYTHONPATH"),
                                    "offline": os.environ.get("HF_HUB_OFFLINE")}) + "\n")
        return started

count(+1)
deadline = time.monotonic() + 60
while count(0) < int(os.environ["TOGETHER"]) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.2)  # a script that let more run at once would start them meanwhile
count(-1)
if shard == os.environ.get("FAIL_SHARD"):
    print("boom", file=sys.stderr)
    sys.exit(1)
json.dump({"argv": [os.path.join(os.getcwd(), "tangentlab", "__main__.py"), *sys.argv[3:]]},
          open(os.path.join(out, "manifest.json"), "w"))
'''


def _twin(tmp_path: Path, n: int, *, finished=(), not_shards=()):
    """A repository holding a worktree with the stand-in python and a twin of ``n`` shards."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    wt = repo / "runs" / "wt"
    (wt / ".venv" / "bin").mkdir(parents=True)
    (wt / "stub.py").write_text(STUB)
    py = wt / ".venv" / "bin" / "python"
    py.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "{wt / "stub.py"}" "$@"\n')
    py.chmod(0o755)
    twin = repo / "certification" / "twin"
    for k in range(1, n + 1):
        d = twin / f"s{k:02d}"
        d.mkdir(parents=True)
        if k not in not_shards:
            (d / "end_to_end.json").write_text(json.dumps({"shard": f"{k}/{n}"}))
        if k in finished:
            (d / "manifest.json").write_text(json.dumps({"argv": ["done"]}))
    return wt, twin


def _run(wt: Path, twin: Path, jobs: str, *, together: int = 1,
         fail: str = "") -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run the script; TOGETHER: how many calls each call waits to see started (see STUB)."""
    log = twin.parent / "calls.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(STUB_LOG=str(log), FAIL_SHARD=fail, TOGETHER=str(together))
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.Popen(["bash", str(SCRIPT), str(wt), str(twin), jobs], text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and every stand-in it started
        raise
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), calls


def test_it_resumes_each_unfinished_shard_once_under_its_stored_config(tmp_path):
    wt, twin = _twin(tmp_path, 5, finished=(2,), not_shards=(4,))
    res, calls = _run(wt, twin, "2", together=2)
    assert res.returncode == 0, res.stdout + res.stderr
    shards = sorted(c["argv"][c["argv"].index("--shard") + 1] for c in calls)
    assert shards == ["1/5", "3/5", "5/5"]  # s02 finished, s04 no shard
    for c in calls:
        out = c["argv"][c["argv"].index("--out") + 1]
        assert c["argv"][:4] == ["-m", "tangentlab", "validate", "--end-to-end"]
        assert {"--resume", "--nproc"} <= set(c["argv"]) and c["argv"][c["argv"].index("--nproc") + 1] == "1"
        assert Path(out).parent == twin and not any(a.startswith("--like") for a in c["argv"])
        assert c["cwd"] == str(wt) and c["pythonpath"] == str(wt) and c["offline"] == "1"
    assert max(c["now"] for c in calls) == 2  # two side by side, never more
    assert "s04: no shard's end_to_end.json there; skipped" in res.stdout
    assert json.loads((twin / "s02" / "manifest.json").read_text()) == {"argv": ["done"]}
    for k in (1, 3, 5):  # the records to commit name no path of this machine
        argv = json.loads((twin / f"s{k:02d}" / "manifest.json").read_text())["argv"]
        assert argv[0] == os.path.join("tangentlab", "__main__.py")
        assert argv[argv.index("--out") + 1] == f"certification/twin/s{k:02d}"
        assert not any(str(tmp_path) in a for a in argv)
    assert (twin / "logs").is_dir() and not list(twin.glob("s*/*.log"))
    again, more = _run(wt, twin, "2", together=2)  # every shard finished: nothing runs again
    assert again.returncode == 0 and len(more) == len(calls)


def test_one_job_runs_the_shards_one_at_a_time(tmp_path):
    wt, twin = _twin(tmp_path, 2)
    res, calls = _run(wt, twin, "1")
    assert res.returncode == 0 and len(calls) == 2 and max(c["now"] for c in calls) == 1


def test_a_stopped_shard_fails_the_script_but_not_the_others(tmp_path):
    wt, twin = _twin(tmp_path, 3)
    res, calls = _run(wt, twin, "2", together=2, fail="2/3")
    assert res.returncode == 1 and len(calls) == 3
    assert "shard 2/3 stopped" in res.stdout and "boom" in (twin / "logs" / "s02.log").read_text()
    assert not (twin / "s02" / "manifest.json").exists()
    assert (twin / "s01" / "manifest.json").exists() and (twin / "s03" / "manifest.json").exists()
    res, calls = _run(wt, twin, "2")  # run again: only the stopped shard runs, and it finishes
    assert res.returncode == 0 and len(calls) == 4 and (twin / "s02" / "manifest.json").exists()


@pytest.mark.parametrize("jobs", ["0", "x", "-1"])
def test_jobs_must_be_a_positive_whole_number(tmp_path, jobs):
    wt, twin = _twin(tmp_path, 2)
    res, calls = _run(wt, twin, jobs)
    assert res.returncode == 2 and "JOBS must be a positive whole number" in res.stderr
    assert calls == []

"""Stages in worker processes: the graph order, per-stage logs, failures, and equal results."""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from tangentlab.pipeline.stages import Stage, StageContext, run_stages, usable_cores
from tangentlab.runs import atomic_write_json, read_manifest


def _write(name: str, ctx: StageContext) -> None:
    """Print a line (it must land in the stage's own log) and write ``out.json``."""
    print(f"hello from {name} in pid {os.getpid()}")
    ctx.output.mkdir(parents=True, exist_ok=True)
    inputs = sorted(p.name for p in ctx.run_dir.iterdir()
                    if p.is_dir() and p.name not in ("logs", name))
    atomic_write_json(ctx.output / "out.json", {"name": name, "pid": os.getpid(), "saw": inputs})


def _wait_for(other: str, name: str, ctx: StageContext) -> None:
    """Succeed only if ``other`` writes its output while this stage is still running."""
    deadline = time.monotonic() + 60
    while not (ctx.run_dir / other / "out.json").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{other} never ran while {name} was running")
        time.sleep(0.05)
    _write(name, ctx)


def _fail(ctx: StageContext) -> None:
    print("about to fail")
    raise ValueError("planned failure")


def _die(ctx: StageContext) -> None:
    os._exit(9)  # a worker killed from outside looks like this to the pool


def _check(out: Path) -> None:
    json.loads((out / "out.json").read_text())


def _graph(fail: bool = False, die: bool = False) -> list[Stage]:
    return [
        Stage("a", partial(_write, "a"), check=_check),
        Stage("b", _fail if fail else partial(_write, "b"), check=_check),
        Stage("c", _die if die else partial(_write, "c"), depends=("a",), check=_check),
        Stage("d", partial(_write, "d"), depends=("b",), check=_check),
        Stage("r", partial(_write, "r"), after=("a", "b", "c", "d"), always=True, check=_check),
    ]


def test_each_stage_runs_in_its_own_process_with_its_own_log(tmp_path):
    run = tmp_path / "run"
    s = run_stages(run, _graph(), jobs=2)
    assert s.ok
    pids = {n: json.loads((run / n / "out.json").read_text())["pid"] for n in "abcdr"}
    assert os.getpid() not in pids.values() and len(set(pids.values())) == 5
    for n in "abcdr":
        text = (run / "logs" / f"{n}.log").read_text()
        assert f"hello from {n}" in text and all(f"hello from {o}" not in text for o in "abcdr" if o != n)
    # dependencies and 'after' were respected: the report saw every other output
    assert json.loads((run / "r" / "out.json").read_text())["saw"] == ["a", "b", "c", "d"]
    m = read_manifest(run)
    assert m["jobs"] == 2 and all(m["stages"][n]["cpu_seconds"] is not None for n in "abcdr")


def test_independent_stages_overlap(tmp_path):
    stages = [
        Stage("slow", partial(_wait_for, "fast", "slow"), check=_check),
        Stage("fast", partial(_write, "fast"), check=_check),
    ]
    assert run_stages(tmp_path / "run", stages, jobs=2).ok


def test_failure_skips_dependants_and_the_report_still_runs(tmp_path):
    run = tmp_path / "run"
    s = run_stages(run, _graph(fail=True), jobs=2)
    st = {r.name: r for r in s.records}
    assert st["b"].status == "failed" and "planned failure" in st["b"].error
    assert st["d"].status == "skipped" and "depends on b, which failed" in st["d"].reason
    assert st["a"].status == st["c"].status == st["r"].status == "done"
    assert "ValueError" in (run / "logs" / "b.txt").read_text()
    assert "about to fail" in (run / "logs" / "b.log").read_text()


def test_a_worker_that_dies_is_a_failed_stage(tmp_path):
    s = run_stages(tmp_path / "run", _graph(die=True), jobs=2)
    st = {r.name: r.status for r in s.records}
    assert st["c"] == "failed" and st["a"] == st["b"] == st["d"] == st["r"] == "done"


def _seeded(name: str, ctx: StageContext) -> None:
    import numpy as np

    ctx.output.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([7, len(name)])
    (ctx.output / "x.npy").write_bytes(rng.standard_normal(64).tobytes())


def test_jobs_1_and_2_write_the_same_bytes_and_a_rerun_reuses(tmp_path):
    stages = [Stage(n, partial(_seeded, n), depends=dep) for n, dep in
              (("a", ()), ("bb", ()), ("ccc", ("a",)))]
    for jobs in (1, 2):
        assert run_stages(tmp_path / f"j{jobs}", stages, jobs=jobs).ok
    for n in ("a", "bb", "ccc"):
        assert (tmp_path / "j1" / n / "x.npy").read_bytes() == (tmp_path / "j2" / n / "x.npy").read_bytes()
    again = run_stages(tmp_path / "j2", stages, jobs=2)
    assert [r.reused for r in again.records] == [True, True, True]


def _environment(ctx: StageContext) -> None:
    """Write what the stage process sees of the environment and of an earlier stage's state."""
    import tangentlab.pipeline.stages as stages_module

    ctx.output.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ctx.output / "env.json", {
        "value": os.environ.get("TANGENTLAB_TEST_STAGE_ENV"),
        "dropped": os.environ.get("TANGENTLAB_TEST_STAGE_GONE"),
        "left_by_earlier_stage": getattr(stages_module, "_TEST_MARK", None)})
    stages_module._TEST_MARK = ctx.output.name  # what a later stage must not see


def test_a_stage_sees_the_environment_of_its_submission_not_of_the_fork_server(
        tmp_path, monkeypatch):
    """The fork server starts with the first stage and keeps its environment; each stage gets the
    parent's as it is when the stage is submitted (a variable set or removed between runs of one
    process, as the tests' in-process reproduce runs do), and no state of an earlier stage."""
    monkeypatch.setenv("TANGENTLAB_TEST_STAGE_GONE", "present when the server started")
    monkeypatch.setenv("TANGENTLAB_TEST_STAGE_ENV", "first")
    assert run_stages(tmp_path / "one", [Stage("a", _environment)], jobs=1).ok
    monkeypatch.setenv("TANGENTLAB_TEST_STAGE_ENV", "second")
    monkeypatch.delenv("TANGENTLAB_TEST_STAGE_GONE")
    assert run_stages(tmp_path / "two", [Stage("b", _environment), Stage("c", _environment)],
                      jobs=2).ok
    seen = [json.loads((tmp_path / run / name / "env.json").read_text())
            for run, name in (("one", "a"), ("two", "b"), ("two", "c"))]
    assert seen[0] == {"value": "first", "dropped": "present when the server started",
                       "left_by_earlier_stage": None}
    assert seen[1] == seen[2] == {"value": "second", "dropped": None,
                                  "left_by_earlier_stage": None}


def test_usable_cores_is_positive():
    assert usable_cores() >= 1


def _start_then_ask_to_die(folder: str) -> None:
    """A stage worker that is slow to start: its parent is killed before it asks for the
    parent-death signal (the race a kill while a worker imports hits)."""
    from tangentlab._runtime import die_with_parent
    from tests.killing import mark_started

    mark_started(folder)
    while not Path(folder, "parent-killed").exists():
        time.sleep(0.02)
    die_with_parent()
    Path(folder, "survived").write_text("ran on after its parent died")


_PARENT = """
import multiprocessing, sys, time
from concurrent.futures import ProcessPoolExecutor
from tests.pipeline.test_parallel import _start_then_ask_to_die
if __name__ == "__main__":
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context(sys.argv[2]))
    pool.submit(_start_then_ask_to_die, sys.argv[1])
    time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the parent-death signal is Linux's (elsewhere the worker is not tied)")
@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_a_worker_whose_parent_died_before_it_asked_to_die_with_it_kills_itself(tmp_path, start):
    """``forkserver``: the stage runner's (the worker's parent is the fork server, not the killed
    process); ``spawn``: the end-to-end battery's worker pool."""
    from tests.killing import worker_outlives_killed_parent

    marker = tmp_path / "parent-killed"
    assert not worker_outlives_killed_parent(_PARENT, tmp_path, start,
                                             after_kill=lambda: marker.write_text("")), (
        "the worker outlived its parent")
    assert not (tmp_path / "survived").exists()

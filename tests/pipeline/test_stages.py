"""The stage runner: resume skips valid stages, redoes invalid ones, isolates failures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tangentlab.errors import ConfigError
from tangentlab.pipeline.stages import Stage, StageContext, run_stages
from tangentlab.runs import atomic_write_json, read_manifest, read_stage_records

CALLS: Counter = Counter()


def writer(name: str, payload: dict | None = None):
    def run(ctx: StageContext) -> None:
        CALLS[name] += 1
        ctx.output.mkdir(parents=True, exist_ok=True)
        atomic_write_json(ctx.output / "out.json", payload or {"name": name})
    return run


def check_json(out: Path) -> None:
    json.loads((out / "out.json").read_text())


def boom(ctx: StageContext) -> None:
    CALLS["boom"] += 1
    raise ValueError("bad things")


def stages(*, a_params=None, fail_b=False) -> list[Stage]:
    return [
        Stage("a", writer("a"), params=a_params or {"k": 1}, check=check_json),
        Stage("b", boom if fail_b else writer("b"), check=check_json),
        Stage("c", writer("c"), depends=("a",), check=check_json),
        Stage("d", writer("d"), depends=("b",), check=check_json),
        Stage("r", writer("r"), output="r.out", always=True),
    ]


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()


def statuses(summary):
    return {r.name: r.status for r in summary.records}


def test_first_run_records_every_stage(tmp_path):
    s = run_stages(tmp_path / "run", stages(), config={"x": 1})
    assert s.ok and statuses(s) == dict.fromkeys("abcdr", "done")
    m = read_manifest(tmp_path / "run")
    assert m["kind"] == "reproduce" and m["stage_order"] == list("abcdr")
    rec = m["stages"]["a"]
    assert rec["status"] == "done" and len(rec["config_hash"]) == 12 and rec["outputs"] == ["a"]
    assert rec["seconds"] is not None and rec["error"] is None


def test_rerun_skips_valid_stages_and_reruns_always(tmp_path):
    run_stages(tmp_path / "run", stages())
    CALLS.clear()
    s = run_stages(tmp_path / "run", stages())
    assert s.ok
    assert CALLS == Counter({"r": 1})  # only the always-stage ran again
    assert all(r.reused for r in s.records if r.name != "r")


def test_deleted_or_corrupt_output_is_redone(tmp_path):
    run = tmp_path / "run"
    run_stages(run, stages())
    (run / "a" / "out.json").write_text("{not json")  # unreadable
    (run / "b" / "out.json").unlink()  # missing file: check fails
    CALLS.clear()
    s = run_stages(run, stages())
    assert s.ok
    assert CALLS["a"] == 1 and CALLS["b"] == 1
    # c depends on a, whose hash did not change: c is still valid and reused
    assert CALLS["c"] == 0 and CALLS["d"] == 0
    assert json.loads((run / "a" / "out.json").read_text()) == {"name": "a"}


def test_changed_config_invalidates_the_stage_and_its_dependents(tmp_path):
    run = tmp_path / "run"
    run_stages(run, stages())
    old = read_stage_records(run)
    CALLS.clear()
    run_stages(run, stages(a_params={"k": 2}))
    assert CALLS["a"] == 1 and CALLS["c"] == 1  # c depends on a
    assert CALLS["b"] == 0 and CALLS["d"] == 0
    new = read_stage_records(run)
    assert new["a"].config_hash != old["a"].config_hash
    assert new["c"].config_hash != old["c"].config_hash
    assert new["b"].config_hash == old["b"].config_hash


def test_failure_is_recorded_dependents_skipped_others_run(tmp_path):
    run = tmp_path / "run"
    s = run_stages(run, stages(fail_b=True))
    st = statuses(s)
    assert st == {"a": "done", "b": "failed", "c": "done", "d": "skipped", "r": "done"}
    assert not s.ok
    rec = s.by_name()
    assert "ValueError: bad things" in rec["b"].error
    assert rec["d"].reason == "depends on b, which failed"
    log = run / "logs" / "b.txt"
    assert "Traceback" in log.read_text() and "bad things" in log.read_text()
    assert not (run / "b").exists() and not (run / "d").exists()
    # fixing b and rerunning redoes b and d only
    CALLS.clear()
    s2 = run_stages(run, stages())
    assert s2.ok and CALLS == Counter({"b": 1, "d": 1, "r": 1})


def test_killed_stage_left_running_is_redone(tmp_path):
    run = tmp_path / "run"
    run_stages(run, stages())
    m = read_manifest(run)
    m["stages"]["c"]["status"] = "running"
    atomic_write_json(run / "manifest.json", m)
    CALLS.clear()
    run_stages(run, stages())
    assert CALLS["c"] == 1 and CALLS["a"] == 0


def test_resumable_stage_gets_resume_flag_after_interruption(tmp_path):
    seen = []

    def train(ctx: StageContext) -> None:
        seen.append(ctx.resume)
        ctx.output.mkdir(parents=True, exist_ok=True)
        if (ctx.output / "half").exists():
            (ctx.output / "done").write_text("ok")
            return
        (ctx.output / "half").write_text("checkpoint")
        raise RuntimeError("killed half way")

    def check(out: Path) -> None:
        assert (out / "done").is_file()

    st = [Stage("train", train, check=check, resumable=True)]
    s1 = run_stages(tmp_path / "run", st)
    assert statuses(s1) == {"train": "failed"} and (tmp_path / "run" / "train" / "half").exists()
    s2 = run_stages(tmp_path / "run", st)
    assert statuses(s2) == {"train": "done"}
    assert seen == [False, True]


def test_stage_that_writes_unreadable_output_fails(tmp_path):
    def nothing(ctx: StageContext) -> None:
        pass

    s = run_stages(tmp_path / "run", [Stage("x", nothing, check=check_json)])
    assert statuses(s) == {"x": "failed"} and "missing" in s.records[0].error


def test_bad_stage_lists_and_foreign_directories_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="not an earlier stage"):
        run_stages(tmp_path / "a", [Stage("c", writer("c"), depends=("a",))])
    with pytest.raises(ConfigError, match="twice"):
        run_stages(tmp_path / "b", [Stage("a", writer("a")), Stage("a", writer("a"))])
    with pytest.raises(ConfigError, match="inside the run directory"):
        run_stages(tmp_path / "c", [Stage("a", writer("a"), output="../escape")])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        run_stages(foreign, stages())
    assert (foreign / "notes.txt").read_text() == "mine"
    other = tmp_path / "other"
    other.mkdir()
    atomic_write_json(other / "manifest.json", {"kind": "synthetic/visibility"})
    with pytest.raises(ConfigError, match="not a reproduce run"):
        run_stages(other, stages())


def test_stages_dropped_from_the_list_leave_the_manifest(tmp_path):
    run = tmp_path / "run"
    run_stages(run, stages())
    fewer = [s for s in stages() if s.name not in ("d",)]
    run_stages(run, fewer)
    assert set(read_stage_records(run)) == {"a", "b", "c", "r"}
    assert read_manifest(run)["stage_order"] == ["a", "b", "c", "r"]

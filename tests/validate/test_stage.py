"""The reproduce validate stage: the battery, then the end-to-end battery where the report reads it."""

from __future__ import annotations

from pathlib import Path

from tangentlab.validate import battery, end_to_end
from tangentlab.validate.stage import write_validation


def _record(monkeypatch):
    calls = []

    def fake_battery(out, cfg, *, quick):
        calls.append(("battery", Path(out), quick))
        return Path(out), True

    def fake_e2e(out, cfg, *, quick, nproc=1, on_result=None):
        calls.append(("end-to-end", Path(out), cfg.setting_name()))
        return Path(out), False

    monkeypatch.setattr(battery, "write_battery", fake_battery)
    monkeypatch.setattr(end_to_end, "write_end_to_end", fake_e2e)
    return calls


def test_quick_runs_the_quick_setting_and_a_default_the_standard_one(tmp_path, monkeypatch):
    calls = _record(monkeypatch)
    assert write_validation(tmp_path / "v", tmp_path / "v" / "e2e", quick=True) == (True, False)
    write_validation(tmp_path / "v", tmp_path / "v" / "e2e", quick=False, seed=3)
    assert calls == [("battery", tmp_path / "v", True), ("end-to-end", tmp_path / "v" / "e2e", "quick"),
                     ("battery", tmp_path / "v", False),
                     ("end-to-end", tmp_path / "v" / "e2e", "standard")]


def test_the_run_s_last_training_step_reaches_the_spot_check(tmp_path, monkeypatch):
    """``trained_to`` goes through to the spot check, which skips what the run cannot reach."""
    from tangentlab.validate import stage

    _record(monkeypatch)
    seen = []
    monkeypatch.setattr(stage, "spot_check_certificates",
                        lambda out, certs, *, k, seed, trained_to: seen.append((k, trained_to))
                        or True)
    write_validation(tmp_path / "v", tmp_path / "v" / "e2e", quick=True, trained_to=60)
    write_validation(tmp_path / "v", tmp_path / "v" / "e2e", quick=False)
    assert seen == [(1, 60), (3, None)]


def test_the_reproduce_stage_writes_at_the_reports_path(tmp_path, monkeypatch):
    from tangentlab.contract import END_TO_END_DIR, VALIDATE
    from tangentlab.pipeline.producers import run_producer
    from tangentlab.pipeline.reproduce import QUICK, producers
    from tangentlab.pipeline.stages import StageContext

    calls = _record(monkeypatch)
    ctx = StageContext(run_dir=tmp_path, output=tmp_path / "validate")
    row = next(p for p in producers(QUICK) if p.name == VALIDATE)
    run_producer(row, ctx)  # the stage function every row of the table uses
    assert calls[-1] == ("end-to-end", tmp_path / END_TO_END_DIR, "quick")
    assert END_TO_END_DIR == "validate/end-to-end"
    assert end_to_end.END_TO_END_KIND == "validate/end-to-end"  # what the report checks

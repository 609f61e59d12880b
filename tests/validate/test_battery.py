"""The validation battery (issue 10, item 8): criteria, run directory, CLI exit codes."""

from __future__ import annotations

import json

import pytest

from tangentlab.cli import main
from tangentlab.errors import ConfigError
from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME, RESULTS_NAME, read_results
from tangentlab.validate.battery import BatteryConfig, _check, wilson_interval


def test_config_refuses_settings_the_criteria_cannot_judge():
    BatteryConfig.quick().validate()
    BatteryConfig.full().validate()
    with pytest.raises(ConfigError, match="null_sims"):
        BatteryConfig(null_sims=100).validate()
    with pytest.raises(ConfigError, match="coverage_batches"):
        BatteryConfig(coverage_batches=8).validate()
    with pytest.raises(ConfigError, match="seed"):
        BatteryConfig(seed=-1).validate()


def test_checks_can_fail():
    assert _check("x", "coverage", 0.95, 100, low=0.93, high=0.97).passed
    assert not _check("x", "coverage", 0.90, 100, low=0.93, high=0.97).passed
    assert not _check("x", "calibration", 0.07, 200, high=0.06).passed
    assert not _check("x", "power", float("nan"), 10, low=0.8).passed
    c = _check("x", "null", 0.01, 5, high=0.03).to_dict()
    assert set(c) >= {"measured", "target", "passed", "kind"} and c["target"] == "<= 0.03"


def test_wilson_interval():
    lo, hi = wilson_interval(5, 100)
    assert 0.02 < lo < 0.05 < hi < 0.12
    assert wilson_interval(0, 50)[0] == pytest.approx(0.0, abs=1e-12)


def test_coverage_criterion_fails_for_the_old_setting():
    # the coverage check is failing-capable: 4 batches (the old quick mode) do not cover
    from tangentlab.validate.studies import coverage_study

    st = coverage_study(n_sims=80, n_batches=4, pool=40, n_boot=100, seed=5)
    assert not _check("c", "coverage", st.coverage_energy, st.n_sims, low=0.93, high=0.97).passed


def test_cli_bad_seed_is_exit_2(tmp_path, capsys):
    assert main(["validate", "--quick", "--seed", "-3", "--out", str(tmp_path / "v")]) == 2
    assert "seed" in capsys.readouterr().err
    assert not (tmp_path / "v").exists()


@pytest.mark.slow
def test_validate_quick_passes_and_writes_a_run_directory(quick_reproduce, tmp_path, monkeypatch):
    # The suite's shared quick reproduce ran this battery as its validate stage, with the call
    # `tangentlab validate --quick` makes: write_battery(out, BatteryConfig.quick(0), quick=True).
    run_dir, _rc, err, _ = quick_reproduce(2)
    out = run_dir / "validate"
    assert (out / CHECKS_NAME).is_file(), f"the quick reproduce wrote no validate stage:\n{err[-2000:]}"
    _cli_exits_0_and_writes_the_same_checks(out, tmp_path / "validate", monkeypatch)
    checks = json.loads((out / CHECKS_NAME).read_text())
    kinds = {c["kind"] for c in checks}
    assert kinds == {"power", "calibration", "coverage", "null"}
    names = " ".join(c["name"] for c in checks)
    for word in ("power", "false-positive", "coverage", "frequency-spread", "causal"):
        assert word in names
    assert all(c["passed"] and c["target"] and c["measured"] is not None for c in checks)
    df = read_results(out / RESULTS_NAME)
    assert {"power", "false_positive_rate", "coverage_enrichment",
            "frequency_null_mean_abs_rho", "causal_null_rejection_rate"} <= set(df["metric"])
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["kind"] == "validate" and manifest["quick"] is True
    assert manifest["null_control_space"] == "full"  # the p-value's controls (issue 18)
    fpr = [c for c in json.loads((out / "checks.json").read_text())
           if c["name"].startswith("null calibration")]
    assert len(fpr) == 3 and all("r/d" in c["name"] for c in fpr)
    assert (out / "validate_calibration.png").stat().st_size > 1000


def _cli_exits_0_and_writes_the_same_checks(stage, out, monkeypatch):
    """`tangentlab validate --quick` around the battery result the stage wrote (not rerun)."""
    import dataclasses

    import tangentlab.validate.battery as battery
    from tangentlab.config import config_to_dict

    manifest = json.loads((stage / MANIFEST_NAME).read_text())
    assert manifest["config"] == json.loads(json.dumps(config_to_dict(BatteryConfig.quick(0))))
    checks = json.loads((stage / CHECKS_NAME).read_text())
    names = {f.name for f in dataclasses.fields(battery.BatteryCheck)}
    replay = battery.BatteryResult(
        rows=read_results(stage / RESULTS_NAME).to_dict("records"),
        checks=[battery.BatteryCheck(**{k: v for k, v in c.items() if k in names}) for c in checks],
        figures={p.name: p.read_bytes() for p in stage.glob("*.png")},
        studies=manifest["studies"],
        timings={k: v for k, v in manifest["timings_s"].items() if k != "total"})

    def run_battery(cfg):
        assert cfg == BatteryConfig.quick(0)
        return replay

    monkeypatch.setattr(battery, "run_battery", run_battery)
    assert main(["validate", "--quick", "--out", str(out)]) == 0
    assert json.loads((out / CHECKS_NAME).read_text()) == checks
    assert json.loads((out / MANIFEST_NAME).read_text())["kind"] == manifest["kind"] == "validate"

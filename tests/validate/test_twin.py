"""The planted twin of a run: its end-to-end setting read from the run's measure manifests."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tangentlab.errors import ConfigError, DataError
from tangentlab.validate.twin import TWIN_WIDTH, read_run_setting, twin_setting

STEPS = [0, 1, 2, 4, 8, 16, 32, 63, 126, 251, 501, 583, 667, 750, 833, 917, 1000]
CONFIG = {"rank": 8, "n_batches": 64, "batch_size": 4, "n_boot": 1000, "interval": "studentized",
          "n_controls": 20, "control_pool": 200, "sample_rows": 4096, "causal_checkpoints": 4,
          "causal_controls": 5, "causal_batches": 8, "early_fraction": 0.3}


def write_measure(folder, *, steps=STEPS, sites=("blocks.0.resid_post", "blocks.3.resid_post"),
                  hidden=128, arch="decoder", **config):
    """A measure manifest with the fields a twin reads (what `tangentlab measure` writes)."""
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({
        "kind": "empirical/measure", "config": {**CONFIG, **config}, "hidden_size": hidden,
        "seq_len": 128, "sites": {s: {"site": s} for s in sites}, "arch": arch,
        "checkpoints": [{"checkpoint": f"step_{s:06d}", "step": s} for s in steps]}))
    return folder


@pytest.fixture
def run(tmp_path):
    """A reproduce run's layout: two measurements of two sites, the default schedule."""
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "reproduce"}))
    for arch in ("encoder", "decoder"):
        write_measure(tmp_path / "measure" / arch, arch=arch)
    return tmp_path


def test_the_twin_measures_at_the_run_s_schedule_units_windows_and_r_over_d(run):
    rs = read_run_setting(run)
    assert rs.measures == ("measure/decoder", "measure/encoder") and rs.units == 4
    # one unit per measured site, each planted with the head of its measurement's architecture
    assert rs.archs == ("decoder", "decoder", "encoder", "encoder")
    cfg = twin_setting(run, seed=3)
    assert [cfg.arch(u) for u in range(4)] == list(rs.archs)
    assert cfg.planted_spec("no-effect", arch=cfg.arch(2)).arch == "encoder"
    assert cfg.setting()["archs"] == ["decoder", "encoder"]
    assert cfg.steps == tuple(STEPS) and cfg.units == 4 and cfg.sims == 50 and cfg.seed == 3
    m = cfg.measure
    assert (m.n_batches, m.batch_size, m.seq_len, m.n_boot) == (64, 4, 128, 1000)
    assert (m.n_controls, m.control_pool, m.causal_checkpoints, m.early_fraction) == (20, 200, 4, 0.3)
    assert cfg.budget_tokens() == 64 * 4 * 128  # the run's 32768 eval tokens per checkpoint
    s = cfg.setting()
    assert s["steps"] == STEPS and s["early_fraction"] == 0.3
    spec = cfg.planted_spec("no-effect")
    assert (spec.d, spec.m, spec.seq_len) == (TWIN_WIDTH, 4, 128)  # r/d = 8/128 = 4/64
    assert cfg.planted_spec("rd-1/16").m == 4 and cfg.planted_spec("rd-1/4").m == 16  # own r/d
    assert s["rank_over_dim"] == [1 / 64, 1 / 4]


def test_one_measure_directory_is_twinned_on_its_own(tmp_path):
    one = write_measure(tmp_path / "m", steps=[0, 50, 100], sites=("blocks.1.resid_post",))
    cfg = twin_setting(one, sims=7)
    assert cfg.steps == (0, 50, 100) and cfg.units == 1 and cfg.sims == 7
    assert cfg.archs == ("decoder",) and cfg.setting()["archs"] == ["decoder"]
    enc = twin_setting(write_measure(tmp_path / "e", sites=("a", "b"), arch="encoder"))
    assert enc.archs == ("encoder",) and enc.units == 2  # one name serves every unit


def test_measurements_that_disagree_or_cannot_be_planted_are_refused(tmp_path, run):
    write_measure(tmp_path / "x" / "measure" / "a")
    write_measure(tmp_path / "x" / "measure" / "b", steps=[0, 10, 1000])
    with pytest.raises(DataError, match="different checkpoint schedules"):
        twin_setting(tmp_path / "x")
    write_measure(tmp_path / "y" / "measure" / "a")
    write_measure(tmp_path / "y" / "measure" / "b", n_boot=200)
    with pytest.raises(DataError, match="differ in n_boot"):
        twin_setting(tmp_path / "y")
    with pytest.raises(ConfigError, match="r/d < 1/2"):
        twin_setting(write_measure(tmp_path / "wide", rank=64))
    with pytest.raises(DataError, match="start at step 0"):
        twin_setting(write_measure(tmp_path / "late", steps=[10, 20]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no measurement to twin"):
        twin_setting(tmp_path / "empty")
    with pytest.raises(DataError, match="is not a directory"):
        twin_setting(tmp_path / "missing")


def test_a_damaged_or_incomplete_manifest_is_a_typed_error(tmp_path):
    one = write_measure(tmp_path / "m")
    m = json.loads((one / "manifest.json").read_text())
    m["config"].pop("rank")
    (one / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match="records no integer config rank"):
        twin_setting(one)
    m["config"]["rank"] = 8
    m["arch"] = "seq2seq"
    (one / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(DataError, match="records arch 'seq2seq'; a twin plants an encoder or a"):
        twin_setting(one)
    (one / "manifest.json").write_text("{not json")
    with pytest.raises(DataError):
        twin_setting(one)


def _enrichment(folder, curves):
    """results.csv of a measurement: site -> [(step, enrichment)] (what run_effect reads)."""
    from tangentlab.runs import write_results

    write_results([{"model": "m", "arch": "decoder", "checkpoint": f"step_{st:06d}", "step": st,
                    "site": site, "bucket": "all", "metric": "enrichment", "value": v,
                    "ci_low": v * 0.9, "ci_high": v * 1.1}
                   for site, curve in curves.items() for st, v in curve],
                  folder / "results.csv")


def test_the_effect_scenario_is_planted_at_the_magnitudes_the_run_measured(tmp_path, run):
    """Issue 35: "could this run have seen what it reports?" The twin's power scenario plants
    the smallest unit's last enrichment, the weakest decline and the median peak; "smaller"
    halves the excesses; "stated" keeps EFFECT; a run without enrichment above 1 is refused."""
    from tangentlab.validate.planted_scenarios import EFFECT
    from tangentlab.validate.twin import MIN_DECLINE, run_effect

    a, b = "blocks.0.resid_post", "blocks.3.resid_post"
    _enrichment(run / "measure" / "decoder", {a: [(0, 2.2), (126, 31.9), (1000, 9.1)],
                                              b: [(0, 2.0), (251, 21.2), (1000, 19.6)]})
    _enrichment(run / "measure" / "encoder", {a: [(0, 1.1), (126, 12.3), (1000, 2.3)],
                                              b: [(0, 1.6), (501, 6.0), (1000, 5.4)]})
    eff = run_effect(run)
    assert eff["k_end"] == pytest.approx(2.3)  # the smallest last enrichment
    assert eff["k_peak"] == pytest.approx(2.3 * 21.2 / 19.6)  # the weakest decline
    assert eff["x_peak"] == pytest.approx((0.126 + 0.251) / 2)  # the median peak
    cfg = twin_setting(run, effect="run")
    spec = cfg.planted_spec("effect")
    assert (spec.k_end, spec.k_peak, spec.x_peak) == pytest.approx(
        (eff["k_end"], eff["k_peak"], eff["x_peak"]))
    assert spec.curve == "weaken" and spec.alpha == EFFECT["alpha"]  # the rest: stated sizes
    assert cfg.planted_spec("no-effect").k_end == 3.0  # the nulls are untouched
    assert cfg.setting()["effect_curve"] == eff
    small = twin_setting(run, effect="smaller").planted_spec("effect")
    assert small.k_end == pytest.approx(1.65) and small.k_peak == pytest.approx(
        max(1 + (eff["k_peak"] - 1) / 2, 1.65 * MIN_DECLINE))
    assert small.k_peak / small.k_end >= MIN_DECLINE - 1e-12
    stated = twin_setting(run).planted_spec("effect")
    assert (stated.k_end, stated.k_peak) == (EFFECT["k_end"], EFFECT["k_peak"])
    # no decline anywhere: the smallest planted one, so the weakens-late truth still holds
    _enrichment(run / "measure" / "encoder", {a: [(0, 1.0), (500, 2.0), (1000, 2.0)]})
    assert run_effect(run)["k_peak"] == pytest.approx(2.0 * MIN_DECLINE)
    # halving 2.1 and 2.0 alone would leave a decline of 1.55/1.5 = 1.033: kept at MIN_DECLINE
    small = twin_setting(run, effect="smaller").planted_spec("effect")
    assert (small.k_end, small.k_peak) == pytest.approx((1.5, 1.5 * MIN_DECLINE))
    _enrichment(run / "measure" / "encoder", {a: [(0, 1.0), (500, 1.2), (1000, 0.9)]})
    with pytest.raises(DataError, match="no enrichment above 1"):
        run_effect(run)
    with pytest.raises(ConfigError, match="one of stated, run, smaller"):
        twin_setting(run, effect="huge")
    with pytest.raises(ConfigError, match="weakens late"):
        dataclasses.replace(cfg, effect_k_peak=2.0, effect_k_end=2.0)

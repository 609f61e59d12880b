"""EndToEndConfig is a Config: declared bounds, typed errors, presets, the recorded setting."""

from __future__ import annotations

import pytest

from tangentlab.config import config_hash, load_config
from tangentlab.errors import ConfigError
from tangentlab.validate.end_to_end_config import SETTINGS, EndToEndConfig, EndToEndMeasure
from tangentlab.validate.planted_scenarios import QUICK_SCENARIOS, SCENARIOS


@pytest.mark.parametrize("kw, words", [
    ({"sims": 0}, "'sims' must be a whole number >= 1; got 0"),
    ({"units": 1.5}, "'units' must be a whole number"),
    ({"scenarios": ("nope",)}, "has item 'nope', which must be one of 'effect'"),
    ({"scenarios": ()}, "'scenarios' needs at least 1 item"),
    ({"scenarios": ("flat", "flat")}, "must not list an item twice"),
    ({"steps": (5, 10)}, "'steps' must start at 0 and increase"),
    ({"corpus": "nowhere"}, "'corpus' must be one of 'wikipedia'"),
    ({"measure": {"n_boot": 1}}, "'n_boot' must be a whole number >= 2"),
    ({"measure": {"n_batchs": 8}}, "unknown measure key(s) 'n_batchs'"),
    ({"archs": ("gpt",)}, "has item 'gpt', which must be one of 'decoder', 'encoder'"),
    ({"archs": ("decoder", "encoder", "encoder")},
     "'archs' names one head for every unit or one per unit (2)"),
])
def test_bad_values_are_config_errors_naming_key_and_bound(kw, words):
    with pytest.raises(ConfigError) as err:
        EndToEndConfig(**kw)
    assert words in str(err.value)


def test_presets_and_their_names():
    full = EndToEndConfig()
    assert full == EndToEndConfig.full() and full.scenarios == tuple(SCENARIOS)
    assert EndToEndConfig.quick(3).scenarios == QUICK_SCENARIOS
    assert [EndToEndConfig.preset(n, seed=7).setting_name() for n in SETTINGS] == list(SETTINGS)
    assert EndToEndConfig(sims=3).setting_name() == "custom"
    with pytest.raises(ConfigError, match="one of quick, standard, full"):
        EndToEndConfig.preset("huge")
    # TOML / --set style overrides reach the nested measure settings, coerced
    cfg = load_config(EndToEndConfig, overrides={"measure.n_batches": "32", "sims": "3"},
                      base=EndToEndConfig.quick())
    assert cfg.measure.n_batches == 32 and cfg.measure.n_boot == 200 and cfg.sims == 3
    assert config_hash(cfg) != config_hash(EndToEndConfig.quick())


def test_measure_reads_as_the_overrides_it_sets():
    m = EndToEndMeasure(rank=None, control_pool=100)
    assert "rank" not in m and m["control_pool"] == 100 and m.get("seq_len") is None
    assert {"rank": 4, **m}["rank"] == 4  # a scenario's planted rank stays unless set
    assert dict(EndToEndMeasure(rank=2))["rank"] == 2


def test_setting_records_what_the_report_compares():
    s = EndToEndConfig.standard().setting()
    # two units, as a row combines them: a broken combine() must be visible (issue 33)
    assert s["name"] == "standard" and s["sims"] == 4 and s["units"] == 2
    assert s["tokens_per_checkpoint"] == 16 * 4 * 64 and s["n_boot"] == 200
    assert s["rank_over_dim"] == [1 / 64, 1 / 4]  # the r/d nulls widen the range
    assert s["scenarios"] == s["scenarios_known"] and not s["bound_checked"]
    q = EndToEndConfig.quick().setting()
    assert q["rank_over_dim"] == [4 / 32, 4 / 32] and q["scenarios"] == list(QUICK_SCENARIOS)
    assert EndToEndConfig().setting()["bound_checked"]
    assert s["archs"] == ["decoder"]  # the presets plant causal LMs
    both = EndToEndConfig(units=2, archs=("encoder", "decoder"))
    assert [both.arch(0), both.arch(1)] == ["encoder", "decoder"]
    assert both.setting()["archs"] == ["decoder", "encoder"]


def test_every_mutant_breaks_what_it_names():
    """Issue 33, item 6: each mutant changes the verdict path, and only inside its block."""
    import math

    import numpy as np

    import tangentlab.measure as measure
    from tangentlab.claims import rules as R
    from tangentlab.errors import ConfigError
    from tangentlab.measure import causal_controls
    from tangentlab.validate.end_to_end_config import EndToEndConfig
    from tangentlab.validate.mutants import MUTANTS, mutant

    for name in MUTANTS:  # the config accepts exactly the mutants there are
        assert EndToEndConfig(mutant=name).mutant == name
    with pytest.raises(ConfigError, match="mutant"):
        EndToEndConfig(mutant="nope")
    mixed = {"a": R.Outcome(R.NOT_SUPPORTED, "x"), "b": R.Outcome(R.SUPPORTED, "y")}
    assert R.combine(mixed).status == R.INCONCLUSIVE
    with mutant("combine-first-unit"):
        assert R.combine(mixed).status == R.NOT_SUPPORTED
    assert R.combine(mixed).status == R.INCONCLUSIVE

    def traj(vals):
        ivs = [R.Interval(f"step {s}", v, v - 0.2, v + 0.2) for s, v in vals]
        peak = max(ivs, key=lambda x: x.value)
        return R.ProxyTrajectory("p", peak, False, ivs[:1], ivs[1:])

    down, flat = traj([(100, 6.0), (400, 4.0), (800, 4.0)]), traj([(100, 6.0), (400, 6.0), (800, 6.0)])
    assert R.weakens_late_rule(down, flat, drift_angle=math.radians(35)).status == R.INCONCLUSIVE
    with mutant("late-fixed-only"):
        assert R.weakens_late_rule(down, flat, drift_angle=math.radians(35)).status == R.SUPPORTED

    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((16, 2)))[0]
    cov = np.diag(np.linspace(3, 1, 16))
    plain = causal_controls.dose_plan(Q, cov, 3, 0, match="both")
    with mutant("causal-variance-only"):
        broken = causal_controls.dose_plan(Q, cov, 3, 0, match="both")
    assert plain.noise is not None and broken.noise is None and broken.match == "both"
    pool = measure.normal_controls(Q, 40, seed=1)
    batches = [rng.standard_normal((32, 16)) * np.r_[2.0, 2.0, np.ones(14)] for _ in range(12)]
    be = measure.batch_energies(Q, pool, batches)
    wide = measure.batch_control_test(be, n_controls=20, n_boot=200, seed=0)
    with mutant("narrow-intervals"):
        half = measure.batch_control_test(be, n_controls=20, n_boot=200, seed=0)
    log_width = math.log(wide.enrichment_ci_high / wide.enrichment_ci_low)
    assert half.enrichment == wide.enrichment
    assert math.log(half.enrichment_ci_high / half.enrichment_ci_low) == pytest.approx(log_width / 2)
    with pytest.raises(Exception, match="unknown mutant"):
        with mutant("nope"):
            pass


def test_an_extension_names_its_simulations_and_merged_jobs_have_no_gap():
    from tangentlab.validate.end_to_end_config import Extension, jobs, merged_jobs

    cfg = EndToEndConfig.quick(0)  # 3 scenarios x 1 simulation
    ext = Extension.parse(" 1:3 @ no-effect ")
    assert (ext, str(ext)) == (Extension(1, 3, ("no-effect",)), "1:3@no-effect")
    assert str(Extension.parse("1:3@short-eval,effect")) == "1:3@effect,short-eval"  # one spelling
    assert ext.jobs(cfg) == [("no-effect", 1), ("no-effect", 2)]
    assert merged_jobs(cfg, []) == jobs(cfg)
    assert merged_jobs(cfg, [ext]) == [("effect", 0), ("no-effect", 0), ("no-effect", 1),
                                       ("no-effect", 2), ("short-eval", 0)]
    for text, words in (("3:1@effect", "FIRST < LAST"), ("1:3@", "FIRST:LAST@"),
                        ("1:3@effect,effect", "each scenario once"), ("x", "FIRST:LAST@")):
        with pytest.raises(ConfigError, match=words):
            Extension.parse(text)
    for name in SCENARIOS:  # every name survives its settings text, "/" included (rd-1/64)
        e = Extension(50, 200, (name, "no-effect") if name != "no-effect" else (name,))
        assert Extension.parse(str(e)) == e
    with pytest.raises(ConfigError, match="does not simulate"):
        Extension(1, 3, ("bursty",)).jobs(cfg)
    with pytest.raises(ConfigError, match="already simulated"):
        Extension(1, 3, ("effect",)).jobs(EndToEndConfig.standard(0))  # 4 sims: starts at 4
    with pytest.raises(ConfigError, match="gap at #1"):
        merged_jobs(cfg, [Extension(2, 3, ("effect",))])

"""The end-to-end battery: planted trajectories through measure and the report's rules."""

from __future__ import annotations

import json
import sys

import pytest

from tangentlab.claims.table import TRUTHS
from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME, RESULTS_NAME, read_results
from tangentlab.validate.end_to_end import (
    STATUSES_NAME,
    EndToEndConfig,
    SimulationResult,
    summarize,
)
from tangentlab.validate.planted_scenarios import PREDICTION_ROWS, SCENARIOS


def _results(name: str, statuses: list[str], row: str = "enrichment"):
    return [SimulationResult(name, i, {row: s}, {row: ""}, 0.0) for i, s in enumerate(statuses)]


def test_scenarios_cover_the_nulls_of_the_issue():
    names = set(SCENARIOS)
    for want in ("no-effect", "short-eval", "bursty", "convex", "concave", "rogue",
                 "pos0-excluded", "drift", "flat", "plateau", "slow-rise", "rd-1/64", "rd-1/16",
                 "rd-1/4", "effect"):
        assert want in names
    for sc in SCENARIOS.values():
        assert set(sc.truth) <= set(PREDICTION_ROWS)
        assert set(sc.truth.values()) <= set(TRUTHS)
    assert set(SCENARIOS["effect"].truth.values()) == {"positive"}


def test_wrong_rates_are_judged_with_the_wilson_bound_only_when_it_can_be_met():
    cfg = EndToEndConfig(scenarios=("no-effect",), sims=50)
    _, checks = summarize(cfg, _results("no-effect", ["inconclusive"] * 50))
    mine = [c for c in checks if c["row"] == "enrichment"]
    assert {c["metric"] for c in mine} == {"wrong_supported", "wrong_not_supported"}
    assert all(c["passed"] and c["bound_checked"] for c in mine)
    # 3/50 = 0.06 wrong "supported": above 0.05, the check fails
    _, checks = summarize(cfg, _results("no-effect", ["supported"] * 3 + ["inconclusive"] * 47))
    ws = next(c for c in checks if c["row"] == "enrichment" and c["metric"] == "wrong_supported")
    assert not ws["passed"] and ws["measured"] == pytest.approx(0.06)
    # 2/50 = 0.04 passes the point target but its Wilson upper bound (0.135) is above 0.08
    _, checks = summarize(cfg, _results("no-effect", ["supported"] * 2 + ["inconclusive"] * 48))
    ws = next(c for c in checks if c["row"] == "enrichment" and c["metric"] == "wrong_supported")
    assert not ws["passed"] and ws["ci_high"] > 0.08


def test_power_is_checked_on_positive_truths():
    """A certifying run (>= 45 simulations) asks power >= 0.8 of the point rate; a screen asks
    the count to stay inside the exact binomial 1% tail at 0.8 (issue 33: at 4 simulations the
    point criterion failed a true power of 0.9 a third of the time)."""
    from scipy.stats import binom

    def power(sims, k):
        cfg = EndToEndConfig(scenarios=("effect",), sims=sims)
        rows, checks = summarize(cfg, _results("effect", ["supported"] * k
                                                + ["inconclusive"] * (sims - k)))
        return rows, next(c for c in checks if c["row"] == "enrichment" and c["metric"] == "power")

    rows, pw = power(50, 39)
    assert not pw["passed"] and pw["measured"] == pytest.approx(0.78) and pw["bound_checked"]
    assert power(50, 40)[1]["passed"]
    assert any(r["metric"] == "rate_inconclusive" and r["value"] == pytest.approx(11 / 50)
               for r in rows if r["row"] == "enrichment")
    # the screen: 3/4 passes (it failed as a point rate), 0/4 fails, and the accept limit is
    # the 1% quantile of Binomial(n, 0.8)
    assert power(4, 3)[1]["passed"] and not power(4, 0)[1]["passed"]
    limit = int(binom.ppf(0.01, 10, 0.8))
    assert power(10, limit)[1]["passed"] and not power(10, limit - 1)[1]["passed"]
    assert not power(10, limit)[1]["bound_checked"]
    assert binom.cdf(limit - 1, 10, 0.8) <= 0.01  # a power of 0.8 fails at most 1% of the time


def test_a_screen_judges_wrong_rates_with_the_binomial_tail():
    """Below 45 simulations a wrong count of 2/4 is within the 1% tail at 0.05; 3/4 is not."""
    cfg = EndToEndConfig(scenarios=("no-effect",), sims=4)
    for k, ok in ((2, True), (3, False)):
        _, checks = summarize(cfg, _results("no-effect", ["supported"] * k
                                            + ["inconclusive"] * (4 - k)))
        ws = next(c for c in checks if c["row"] == "enrichment" and c["null"] == "no-effect"
                  and c["metric"] == "wrong_supported")
        assert ws["passed"] is ok and not ws["bound_checked"]


def _intervals(name: str, half_width: float, *, shift: float = 0.0, n: int = 100, seed: int = 0):
    """``n`` one-unit simulations of ``name`` whose enrichment intervals sit on the log scale
    around an estimate ~ N(shift, 0.1²) of log 1, ``half_width`` standard errors either side."""
    import math

    import numpy as np

    est = np.random.default_rng(seed).normal(shift, 0.1, n)
    return [SimulationResult(name, i, {"enrichment": "inconclusive"}, {"enrichment": ""}, 0.0,
                             enrichment_intervals=((math.exp(e), math.exp(e - half_width * 0.1),
                                                    math.exp(e + half_width * 0.1)),))
            for i, e in enumerate(est)]


def _check(checks, metric, null="all nulls (pooled)"):
    return next(c for c in checks if c["metric"] == metric and c["null"] == null)


def test_enrichment_intervals_are_checked_against_the_planted_truth():
    """Issue 33, item 6: intervals half as wide pass every row check (intersection-union asks
    every unit to err at once) but not the coverage of the planted truth."""
    cfg = EndToEndConfig(scenarios=("no-effect",), sims=100)
    _, good = summarize(cfg, _intervals("no-effect", 1.96))
    assert _check(good, "coverage")["passed"] and _check(good, "truth_above_interval")["passed"]
    _, narrow = summarize(cfg, _intervals("no-effect", 0.98))
    assert not _check(narrow, "coverage")["passed"]
    assert _check(narrow, "coverage")["measured"] < 0.8
    # intervals that run low (the truth above them: a false "not supported" in waiting)
    _, low = summarize(cfg, _intervals("no-effect", 1.96, shift=-0.12))
    assert not _check(low, "truth_above_interval")["passed"]
    # a scenario whose enrichment is not exact (a planted k > 1) is not judged
    _, effect = summarize(EndToEndConfig(scenarios=("effect",), sims=100),
                          _intervals("effect", 0.98))
    assert not [c for c in effect if c["metric"] in ("coverage", "truth_above_interval")]


def test_the_row_level_wrong_not_supported_rate_is_pooled_over_the_nulls():
    """The intersection-union row's bound, checked over every null scenario of the run."""
    cfg = EndToEndConfig(scenarios=("no-effect", "bursty", "effect"), sims=40)
    ok = (_results("no-effect", ["not supported"] + ["inconclusive"] * 39)
          + _results("bursty", ["inconclusive"] * 40) + _results("effect", ["supported"] * 40))
    rows, checks = summarize(cfg, ok)
    c = _check([c for c in checks if c["row"] == "enrichment"], "wrong_not_supported")
    assert c["passed"] and c["n"] == 80 and c["measured"] == pytest.approx(1 / 80)
    ws = _check([c for c in checks if c["row"] == "enrichment"], "wrong_supported")
    assert ws["passed"] and ws["n"] == 80 and ws["measured"] == 0
    assert any(r["null"] == "all nulls (pooled)" and r["metric"] == "wrong_not_supported"
               for r in rows)
    bad = (_results("no-effect", ["not supported"] * 5 + ["inconclusive"] * 35)
           + _results("bursty", ["not supported"] * 4 + ["inconclusive"] * 36))
    _, checks = summarize(cfg, bad)
    assert not _check([c for c in checks if c["row"] == "enrichment"],
                      "wrong_not_supported")["passed"]  # 9/80 = 0.11 against 0.025


def test_a_simulation_that_raises_is_recorded_and_certifies_nothing(monkeypatch, tmp_path):
    """One failing simulation must not lose the others (the full run once stopped after 567 of
    750 on a NaN activation): it is recorded as "not run", and no row is certified."""
    import tangentlab.validate.end_to_end as e2e

    def boom(cfg, name, sim, text, work):
        raise FloatingPointError("a NaN activation")

    monkeypatch.setattr(e2e, "simulate", boom)
    cfg = EndToEndConfig(scenarios=("no-effect",), sims=50)
    bad = e2e._simulate_or_record(cfg, "no-effect", 7, None, tmp_path)
    assert "FloatingPointError: a NaN activation" in bad.error
    assert set(bad.statuses.values()) == {"not run"} and set(bad.statuses) == set(PREDICTION_ROWS)
    ok = [SimulationResult("no-effect", i, {r: "inconclusive" for r in PREDICTION_ROWS},
                           {r: "" for r in PREDICTION_ROWS}, 0.0) for i in range(50) if i != 7]
    _, checks = summarize(cfg, ok + [bad])
    err = next(c for c in checks if c["metric"] == "errors")
    assert not err["passed"] and "no-effect #7" in err["detail"]
    _, clean = summarize(cfg, ok + [ok[0]])
    assert next(c for c in clean if c["metric"] == "errors")["passed"]


@pytest.fixture(scope="module")
def quick_run(quick_reproduce):
    """The quick end-to-end run the suite's quick reproduce wrote (its validate stage)."""
    from tangentlab.report.load import END_TO_END_DIR

    out, rc, err, _ = quick_reproduce(2)
    path = out / END_TO_END_DIR
    assert path.is_dir(), err[-3000:]
    return path, all(c["passed"] for c in json.loads((path / CHECKS_NAME).read_text()))


@pytest.mark.slow
def test_quick_run_writes_its_directory_and_checks(quick_run):
    path, _ = quick_run
    for name in (RESULTS_NAME, CHECKS_NAME, MANIFEST_NAME, STATUSES_NAME):
        assert (path / name).is_file()
    checks = json.loads((path / CHECKS_NAME).read_text())
    cfg = EndToEndConfig.quick(0)
    for name in cfg.scenarios:
        for row in SCENARIOS[name].truth:
            assert any(c["row"] == row and c["null"] == name for c in checks), (row, name)
    assert not any(c["bound_checked"] for c in checks)  # one simulation: point rates only
    df = read_results(path / RESULTS_NAME)
    assert {"rate_supported", "wrong_supported", "power"} <= set(df["metric"])
    assert ((df["ci_low"] <= df["value"]) & (df["value"] <= df["ci_high"])).all()
    manifest = json.loads((path / MANIFEST_NAME).read_text())
    assert manifest["kind"] == "validate/end-to-end" and manifest["quick"] is True
    assert manifest["setting"] == cfg.setting() and manifest["setting"]["name"] == "quick"
    from tangentlab.report.gating import read_end_to_end

    gate = read_end_to_end(path).rows  # quick certifies nothing: point rates only
    assert set(PREDICTION_ROWS) <= set(gate) and not any(gate[r].passed for r in PREDICTION_ROWS)
    statuses = read_results(path / STATUSES_NAME)
    assert set(statuses["row"]) == set(PREDICTION_ROWS)
    # the stored statuses re-summarize to the same checks
    from tangentlab.validate.end_to_end import read_statuses

    _, again = summarize(cfg, read_statuses(path))
    assert [(c["name"], c["passed"], c["measured"]) for c in again] == \
        [(c["name"], c["passed"], c["measured"]) for c in checks]


@pytest.mark.slow
def test_a_rule_that_always_says_supported_is_caught(quick_run, monkeypatch):
    """Re-decide the stored quick measurements of both nulls with a broken enrichment rule.

    One simulation per null is too few for any (row, null) check: the exact binomial 1% tail at
    0.05 accepts 1/1 wrong. Pooled over the two nulls, 2/2 wrong "supported" is outside the tail
    at 0.025, and the run fails."""
    from tangentlab.claims import rules as R
    from tangentlab.validate.end_to_end import decide

    path, _ = quick_run
    work = path / "simulations"
    nulls = ("no-effect", "short-eval")
    dirs = {n: sorted(work.glob(f"{n}/sim000/u*-measure")) for n in nulls}
    assert all(dirs.values())
    honest = decide(dirs["no-effect"], work)["enrichment"][0]
    monkeypatch.setattr(R, "enrichment_rule", lambda *a, **k: R.Outcome(R.SUPPORTED, "always"))
    broken = {n: decide(d, work)["enrichment"][0] for n, d in dirs.items()}
    assert set(broken.values()) == {R.SUPPORTED}
    cfg = EndToEndConfig(scenarios=nulls, sims=1)
    res = [SimulationResult(n, 0, {"enrichment": b}, {"enrichment": ""}, 0.0)
           for n, b in broken.items()]
    _, checks = summarize(cfg, res)
    one = next(c for c in checks if c["row"] == "enrichment" and c["null"] == "no-effect"
               and c["metric"] == "wrong_supported")
    assert one["measured"] == 1.0 and one["passed"]  # a screen of one simulation cannot tell
    pooled = next(c for c in checks if c["row"] == "enrichment" and c["metric"] == "wrong_supported"
                  and c["null"] == "all nulls (pooled)")
    assert pooled["measured"] == 1.0 and pooled["n"] == 2 and not pooled["passed"]
    stored = read_results(path / STATUSES_NAME)
    mine = stored[(stored["null"] == "no-effect") & (stored["row"] == "enrichment")
                  & (stored["metric"] == "status")]
    assert list(mine["value"]) == [honest]  # re-deciding reproduces the stored verdict


def test_cli_routes_end_to_end(tmp_path, capsys, monkeypatch):
    """``validate --end-to-end --quick --nproc 2`` reaches the harness with those settings."""
    from tangentlab.cli import main
    from tangentlab.validate import end_to_end

    seen = {}

    def fake(out, cfg, *, quick, nproc, on_result=None, resume=False, shard=None,
             extension=None):
        seen.update(out=out, sims=cfg.sims, quick=quick, nproc=nproc)
        out.mkdir(parents=True)
        (out / CHECKS_NAME).write_text(json.dumps([{
            "name": "enrichment / no-effect: wrong_supported", "passed": False, "measured": 1.0,
            "target": "<= 0.05", "detail": "1/1 wrong"}]))
        return out, False

    monkeypatch.setattr(end_to_end, "write_end_to_end", fake)
    rc = main(["validate", "--end-to-end", "--quick", "--nproc", "2", "--out",
               str(tmp_path / "cli")])
    assert rc == 1 and seen["quick"] is True and seen["nproc"] == 2 and seen["sims"] == 1
    text = capsys.readouterr().out
    assert "FAIL  enrichment / no-effect" in text and "point rates only" in text


def test_cli_setting_picks_the_named_end_to_end_setting(tmp_path, capsys, monkeypatch):
    from tangentlab.cli import main
    from tangentlab.validate import end_to_end

    seen = {}

    def fake(out, cfg, *, quick, nproc, on_result=None, resume=False, shard=None,
             extension=None):
        seen.update(name=cfg.setting_name(), quick=quick)
        out.mkdir(parents=True)
        (out / CHECKS_NAME).write_text("[]")
        return out, True

    monkeypatch.setattr(end_to_end, "write_end_to_end", fake)
    assert main(["validate", "--end-to-end", "--setting", "standard", "--out",
                 str(tmp_path / "a")]) == 0
    assert seen == {"name": "standard", "quick": False}
    assert main(["validate", "--end-to-end", "--quick", "--setting", "full", "--out",
                 str(tmp_path / "b")]) == 2
    assert "contradict" in capsys.readouterr().err


def test_an_equivalence_row_is_right_to_say_not_supported_under_a_null():
    """The ablation row's "not supported" claims no direction-specific cost: true wherever none
    is planted, so only "supported" is wrong there (issue 18); an ordinary row keeps both."""
    from tangentlab.claims.table import claim

    assert claim("ablation").unplanted == "negative" and claim("enrichment").unplanted == "null"
    for sc in SCENARIOS.values():
        planted = sc.spec.get("cost_ratio", 1.0) != 1.0
        assert sc.truth["ablation"] == ("positive" if planted else "negative"), sc.name
        # the learning arms follow the gradient enrichment at the last checkpoint
        want = ("positive" if sc.truth["enrichment"] == "positive" and sc.name != "drift"
                else "negative")  # drift: the mean gradient barely projects on the fixed proxy
        assert sc.truth["learning-arms"] == want, sc.name
    cfg = EndToEndConfig(scenarios=("no-effect", "convex"), sims=50)
    res = (_results("no-effect", ["not supported"] * 50, row="ablation")
           + _results("convex", ["supported"] * 5 + ["not supported"] * 45, row="ablation"))
    _, checks = summarize(cfg, res)
    mine = {(c["null"], c["metric"]): c for c in checks if c["row"] == "ablation"}
    assert set(mine) == {("no-effect", "wrong_supported"), ("convex", "wrong_supported"),
                         ("all nulls (pooled)", "wrong_supported")}  # never wrong_not_supported
    assert mine[("no-effect", "wrong_supported")]["passed"]
    assert not mine[("convex", "wrong_supported")]["passed"]
    _, checks = summarize(cfg, _results("no-effect", ["not supported"] * 50))
    assert not next(c for c in checks if c["row"] == "enrichment"
                    and c["metric"] == "wrong_not_supported")["passed"]
    from tangentlab.errors import UnknownNameError

    with pytest.raises(UnknownNameError):
        claim("ablaton")


def _record_pid_then_sleep(folder: str) -> None:
    """A simulation stand-in: says it started, then runs far longer than the test waits."""
    import time

    from tests.killing import mark_started

    mark_started(folder)
    time.sleep(120)


_POOL_PARENT = """
import sys, time
from tangentlab.validate.end_to_end import worker_pool
from tests.validate.test_end_to_end import _record_pid_then_sleep
if __name__ == "__main__":
    pool = worker_pool(1)
    pool.submit(_record_pid_then_sleep, sys.argv[1])
    time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the parent-death signal is Linux's (elsewhere the worker is not tied)")
def test_a_killed_end_to_end_run_leaves_no_simulation_running(tmp_path):
    """`validate --end-to-end --nproc N` killed: its simulation workers die with it."""
    from tests.killing import worker_outlives_killed_parent

    assert not worker_outlives_killed_parent(_POOL_PARENT, tmp_path), (
        "a simulation worker outlived the killed run")

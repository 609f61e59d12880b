"""The long-horizon learning arms (issue 36, item 1): onto / away from Q_T and from rank-matched
random subspaces, read on the held-out loss curve."""

from __future__ import annotations

import csv
import json
from dataclasses import replace as dataclasses_replace

import numpy as np
import pytest

from tangentlab.claims.rules import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from tangentlab.empirical.training.arms_study import (
    ArmCurves,
    ArmsStudyConfig,
    arms_rows,
    arms_verdict,
    run_arms,
    write_arms_study,
)
from tangentlab.errors import ConfigError

READS = (0, 10, 20, 40)


def _curves(onto_gap: float, away_gap: float, *, noise: float = 0.0, m: int = 2, nb: int = 6):
    """Known curves: every arm learns alike, except that ``onto`` ends ``onto_gap`` below and
    ``away`` ``away_gap`` above the rest, the gap growing linearly in t (mean gap: half)."""
    arms = ["unmodified", "onto", "away"] + [f"{k}_control_{j}" for j in range(m)
                                             for k in ("onto", "away")]
    t = np.asarray(READS, dtype=float)
    rng = np.random.default_rng(0)
    L = np.empty((len(arms), len(READS), nb))
    for a, name in enumerate(arms):
        curve = 5.0 - 0.01 * t - {"onto": onto_gap, "away": -away_gap}.get(name, 0.0) * t / t[-1]
        L[a] = curve[:, None] + noise * rng.standard_normal((len(READS), nb))
    counts = np.full_like(L, 100.0)
    return ArmCurves(tuple(arms), READS, L * counts, counts, m)


@pytest.mark.parametrize("onto_gap, away_gap, verdict", [
    (0.1, 0.2, SUPPORTED), (-0.1, 0.2, NOT_SUPPORTED), (0.1, -0.2, NOT_SUPPORTED)])
def test_the_gaps_are_the_mean_distance_between_curves(onto_gap, away_gap, verdict):
    cfg = ArmsStudyConfig(n_boot=200)
    rows, got = arms_rows(_curves(onto_gap, away_gap), cfg)
    by = {r["metric"]: r for r in rows if r["metric"] != "arms_loss"}
    assert by["arms_onto_gain"]["value"] == pytest.approx(onto_gap / 2)
    assert by["arms_away_cost"]["value"] == pytest.approx(away_gap / 2)
    assert got == verdict == by["arms_onto_gain"]["rule"]
    curves = [r for r in rows if r["metric"] == "arms_loss"]
    assert len(curves) == 7 * len(READS) and {r["step"] for r in curves} == set(READS)


def test_noise_without_a_gap_is_inconclusive_and_its_interval_covers_zero():
    rows, got = arms_rows(_curves(0.0, 0.0, noise=0.05), ArmsStudyConfig(n_boot=500))
    gain = next(r for r in rows if r["metric"] == "arms_onto_gain")
    assert gain["ci_low"] < 0 < gain["ci_high"] and got == INCONCLUSIVE


def test_the_rule_needs_both_intervals_above_zero():
    assert arms_verdict((0.1, 0.2), (0.01, 0.3)) == SUPPORTED
    assert arms_verdict((0.1, 0.2), (-0.01, 0.3)) == INCONCLUSIVE
    assert arms_verdict((-0.3, -0.1), (0.01, 0.3)) == NOT_SUPPORTED
    with pytest.raises(ConfigError, match="optimizer"):
        ArmsStudyConfig(optimizer="adam")


@pytest.mark.slow
def test_an_arm_given_q_t_as_its_control_trains_the_same_curve(tiny_runs, tmp_path,
                                                             monkeypatch, capsys):
    """Every arm shares the batches, their order and the optimizer: a control equal to Q_T
    gives the onto and away curves bit for bit (gaps exactly 0), while the projection itself
    changes what is learned (onto differs from unmodified)."""
    from contextlib import contextmanager

    import tangentlab.empirical.loading.capture as CAP
    import tangentlab.empirical.measurement.learning_arms as LA

    real = LA.haar_complement_controls
    monkeypatch.setattr(LA, "haar_complement_controls",
                        lambda Q, n, seed: np.concatenate([Q[None], real(Q, n - 1, seed)]))
    real_hooks, kept = CAP.site_hooks, []

    @contextmanager
    def counting_hooks(*a, **k):  # what the site hook still holds when an arm ends
        with real_hooks(*a, **k) as store:
            yield store
            kept.append(max(map(len, store.values())))

    monkeypatch.setattr(CAP, "site_hooks", counting_hooks)
    cfg = ArmsStudyConfig(steps=6, eval_every=3, n_controls=2, eval_batches=3, fit_batches=2,
                          n_boot=100, rank=4, optimizer="sgd", lr=0.05)
    out, verdict = write_arms_study(tiny_runs["decoder"], tmp_path / "arms", cfg)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "empirical/arms" and manifest["verdict"] == verdict
    assert manifest["read_steps"] == [0, 3, 6] and len(manifest["arms"]) == 7
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    curve = {a: [r["value"] for r in rows if r["metric"] == "arms_loss" and r["variant"] == a]
             for a in manifest["arms"]}  # the numbers as written, in read order
    assert curve["onto"] == curve["onto_control_0"] and curve["away"] == curve["away_control_0"]
    assert curve["onto"] != curve["unmodified"] and curve["onto"] != curve["onto_control_1"]
    assert len({c[0] for c in curve.values()}) == 1  # every arm starts at the checkpoint
    # the hook's store is emptied every step: at most the last read's eval batches remain (it
    # kept every training output and its graph before: 7 GB after 30 minutes of a 500-step run)
    assert len(kept) >= 7 and max(kept[-7:]) <= cfg.eval_batches  # the 7 arms come last
    gaps = {r["metric"]: r for r in rows if r["metric"] in ("arms_onto_gain", "arms_away_cost")}
    assert float(gaps["arms_onto_gain"]["value"]) != 0.0  # control 1 is a real random subspace
    with pytest.raises(ConfigError, match="no checkpoint at step 7"):
        run_arms(tiny_runs["decoder"], ArmsStudyConfig(step=7))
    # the command: one line and exit 2 on bad input, nothing written
    from tangentlab.cli import main

    for run, extra, words in ((tiny_runs["decoder"], ["--set", "step=7"],
                               "no checkpoint at step 7"),
                              (tiny_runs["decoder"], ["--set", "optimizer=adam"], "optimizer"),
                              (tmp_path / "arms", [], "is not a training run")):
        assert main(["empirical", "arms", str(run), "--out", str(tmp_path / "bad"), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_the_reproduce_stage_runs_the_masked_lm_and_the_report_lists_it(tiny_runs, tmp_path):
    """``reproduce --set arms_steps=N`` builds ``arms/<arch>``; its function runs the study on
    the encoder (the masked-LM path: labels only at masked positions) with the optimizer's
    default rate, and the report lists it, and in the findings list when not supported."""
    from tangentlab.claims.rules import NOT_SUPPORTED
    from tangentlab.empirical.training.arms_study import DEFAULT_LR, run_arms_stage
    from tangentlab.pipeline.reproduce import DEFAULT, producers
    from tangentlab.report import page as P
    from tangentlab.report.load import RunData
    from tangentlab.report.render import produce
    from tangentlab.report.verdicts import build_verdicts
    from tests.report.fixtures import measure_rows, write_run

    assert not [p for p in producers(DEFAULT) if p.name.startswith("arms/")]  # off by default
    cfg = dataclasses_replace(DEFAULT, arms_steps=4, arms_optimizer="sgd")
    arms = {p.name: p for p in producers(cfg) if p.name.startswith("arms/")}
    assert set(arms) == {"arms/encoder", "arms/decoder"}
    assert arms["arms/encoder"].depends == ("train/encoder",)
    assert arms["arms/encoder"].params["study"]["steps"] == 4

    run = tmp_path / "run"
    # reproduce hands its stages device "auto" (the stage failed on it before it was resolved)
    out = run_arms_stage(run / "arms" / "encoder", tiny_runs["encoder"], device="auto", study={
        "steps": 4, "optimizer": "sgd", "lr": 0.0, "n_controls": 2, "eval_every": 2,
        "eval_batches": 3, "fit_batches": 2, "n_boot": 100, "rank": 4, "seed": 0})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["lr"] == 0.0 and manifest["read_steps"] == [0, 2, 4]
    assert manifest["learning_rate"] == DEFAULT_LR["sgd"]  # 0: the optimizer's own default
    with open(out / "results.csv", newline="") as fh:
        assert {float(r["lr"]) for r in csv.DictReader(fh)} == {DEFAULT_LR["sgd"]}
    assert manifest["device"] != "auto"
    record = {"status": "done", "config_hash": "abc", "seconds": 1.0, "cpu_seconds": 1.0,
              "outputs": ["arms/encoder"]}
    write_run(run, {"decoder": measure_rows("decoder")}, stages={"arms/encoder": record})
    data = RunData.open(run)
    page = P.build(data, build_verdicts(data))
    assert len(page.arms) == 1 and page.arms[0][0] == manifest["verdict"]
    line = page.arms[0][1]
    assert line.startswith("arms/encoder: sgd at lr 0.05, 4 steps") and "onto gain" in line
    assert (any(f.endswith(line) for f in page.findings)
            == (manifest["verdict"] == NOT_SUPPORTED))
    produce(run)
    assert line.split(":")[0] in (run / "report.md").read_text()
    assert "Learning arms over a training horizon" in (run / "report.html").read_text()

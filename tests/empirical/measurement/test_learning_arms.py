"""The learning arms (second causal test) on a planted model whose gradient's mean is known.

Verdict rule (``RULES["learning-arms"]``): two legs, X = mean D(away from a control) − D(away
from Q_T) and Y = D(onto Q_T) − mean D(onto a control); supported if both CIs lie above 0; not
supported if either upper bound is below 0.1 D(unmodified) (and that CI is not above 0).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tangentlab.errors import ConfigError


def _planted(k: float, cost_ratio: float = 1.0, grad_bias: float = 1.0):
    import torch

    from tangentlab.empirical.loading.models import LoadedModel
    from tangentlab.validate.planted import PlantedForCausalLM
    from tangentlab.validate.planted_trajectories import (
        PlantedSpec,
        planted_config,
        planted_tensors,
    )

    spec = PlantedSpec(steps=(0, 100), curve="flat", k_end=k, cost_ratio=cost_ratio,
                       grad_bias=grad_bias, seed=3)
    V = 128
    model = PlantedForCausalLM(planted_config(spec, V, 32))
    counts = np.random.default_rng(0).integers(1, 1000, V)
    for name, value in planted_tensors(spec, counts, 100).items():
        getattr(model.planted.embed, name).data.copy_(torch.as_tensor(value, dtype=torch.float32))
    model.eval()
    lm = LoadedModel(model=model, arch="decoder", family="planted", head=True,
                     tie_embeddings=False, path="")
    rng = np.random.default_rng(1)

    def batch():
        ids = torch.as_tensor(rng.integers(0, V, (3, 32)))
        return SimpleNamespace(input_ids=ids, labels=ids.clone())

    frame = model.planted.embed.frame.detach().double().numpy()
    return lm, frame[:, :spec.m], [batch() for _ in range(4)], [batch() for _ in range(4)]


def _run(k: float, grad_bias: float = 1.0, step_loss: float = 0.002):
    from tangentlab.claims import causal_rules as CR
    from tangentlab.claims import rules as R
    from tangentlab.empirical.measurement.learning_arms import (
        haar_complement_controls,
        learning_arms,
        learning_rows,
    )
    from tangentlab.empirical.measurement.measure_config import MeasureConfig
    from tangentlab.empirical.measurement.records import RowBase

    lm, Q, train, held = _planted(k, grad_bias=grad_bias)
    al = learning_arms(lm, "blocks.-1.resid_post", Q, haar_complement_controls(Q, 4, 0),
                       train_batches=train, eval_batches=held, steps=4, step_loss=step_loss,
                       seed=0)
    rows = {r["metric"]: r for r in learning_rows(al, MeasureConfig(n_boot=200), RowBase(site="s"))}
    ex, eo, eh = (rows[k] for k in ("learning_excess", "learning_excess_onto",
                                     "learning_excess_onto_haar"))
    out = CR.learning_arms_rule(R.Interval("X", ex["value"], ex["ci_low"], ex["ci_high"]),
                               rows["learning_loss_decrease_unmodified"]["value"],
                               onto=R.Interval("Y", eo["value"], eo["ci_low"], eo["ci_high"]),
                               haar=R.Interval("H", eh["value"], eh["ci_low"], eh["ci_high"]))
    return al, rows, out


def test_the_projection_hook_moves_only_what_it_keeps():
    """Q = the whole space: "onto" is the unmodified arm and "away" learns nothing upstream
    (the planted head has no parameters of its own), so its held-out loss stays put."""
    from tangentlab.empirical.measurement.learning_arms import learning_arms

    lm, _, train, held = _planted(3.0)
    d = lm.model.config.hidden_size
    full = np.eye(d)
    al = learning_arms(lm, "blocks.-1.resid_post", full, full[None], train_batches=train,
                       eval_batches=held[:1], steps=2, step_loss=0.002, seed=0)
    L = al.loss_sums
    assert L.shape[1] == 6 and al.n_controls == 1  # before, U, onto, away, away_c, onto_c
    assert np.allclose(L[:, 2], L[:, 1], rtol=1e-6)  # onto (everything) == unmodified
    assert np.allclose(L[:, 3], L[:, 0], rtol=1e-7)  # away from everything == before
    assert np.allclose(L[:, 4], L[:, 0], rtol=1e-7)  # away from a control (everything) == before
    assert np.allclose(L[:, 5], L[:, 1], rtol=1e-6)  # onto a control (everything) == unmodified
    assert (L[:, 1] < L[:, 0]).all()  # the unmodified arm learns
    assert al.lr > 0 and al.n_params > 0
    # the checkpoint itself is untouched
    again = learning_arms(lm, "blocks.-1.resid_post", full, full[None], train_batches=train,
                          eval_batches=held[:1], steps=2, step_loss=0.002, seed=0)
    assert np.array_equal(again.loss_sums, L)


def test_an_enriched_gradient_mean_is_found_and_a_null_is_not():
    """k = 4 in S at b = 1: away-from-Q_T keeps 8/11 of the mean gradient's energy, a control
    about 10/11; under k = 1 both keep 7/8."""
    from tangentlab.claims import rules as R

    _, rows, out = _run(4.0)
    assert out.status == R.SUPPORTED, out.reason
    assert rows["learning_loss_decrease_onto"]["value"] > 0
    # both legs see the planted mean: inside S learns more than inside a control
    assert rows["learning_excess_onto"]["ci_low"] > 0
    assert (rows["learning_loss_decrease_onto"]["value"]
            > rows["learning_loss_decrease_onto_control_mean"]["value"] > 0)
    _, rows0, out0 = _run(1.0)
    assert out0.status != R.SUPPORTED, out0.reason


def _arm_rows(k: float, site: str, *, controls: int, steps: int, step_loss: float, seed: int = 0):
    """(the arms' losses, their rows by metric, (d, r)) on the planted model of factor ``k``."""
    from tangentlab.empirical.measurement.learning_arms import (
        haar_complement_controls,
        learning_arms,
        learning_rows,
    )
    from tangentlab.empirical.measurement.measure_config import MeasureConfig
    from tangentlab.empirical.measurement.records import RowBase

    lm, Q, train, held = _planted(k)
    al = learning_arms(lm, site, Q, haar_complement_controls(Q, controls, seed),
                       train_batches=train, eval_batches=held, steps=steps, step_loss=step_loss,
                       seed=0)
    rows = {x["metric"]: x for x in learning_rows(al, MeasureConfig(n_boot=200), RowBase(site="s"))}
    return al, rows, Q.shape


def test_the_haar_leg_is_the_first_order_mean_over_every_control():
    """The Haar leg H = (D(U) - D(away)) - r/(d - r) (D(U) - D(onto)) is D(onto) minus the mean
    of D(onto C) over Haar rank-r subspaces C of Q_T's complement, to first order in the step
    (c0 = D(onto) + D(away) - D(U), what the parameters after the site learn, cancels): with
    many drawn controls their mean comes close to it, and the leg stands with the onto leg
    (k = 4: both above 0; k = 1: neither); with r and d unknown the row is left out."""
    import dataclasses

    from tangentlab.empirical.measurement.learning_arms import learning_rows
    from tangentlab.empirical.measurement.measure_config import MeasureConfig
    from tangentlab.empirical.measurement.records import RowBase

    al, rows, (d, r) = _arm_rows(4.0, "blocks.-1.resid_post", controls=24, steps=2,
                                 step_loss=0.0005, seed=5)
    assert (al.rank, al.dim) == (r, d)
    u, o, a = (rows[f"learning_loss_decrease_{k}"]["value"] for k in ("unmodified", "onto", "away"))
    haar_mean = (o + a - u) + r / (d - r) * (u - o)
    drawn = rows["learning_loss_decrease_onto_control_mean"]["value"]
    assert abs(drawn - haar_mean) < 0.25 * haar_mean, (drawn, haar_mean)  # 24 draws: near it
    h = rows["learning_excess_onto_haar"]
    assert h["value"] == pytest.approx(o - haar_mean, rel=1e-6) and h["ci_low"] > 0
    assert rows["learning_excess_onto"]["ci_low"] > 0
    old = learning_rows(dataclasses.replace(al, rank=0, dim=0), MeasureConfig(n_boot=200),
                        RowBase(site="s"))
    assert "learning_excess_onto_haar" not in {x["metric"] for x in old}
    uneven = al.counts.copy()
    uneven[0, 3] += 1  # arms read on other targets: their loss sums may not be combined
    odd = learning_rows(dataclasses.replace(al, counts=uneven), MeasureConfig(n_boot=200),
                        RowBase(site="s"))
    assert "learning_excess_onto_haar" not in {x["metric"] for x in odd}
    # the other rows are the same numbers with or without the Haar column
    assert {x["metric"]: x["value"] for x in old} == {
        k: v["value"] for k, v in rows.items() if k != "learning_excess_onto_haar"}
    assert {x["metric"]: x.get("ci_low") for x in old} == {
        k: v.get("ci_low") for k, v in rows.items() if k != "learning_excess_onto_haar"}
    _, rows0, _ = _run(1.0)
    assert rows0["learning_excess_onto_haar"]["ci_low"] <= 0 < rows0["learning_excess_onto_haar"]["ci_high"]


def test_the_haar_leg_leaves_out_what_the_parameters_after_the_site_learn():
    """At ``blocks.0.resid_pre`` every trainable parameter of the planted model lies after the
    site, so no projection there changes what training learns: every arm learns the same c0,
    the drawn legs read 0 and so must the Haar leg. A leg that left c0 in (D(onto) -
    r/(d - r)(D(U) - D(onto)), its first version) read 2.0e-4 here with its interval above 0."""
    _, rows, (d, r) = _arm_rows(1.0, "blocks.0.resid_pre", controls=4, steps=4, step_loss=0.002)
    u, o = (rows[f"learning_loss_decrease_{k}"]["value"] for k in ("unmodified", "onto"))
    assert u > 0 and o == pytest.approx(u, rel=1e-6)  # the projection changes nothing here
    h = rows["learning_excess_onto_haar"]
    assert abs(h["value"]) < 1e-3 * u and h["ci_low"] <= 0 <= h["ci_high"]
    assert o - r / (d - r) * (u - o) > 0.5 * u  # the first version: c0, read as an effect


def test_the_onto_anything_null_is_not_supported_where_reading_the_onto_arm_alone_is():
    """The end-to-end ``onto-anything`` null (no preferred direction, a 4x shared offset learned
    at a 10x step): training inside a random rank-r subspace learns, so a rule that read "onto
    Q_T learns" (its decrease's CI above 0) would say "supported"; both legs of the real rule sit
    below the equivalence bound, so it says "not supported"."""
    from tangentlab.claims import rules as R
    from tangentlab.validate.planted_scenarios import SCENARIOS

    sc = SCENARIOS["onto-anything"]
    assert sc.truth["learning-arms"] == "negative"
    _, rows, out = _run(1.0, grad_bias=sc.spec["grad_bias"],
                        step_loss=sc.measure["learning_step_loss"])
    onto, onto_c = rows["learning_loss_decrease_onto"], rows["learning_loss_decrease_onto_control_mean"]
    assert onto["ci_low"] > 0 and onto_c["ci_low"] > 0  # inside Q_T and inside a control: learns
    assert out.status == R.NOT_SUPPORTED, out.reason


def test_bad_settings_are_refused():
    from tangentlab.empirical.measurement.learning_arms import learning_arms
    from tangentlab.empirical.measurement.measure_config import MeasureConfig

    with pytest.raises(ConfigError):
        learning_arms(None, "s", np.eye(4)[:, :1], np.zeros((1, 4, 1)), train_batches=[1],
                      eval_batches=[1], steps=0, step_loss=0.002, seed=0)
    with pytest.raises(ConfigError, match="learning_steps"):
        MeasureConfig(learning_steps=100)


def test_a_loaded_planted_checkpoint_trains_only_its_blocks(tmp_path):
    """from_pretrained hands the planted tensors back as trainable parameters: they enter the
    forward pass detached, so the arms train the blocks and leave the planted truth alone."""
    import dataclasses

    import torch

    from tangentlab.empirical.measurement.learning_arms import learning_arms
    from tangentlab.validate.planted import PlantedForCausalLM

    lm, Q, train, held = _planted(3.0)
    lm.model.save_pretrained(str(tmp_path / "ck"))
    loaded = PlantedForCausalLM.from_pretrained(str(tmp_path / "ck")).eval()
    before = {k: v.clone() for k, v in loaded.planted.embed.state_dict().items()}
    al = learning_arms(dataclasses.replace(lm, model=loaded), "blocks.-1.resid_post", Q,
                       np.zeros((1,) + Q.shape) + np.eye(Q.shape[0])[:, -Q.shape[1]:],
                       train_batches=train[:1], eval_batches=held[:1], steps=1,
                       step_loss=0.002, seed=0)
    assert np.isfinite(al.loss_sums).all()
    for k, v in loaded.planted.embed.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_measure_writes_the_learning_rows_at_the_last_checkpoint(measured, arch):
    from tangentlab.runs import read_results

    df = read_results(measured[arch] / "results.csv")
    ex = df[df["metric"] == "learning_excess"]
    assert len(ex) == ex["site"].nunique() >= 1  # one per site, at one checkpoint
    assert set(ex["step"]) == {df["step"].max()}
    assert np.isfinite(ex["ci_low"]).all() and (ex["ci_low"] <= ex["ci_high"]).all()
    dec = df[df["metric"] == "learning_loss_decrease_unmodified"]
    assert np.isfinite(dec["value"]).all() and (ex["n_controls"] == 2).all()

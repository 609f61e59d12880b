"""The energy of the optimizer's update: AdamW's step read back exactly, carried to the site as the
directional derivative of its activations, tested with the gradient test's own core."""

from __future__ import annotations

import math

import pytest


def _adamw_run(tmp_path, *, weight_decay=0.0, steps=3):
    """A tiny MLP trained ``steps`` AdamW steps; its state saved as the trainer saves it.

    Returns (model, parameters before the last step, parameters after it, lr, weight decay).
    """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    lr = 0.01
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                            weight_decay=weight_decay)
    before = None
    for _ in range(steps):
        x = torch.randn(16, 5)
        loss = (model(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
    torch.save({"optimizers": [opt.state_dict()], "torch_rng": torch.get_rng_state()},
               tmp_path / "optimizer.pt")
    return model, before, [p.detach().clone() for p in model.parameters()], lr, weight_decay


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_the_adam_direction_is_the_step_adamw_took(tmp_path, weight_decay):
    """θ_t − θ_{t−1} = lr · Δθ_adam − lr · wd · θ_{t−1} (decoupled decay), to float32 rounding;
    the momentum direction is −m̂, the same without the preconditioner."""
    import torch

    from tangentlab.empirical.measurement.update_energy import optimizer_directions

    model, before, after, lr, wd = _adamw_run(tmp_path, weight_decay=weight_decay)
    dirs, why = optimizer_directions(tmp_path, model)
    assert why == "" and set(dirs) == {"optimizer", "momentum"}
    for b, a, d in zip(before, after, dirs["optimizer"], strict=True):
        step = (a.double() - b.double()) + lr * wd * b.double()
        torch.testing.assert_close(step, lr * d, rtol=1e-4, atol=1e-7)
    state = torch.load(tmp_path / "optimizer.pt", weights_only=True)["optimizers"][0]["state"]
    m_hat = state[0]["exp_avg"].double() / (1 - 0.9 ** 3)
    torch.testing.assert_close(dirs["momentum"][0], -m_hat)
    # the preconditioner is not the identity: the two directions differ
    assert not torch.allclose(dirs["optimizer"][0], dirs["momentum"][0])


def test_muon_s_step_is_its_orthogonalised_momentum_as_the_trainer_splits_it(tmp_path):
    """Muon (without Nesterov's look-ahead, whose last gradient is not stored) on the hidden
    matrices, AdamW on the rest, as the trainer builds them: θ_t − θ_{t−1} = lr · Δθ exactly
    for both groups (no weight decay), and the momentum direction is −B on the Muon matrices."""
    import torch

    from tangentlab.empirical.loading.models import build_model
    from tangentlab.empirical.measurement.update_energy import (
        optimizer_directions,
        optimizer_groups,
    )

    model = build_model("decoder", vocab_size=40, d_model=16, n_layers=1, n_heads=2, seq_len=8)
    hidden, rest = optimizer_groups(model, "muon")
    assert hidden and rest and len(hidden) + len(rest) == len(list(model.parameters()))
    assert model.get_output_embeddings().weight in rest  # embeddings stay with AdamW
    lr = 0.01
    opts = [torch.optim.Muon(hidden, lr=lr, weight_decay=0.0, nesterov=False,
                             adjust_lr_fn="match_rms_adamw"),
            torch.optim.AdamW(rest, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)]
    ids = torch.randint(0, 40, (4, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        for o in opts:
            o.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        before = [p.detach().clone() for p in model.parameters()]
        for o in opts:
            o.step()
    torch.save({"optimizers": [o.state_dict() for o in opts]}, tmp_path / "optimizer.pt")
    dirs, why = optimizer_directions(tmp_path, model)
    assert why == ""
    for b, p, d in zip(before, model.parameters(), dirs["optimizer"], strict=True):
        torch.testing.assert_close(p.detach().double() - b.double(), lr * d, rtol=1e-4,
                                   atol=1e-7)
    i = next(k for k, p in enumerate(model.parameters()) if p is hidden[0])
    buf = opts[0].state[hidden[0]]["momentum_buffer"]
    torch.testing.assert_close(dirs["momentum"][i], -buf.double())


def test_a_checkpoint_without_one_adamw_s_state_reads_nothing_and_says_why(tmp_path):
    import torch

    from tangentlab.empirical.measurement.update_energy import optimizer_directions

    model = torch.nn.Linear(3, 2)
    assert optimizer_directions(tmp_path, model) == (None, "no optimizer state at this checkpoint")
    torch.save({"optimizers": [torch.optim.AdamW(model.parameters()).state_dict()]},
               tmp_path / "optimizer.pt")  # a step-0 checkpoint that kept its (empty) state
    assert optimizer_directions(tmp_path, model) == (
        None, "the optimizer has taken no step at this checkpoint")
    _adamw_run(tmp_path)  # an MLP's state (4 parameters) against a 2-parameter model
    dirs, why = optimizer_directions(tmp_path, model)
    assert dirs is None and "holds 4 parameters, the model 2" in why


def test_the_activation_change_is_the_directional_derivative_at_each_site():
    """The central difference equals torch.func's forward-mode derivative J Δθ of each site's
    activations on a real (tiny) GPT-2, in float64; a zero direction gives zeros."""
    import torch
    from torch.func import functional_call, jvp

    from tangentlab.empirical.loading.capture import site_hooks
    from tangentlab.empirical.loading.models import build_model
    from tangentlab.empirical.measurement.update_energy import activation_change

    model = build_model("decoder", vocab_size=50, d_model=16, n_layers=2, n_heads=2, seq_len=12,
                        seed=0).double().eval()
    model.config._attn_implementation = "eager"
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    am = torch.ones_like(ids)
    g = torch.Generator().manual_seed(2)
    names = [n for n, _ in model.named_parameters()]
    direction = [torch.randn(p.shape, generator=g, dtype=torch.float64)
                 for p in model.parameters()]
    sites = ["blocks.0.resid_post", "blocks.1.resid_post"]
    got = activation_change(model, sites, ids, am, direction)

    params = {n: p.detach() for n, p in model.named_parameters()}

    def site_acts(ps):
        with site_hooks(model, sites, make_leaf=False) as store:
            functional_call(model, ps, args=(), kwargs={"input_ids": ids, "attention_mask": am})
        return tuple(store[s][0] for s in sites)

    _, tangents = jvp(site_acts, (params,), ({n: d for n, d in zip(names, direction)},))
    for s, t in zip(sites, tangents, strict=True):
        scale = float(t.abs().max())
        assert scale > 0
        torch.testing.assert_close(got[s], t, rtol=1e-5, atol=1e-6 * scale)
    zero = activation_change(model, sites, ids, am, [torch.zeros_like(d) for d in direction])
    assert all(float(z.abs().max()) == 0.0 for z in zero.values())
    # the parameters are put back
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), params[n])


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_measure_writes_update_rows_where_the_checkpoint_kept_its_optimizer_state(measured, arch):
    """Our training keeps ``optimizer.pt`` at its newest checkpoint only: the update rows are
    there, for both directions and every site, finite, with intervals; nowhere else."""
    from tangentlab.report.tables import ResultTable
    from tangentlab.runs import RESULTS_NAME

    t = ResultTable.read(measured[arch] / RESULTS_NAME)
    v = t.variant(proxy="fixed")
    last = max(t.steps("enrichment"))
    for kind in ("optimizer", "momentum"):
        metric = f"{kind}_update_enrichment"
        assert v.steps(metric) == [last]
        sites = v.sites(metric)
        assert sites and sites == sorted(t.sites("enrichment"))
        for site in sites:
            e = v.get(metric, site=site, step=last)
            assert math.isfinite(e.value) and e.value > 0 and e.ci_low <= e.value <= e.ci_high
            assert math.isfinite(v.get(f"{kind}_update_p_value", site=site, step=last).value)


def test_a_run_that_kept_every_optimizer_state_has_update_rows_at_every_trained_checkpoint(
        tmp_path):
    """``keep_optimizer_states``: update rows at every checkpoint after step 0; step 0's state is
    empty (no step taken), and its rows say so instead of failing the measurement."""
    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.empirical.training.train import train_model
    from tangentlab.report.tables import ResultTable
    from tangentlab.runs import RESULTS_NAME, read_results
    from tests.empirical.conftest import TEST_MEASURE

    run = train_model("decoder", tmp_path / "run", preset="tiny", device="cpu", overrides={
        "steps": 12, "n_checkpoints": 3, "max_docs": 6, "measure_every": 0,
        "keep_optimizer_states": True})
    out = measure_trajectory(run, tmp_path / "m", device="cpu", seed=0,
                             overrides={**TEST_MEASURE, "causal": False, "learning_arms": False})
    t = ResultTable.read(out / RESULTS_NAME).variant(proxy="fixed")
    steps = sorted(t.steps("enrichment"))
    assert t.steps("optimizer_update_enrichment") == steps[1:] and steps[0] == 0
    df = read_results(out / RESULTS_NAME)
    notes = df[df.metric == "update_note"]
    assert set(notes.step) == {0} and notes.note.str.contains("taken no step").all()

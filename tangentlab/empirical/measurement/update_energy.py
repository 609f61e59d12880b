"""Energy in the optimizer's update (issue 36, item 2), beside the gradient's.

How much of the change an AdamW step makes to a site's activations lies in Q_T, against the
controls the gradient's energy test uses.
The gradient rows the protocol tests are g_t = ∂L/∂h_t, read by the backward pass. The paper's
models were trained by Adam (or Muon), whose step is not the gradient: a study of low-rank
training (arXiv 2604.25143) finds that reading the optimizer's updates instead of raw gradients
changes such measurements 10–100×. A checkpoint that kept its optimizer state (``optimizer.pt``:
our training keeps it at the newest checkpoint, and at every one with
``TrainConfig.keep_optimizer_states``) holds AdamW's moments m, v and step count t, from which
two parameter-space directions are read (:func:`adam_directions`):

- ``adam``: the step AdamW took to reach the checkpoint, without its learning rate (which scales
  every row alike) and without the decoupled weight decay (not the loss's):
  Δθ = −m̂ / (√v̂ + ε), m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ), exactly torch's update;
- ``momentum``: the same averaged gradient without the preconditioner, Δθ = −m̂, so the two
  differ only by Adam's per-parameter scaling.

Each is carried to the site (:func:`activation_change`): per token, the change the step makes
there, δh_t = J_t Δθ, as a central difference (h_t(θ + εΔθ) − h_t(θ − εΔθ)) / 2ε in float64 with
ε = :data:`REL_STEP` ‖θ‖ / ‖Δθ‖, on the test half's rows (those of the gradient test). The rows
δh_t go through the gradient test's own core, :func:`~tangentlab.measure.batch_energies` with the
fixed proxy's complement and full-space pools and :func:`~tangentlab.measure.batch_control_test`
(same controls, replicates and interval), so ``adam_update_enrichment`` and
``momentum_update_enrichment`` sit beside ``enrichment`` in the same table (:func:`update_rows`).

What they are: vectors, the change one step writes into the site, where the gradient rows are
covectors; the two enrichments answer different questions, and no prediction row reads the
update rows (the account's claim is about the gradients that training receives; docs/report.md).
Muon's orthogonalised step (two optimizers in ``optimizer.pt``) is not read: the rows say so.

Shapes: directions aligned with ``model.parameters()``; δh (B, T, d) per site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["OPTIMIZER_FILE", "REL_STEP", "UPDATES", "adam_directions", "activation_change",
           "update_rows"]

#: Where a checkpoint keeps its optimizer state (written by the trainer's ``save_checkpoint``).
OPTIMIZER_FILE = "optimizer.pt"
#: The central difference's step relative to the parameters: ε = REL_STEP ‖θ‖ / ‖Δθ‖.
REL_STEP = 1e-4
#: The directions read, in row order.
UPDATES = ("adam", "momentum")


def adam_directions(checkpoint: str | Path, model) -> tuple[dict[str, list] | None, str]:
    """``({"adam": [...], "momentum": [...]}, "")`` aligned with ``model.parameters()``, or ``(None, why)``.

    Read from ``checkpoint/optimizer.pt`` (one AdamW's ``state_dict``); a parameter without
    state (never stepped) gets a zero direction. None, with the reason, where the file is
    absent, holds another number of optimizers (Muon with AdamW) or parameters of other shapes,
    or no step was taken yet (step 0).
    """
    import torch

    f = Path(checkpoint) / OPTIMIZER_FILE
    if not f.is_file():
        return None, "no optimizer state at this checkpoint"
    opts = torch.load(f, weights_only=True, map_location="cpu").get("optimizers") or []
    if len(opts) != 1:
        return None, (f"{len(opts)} optimizers in {OPTIMIZER_FILE} (Muon beside AdamW?): only a "
                      "single AdamW's step is read")
    groups, state = opts[0]["param_groups"], opts[0]["state"]
    ids = [i for g in groups for i in g["params"]]
    params = list(model.parameters())
    if len(ids) != len(params):
        return None, f"the optimizer state holds {len(ids)} parameters, the model {len(params)}"
    if not any("exp_avg_sq" in state.get(i, {}) for i in ids):
        return None, "the optimizer has taken no step at this checkpoint"
    b1, b2 = groups[0]["betas"]
    eps = float(groups[0]["eps"])
    out: dict[str, list] = {"adam": [], "momentum": []}
    for i, p in zip(ids, params, strict=True):
        st = state.get(i, {})
        if "exp_avg_sq" not in st:
            out["adam"].append(torch.zeros_like(p, dtype=torch.float64))
            out["momentum"].append(torch.zeros_like(p, dtype=torch.float64))
            continue
        if tuple(st["exp_avg"].shape) != tuple(p.shape):
            return None, (f"parameter {i} has shape {tuple(p.shape)} in the model and "
                          f"{tuple(st['exp_avg'].shape)} in the optimizer state")
        t = float(st["step"])
        m_hat = st["exp_avg"].double() / (1.0 - b1 ** t)
        v_hat = st["exp_avg_sq"].double() / (1.0 - b2 ** t)
        out["adam"].append(-m_hat / (v_hat.sqrt() + eps))
        out["momentum"].append(-m_hat)
    return out, ""


def activation_change(model, sites: Sequence[str], input_ids, attention_mask, direction,
                      *, rel_step: float = REL_STEP) -> dict[str, Any]:
    """Per site, δh = (h(θ + εΔ) − h(θ − εΔ)) / 2ε, shape (B, T, d), float64.

    ``model``: a float64 copy (its parameters are moved and put back); ``direction``: one tensor
    per ``model.parameters()``; ε = ``rel_step`` ‖θ‖ / ‖Δ‖. A zero direction gives zeros.
    """
    import torch

    from tangentlab.empirical.loading.capture import site_hooks

    params = list(model.parameters())
    dnorm = float(torch.sqrt(sum((d.double() ** 2).sum() for d in direction)))
    if dnorm == 0.0:
        with site_hooks(model, sites, make_leaf=False) as store, torch.no_grad():
            model(input_ids=input_ids, attention_mask=attention_mask)
        return {s: torch.zeros_like(store[s][0], dtype=torch.float64) for s in sites}
    theta = float(torch.sqrt(sum((p.detach().double() ** 2).sum() for p in params)))
    eps = rel_step * theta / dnorm
    orig = [p.detach().clone() for p in params]
    outs = []
    try:
        for sign in (1.0, -1.0):
            with torch.no_grad():
                for p, o, d in zip(params, orig, direction, strict=True):
                    p.copy_(o + sign * eps * d.to(p))
                with site_hooks(model, sites, make_leaf=False) as store:
                    model(input_ids=input_ids, attention_mask=attention_mask)
            outs.append({s: store[s][0].detach().double() for s in sites})
    finally:
        with torch.no_grad():
            for p, o in zip(params, orig, strict=True):
                p.copy_(o)
    return {s: (outs[0][s] - outs[1][s]) / (2.0 * eps) for s in sites}


def update_rows(lm, checkpoint: str | Path, batches: Sequence, plans: Sequence,
                tested: Mapping[str, Any], cfg, bases: Mapping[str, Any]) -> list[dict]:
    """The update-energy rows of one checkpoint, every site (module docstring).

    ``batches``/``plans``: the eval batches and their row plans (the test half is read);
    ``tested``: {site: (plain, constrained)} as the energy test has them (the fixed proxy's
    ``(Q, pool, full)``); ``bases``: {site: RowBase}. One ``update_note`` row per site where the
    checkpoint has no AdamW state to read.
    """
    import copy

    import torch

    from tangentlab.measure import batch_control_test, batch_energies

    sites = list(tested)
    model = copy.deepcopy(lm.model).double().eval()
    dirs, why = adam_directions(checkpoint, model)
    if dirs is None:
        return [bases[s].with_(proxy="fixed").row("update_note", None, note=why) for s in sites]
    streams: dict[tuple[str, str], list] = {(k, s): [] for k in UPDATES for s in sites}
    for batch, plan in zip(batches, plans, strict=True):
        if batch.half != "test":
            continue
        am = getattr(batch, "attention_mask", None)
        am = torch.ones_like(batch.input_ids) if am is None else am
        for kind in UPDATES:
            dh = activation_change(model, sites, batch.input_ids, am, dirs[kind])
            for s in sites:
                streams[(kind, s)].append(dh[s][plan.rows.to(dh[s].device)])
    rows = []
    for s in sites:
        Q, pool, full = tested[s][0]["fixed"]
        base = bases[s].with_(proxy="fixed")
        for kind in UPDATES:
            be = batch_energies(Q, pool, streams[(kind, s)], full_controls=full)
            if not be.trace.sum() > 0:  # the step does not reach this site (a frozen path)
                rows.append(base.row("update_note", None, note=f"the {kind} step leaves {s} "
                                                                "unchanged on every row"))
                continue
            res = batch_control_test(be, n_controls=cfg.n_controls, n_boot=cfg.n_boot,
                                     confidence=cfg.confidence, seed=cfg.seed,
                                     interval=cfg.interval)
            kw = {"bucket": "all", "n": int(sum(int(x.shape[0]) for x in streams[(kind, s)])),
                  "interval": res.interval, "n_batches": res.n_batches}
            rows += [
                base.row(f"{kind}_update_enrichment", res.enrichment,
                         ci_low=res.enrichment_ci_low, ci_high=res.enrichment_ci_high, **kw),
                base.row(f"{kind}_update_energy_tangent", res.energy, ci_low=res.energy_ci_low,
                         ci_high=res.energy_ci_high, **kw),
                base.row(f"{kind}_update_energy_control_mean", res.control_mean,
                         band_low=res.control_band_low, band_high=res.control_band_high, **kw),
                base.row(f"{kind}_update_p_value", res.p_value, **kw),
            ]
    return rows

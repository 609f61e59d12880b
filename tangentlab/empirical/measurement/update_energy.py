"""Energy in the optimizer's update (issue 36, item 2), beside the gradient's.

How much of the change an optimizer's step makes to a site's activations lies in Q_T, against
the controls the gradient's energy test uses.

The gradient rows the protocol tests are g_t = ∂L/∂h_t, read by the backward pass. The paper's
models were trained by Adam (or Muon), whose step is not the gradient: a study of low-rank
training (arXiv 2604.25143) finds that reading the optimizer's updates instead of raw gradients
changes such measurements 10–100×. A checkpoint that kept its optimizer state (``optimizer.pt``:
our training keeps it at the newest checkpoint, and at every one with
``TrainConfig.keep_optimizer_states``) holds each optimizer's state, from which two
parameter-space directions are read (:func:`optimizer_directions`), without the learning rate
(which scales every row alike) and without the decoupled weight decay (not the loss's):

- ``optimizer``: the optimizer's own step. AdamW: the step it took to reach the checkpoint,
  Δθ = −m̂ / (√v̂ + ε), m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ), exactly torch's update. Muon (on the
  2-D hidden matrices, AdamW on the rest, :func:`optimizer_groups`): Δθ = −a · NS(B), the
  Newton–Schulz orthogonalisation of its momentum buffer B (torch's own) times its learning-rate
  adjustment a; with Nesterov (the default) the step Muon took also mixed in the last gradient,
  which is not stored, so this is its step without the look-ahead;
- ``momentum``: the same averaged gradient without the preconditioner or the orthogonalisation,
  Δθ = −m̂ (AdamW) or −B (Muon), so the two differ only by what the optimizer does to it.

Each is carried to the site (:func:`activation_change`): per token, the change the step makes
there, δh_t = J_t Δθ, as a central difference (h_t(θ + εΔθ) − h_t(θ − εΔθ)) / 2ε in float64 with
ε = :data:`REL_STEP` ‖θ‖ / ‖Δθ‖, on the test half's rows (those of the gradient test). The rows
δh_t go through the gradient test's own core, :func:`~tangentlab.measure.batch_energies` with the
fixed proxy's complement and full-space pools and :func:`~tangentlab.measure.batch_control_test`
(same controls, replicates and interval), so ``optimizer_update_enrichment`` and
``momentum_update_enrichment`` sit beside ``enrichment`` in the same table (:func:`update_rows`).

What they are: vectors, the change one step writes into the site, where the gradient rows are
covectors; the two enrichments answer different questions, and no prediction row reads the
update rows (the account's claim is about the gradients that training receives;
docs/empirical.md).

Shapes: directions aligned with ``model.parameters()``; δh (B, T, d) per site.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["OPTIMIZER_FILE", "REL_STEP", "UPDATES", "optimizer_groups", "optimizer_directions",
           "activation_change", "update_rows"]

#: Where a checkpoint keeps its optimizer state (written by the trainer's ``save_checkpoint``).
OPTIMIZER_FILE = "optimizer.pt"
#: The central difference's step relative to the parameters: ε = REL_STEP ‖θ‖ / ‖Δθ‖.
REL_STEP = 1e-4
#: The directions read, in row order.
UPDATES = ("optimizer", "momentum")


def optimizer_groups(model, optimizer: str) -> list[list]:
    """The parameters each optimizer of the trainer holds, in the trainer's order.

    ``adamw``: one AdamW on ``model.parameters()``. ``muon``: Muon on the 2-D hidden matrices,
    then AdamW on the embeddings, the output embedding, biases and norms. The trainer builds its
    optimizers from these (:func:`tangentlab.empirical.training.train_step.build_optimizers`), so
    a checkpoint's ``optimizer.pt`` is read back with the same split.
    """
    import torch

    params = list(model.parameters())
    if optimizer == "adamw":
        return [params]
    emb = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    out_emb = model.get_output_embeddings()
    if out_emb is not None:
        emb.add(id(out_emb.weight))
    hidden = [p for p in params if p.ndim == 2 and id(p) not in emb]
    return [hidden, [p for p in params if not (p.ndim == 2 and id(p) not in emb)]]


def _adamw(sd, params, out) -> str:
    """Append AdamW's step and momentum for ``params`` (its state dict ``sd``); "" or why not."""
    import torch

    groups, state = sd["param_groups"], sd["state"]
    ids = [i for g in groups for i in g["params"]]
    if len(ids) != len(params):
        return f"the optimizer state holds {len(ids)} parameters, the model {len(params)}"
    b1, b2 = groups[0]["betas"]
    eps = float(groups[0]["eps"])
    for i, p in zip(ids, params, strict=True):
        st = state.get(i, {})
        if "exp_avg_sq" not in st:  # never stepped
            out["optimizer"][id(p)] = out["momentum"][id(p)] = torch.zeros_like(
                p, dtype=torch.float64)
            continue
        if tuple(st["exp_avg"].shape) != tuple(p.shape):
            return (f"parameter {i} has shape {tuple(p.shape)} in the model and "
                    f"{tuple(st['exp_avg'].shape)} in the optimizer state")
        t = float(st["step"])
        m_hat = st["exp_avg"].double() / (1.0 - b1 ** t)
        v_hat = st["exp_avg_sq"].double() / (1.0 - b2 ** t)
        out["optimizer"][id(p)] = -m_hat / (v_hat.sqrt() + eps)
        out["momentum"][id(p)] = -m_hat
    return ""


def _muon(sd, params, out) -> str:
    """Append Muon's orthogonalised step and its momentum for ``params``; "" or why not."""
    from torch.optim._muon import _adjust_lr, _zeropower_via_newtonschulz  # Muon's own

    groups, state = sd["param_groups"], sd["state"]
    ids = [i for g in groups for i in g["params"]]
    if len(ids) != len(params):
        return f"the Muon state holds {len(ids)} parameters, the model's hidden matrices {len(params)}"
    g = groups[0]
    for i, p in zip(ids, params, strict=True):
        buf = state.get(i, {}).get("momentum_buffer")
        if buf is None or tuple(buf.shape) != tuple(p.shape):
            return f"Muon parameter {i} has no momentum buffer of shape {tuple(p.shape)}"
        ortho = _zeropower_via_newtonschulz(buf, tuple(g["ns_coefficients"]), int(g["ns_steps"]),
                                            float(g["eps"]))
        scale = _adjust_lr(1.0, g.get("adjust_lr_fn"), p.shape)
        out["optimizer"][id(p)] = -scale * ortho.double()
        out["momentum"][id(p)] = -buf.double()
    return ""


def optimizer_directions(checkpoint: str | Path, model) -> tuple[dict[str, list] | None, str]:
    """``({"optimizer": [...], "momentum": [...]}, "")`` aligned with ``model.parameters()``, or ``(None, why)``.

    Read from ``checkpoint/optimizer.pt``: one AdamW, or Muon then AdamW (:func:`optimizer_groups`);
    a parameter without state (never stepped) gets a zero direction. None, with the reason,
    where the file is absent, the optimizer has taken no step (step 0), or the state does not
    match the model.
    """
    import torch

    f = Path(checkpoint) / OPTIMIZER_FILE
    if not f.is_file():
        return None, "no optimizer state at this checkpoint"
    opts = torch.load(f, weights_only=True, map_location="cpu").get("optimizers") or []
    if not opts or not any(opts[-1]["state"].values()):
        return None, "the optimizer has taken no step at this checkpoint"
    if len(opts) > 2:
        return None, f"{len(opts)} optimizers in {OPTIMIZER_FILE}: one AdamW, or Muon and AdamW"
    out: dict[str, dict] = {"optimizer": {}, "momentum": {}}
    groups = optimizer_groups(model, "adamw" if len(opts) == 1 else "muon")
    readers = [_adamw] if len(opts) == 1 else [_muon, _adamw]
    for read, sd, params in zip(readers, opts, groups, strict=True):
        why = read(sd, params, out)
        if why:
            return None, why
    params = list(model.parameters())
    return {k: [v[id(p)] for p in params] for k, v in out.items()}, ""


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
    checkpoint has no optimizer state to read (:func:`optimizer_directions` says why), or where
    a step leaves the site unchanged.
    """
    import copy

    import torch

    from tangentlab.measure import batch_control_test, batch_energies

    sites = list(tested)
    dirs, why = optimizer_directions(checkpoint, lm.model)  # before any copy of the weights
    if dirs is None:
        return [bases[s].with_(proxy="fixed").row("update_note", None, note=why) for s in sites]
    model = copy.deepcopy(lm.model).double().eval()  # the same parameters, in the same order
    dev = next(model.parameters()).device
    streams: dict[tuple[str, str], list] = {(k, s): [] for k in UPDATES for s in sites}
    for batch, plan in zip(batches, plans, strict=True):
        if batch.half != "test":
            continue
        ids = batch.input_ids.to(dev)
        am = getattr(batch, "attention_mask", None)
        am = torch.ones_like(ids) if am is None else am.to(dev)
        for kind in UPDATES:
            dh = activation_change(model, sites, ids, am, dirs[kind])
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

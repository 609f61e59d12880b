"""A planted-truth simulator of the causal check, driven through the pipeline's own functions.

Activations are Gaussian rows with a chosen spectrum; Q_T is their top-r PCA subspace fitted on a
separate fit sample (the proxy); the edited positions' moments (:func:`ablated_moments`), the
variants (:func:`build_variants`), the rows (:func:`causal_rows`) and the rule
(:func:`ablation_excess_rule`) are the pipeline's. Only the model's forward pass is replaced: the
loss of each edit on each batch is a known function of the variance it removes from that batch's
rows (``f``), plus, for a planted direction-dependent effect, ``beta`` times the variance it removes
inside span(Q_T), plus independent noise.
"""

from __future__ import annotations

import numpy as np


def spectrum(kind: str, d: int) -> np.ndarray:
    """Eigenvalues: ``flat`` (1 + small ramp), ``harmonic`` (1/i) or ``rogue`` (one at 100)."""
    if kind == "harmonic":
        return 1.0 / np.arange(1, d + 1)
    if kind == "rogue":
        return np.r_[100.0, np.linspace(2.0, 0.5, d - 1)]
    return np.linspace(3.0, 0.5, d)


SHAPES = {
    "linear": lambda x: x,
    "convex": lambda x: x + 2.0 * x ** 2,
    "concave": lambda x: 2.0 * np.sqrt(np.clip(x, 0, None)),
    "concave-log": lambda x: np.log1p(0.5 * x) / 0.5,
    "concave-ratio": lambda x: x / (1.0 + 2.0 * x),
    "convex-square": lambda x: x ** 2,
}


def simulate(seed: int, *, kind: str = "flat", d: int = 32, r: int = 4, shape: str = "linear",
             beta: float = 0.0, n_batches: int = 8, rows: int = 64, n_controls: int = 5,
             noise: float = 0.002, n_boot: int = 200, per_token: bool = False,
             cost_ratio: float = 1.0, tails: float = 0.0):
    """One simulated causal check: returns (rows by metric, Outcome, CausalLosses).

    ``per_token``: the null acts on each row instead: a row's loss is ``f`` of the squared norm
    its edit moves it by (in units of ``r tr(Sigma) / d``, averaged over rows), so matching the pooled
    removed variance does not equalise the mean loss when ``f`` is nonlinear. ``cost_ratio``
    (with ``per_token``): a row's squared displacement inside span(Q_T) counts this many times
    (the planted model's direction-weighted cost, ``tangentlab.validate.planted``). ``tails``:
    each row is scaled by ``exp(tails g)``, g standard normal (a lognormal per-row scale
    mixture: heavy-tailed rows, as in trained residual streams; 0 = Gaussian rows). The edits'
    displacements (``per_token``) come from the pipeline's own edit,
    :func:`tangentlab.empirical.loading.capture.edit_activations`.
    """
    import torch

    from tangentlab.claims import causal_rules as CR
    from tangentlab.claims import rules as R
    from tangentlab.empirical.loading.capture import edit_activations
    from tangentlab.empirical.measurement.causal import (
        CausalLosses,
        ablated_moments,
        build_variants,
        causal_rows,
    )
    from tangentlab.empirical.measurement.protocol import MeasureConfig
    from tangentlab.empirical.measurement.records import RowBase
    from tangentlab.measure import normal_controls, removed_variance

    rng = np.random.default_rng([seed, 18])
    lam = spectrum(kind, d)
    R0 = np.linalg.qr(rng.standard_normal((d, d)))[0]  # a random orientation
    sd = np.sqrt(lam)

    def draw(n):
        scale = np.exp(tails * rng.standard_normal((n, 1))) if tails else 1.0
        return scale * (rng.standard_normal((n, d)) * sd) @ R0.T

    fit = draw(2000)
    w, V = np.linalg.eigh(np.cov(fit.T))
    Q = V[:, ::-1][:, :r]
    acts = [draw(rows)[None] for _ in range(n_batches)]  # (1, rows, d) per batch
    masks = [np.ones((1, rows), dtype=bool) for _ in acts]
    mu, cov, n = ablated_moments(acts, masks)
    var = build_variants(Q, normal_controls(Q, n_controls, seed), cov, rms=1.0, steer_sizes=(),
                         n_controls=n_controls, seed=[seed, 31])
    scale = float(np.trace(cov)) * r / d
    f = SHAPES[shape]
    Bs, Ns = var.bases, var.noise  # (K, d, r) each; noise z N^T is added inside span(B)
    QtI = Q.T[None] - np.einsum("dr,kde,kfe->krf", Q, Bs, Bs)  # Q^T (I - B B^T), (K, r, d)
    n_all = np.einsum("kdr,kdr->k", Ns, Ns)  # variance the noise adds back
    n_in = np.einsum("dq,kdr->kqr", Q, Ns)
    n_in = np.einsum("kqr,kqr->k", n_in, n_in)  # ... inside span(Q)
    L = np.zeros((n_batches, len(Bs)))
    for b, H in enumerate(acts):
        C = np.cov(H[0].T, bias=True)
        v = (removed_variance(Bs, C) - n_all) / scale
        v_in = (np.sum(Q * (C @ Q)) - np.einsum("krd,de,kre->k", QtI, C, QtI) - n_in) / scale
        clean = 3.0 + 0.1 * rng.standard_normal()
        if per_token:  # mean over rows of f(||delta h||^2), delta h as the pipeline edits
            hv = torch.as_tensor(H[0])[None, None].expand(len(Bs), 1, *H[0].shape)
            z = torch.as_tensor(rng.standard_normal((1, H.shape[1], r)))
            edited = edit_activations(hv, mu=torch.as_tensor(mu), bases=torch.as_tensor(Bs),
                                      shifts=torch.as_tensor(var.shifts), z=z,
                                      noise=torch.as_tensor(Ns), whiten=torch.as_tensor(var.whiten))
            D = (edited - hv)[:, 0].numpy()  # (K, rows, d)
            DQ = np.einsum("kid,dq->kiq", D, Q)
            q = np.einsum("kid,kid->ki", D, D) + (cost_ratio - 1.0) * np.einsum("kiq,kiq->ki", DQ, DQ)
            v = f(q / scale).mean(axis=1)
        else:
            v = f(v)
        L[b] = rows * (clean + v + beta * v_in + noise * rng.standard_normal(len(Bs)))
    cl = CausalLosses(loss_sums=L, counts=np.full_like(L, rows), variants=var, n_rows=n)
    out = {}
    for row in causal_rows(cl, MeasureConfig(n_boot=n_boot, seed=seed), RowBase(site="s")):
        out.setdefault(row["metric"], row)
    ex, dx = out["ablation_excess"], out["ablation_excess_displacement"]
    bx = out["ablation_excess_both"]
    outcome = CR.ablation_excess_rule(
        R.Interval("excess", ex["value"], ex.get("ci_low"), ex.get("ci_high")),
        out["ablation_loss_matched_mean"]["value"],
        displacement=R.Interval("displacement", dx["value"], dx.get("ci_low"), dx.get("ci_high")),
        control_displacement=out["ablation_loss_matched_displacement_mean"]["value"],
        both=R.Interval("both", bx["value"], bx.get("ci_low"), bx.get("ci_high")),
        control_both=out["ablation_loss_matched_both_mean"]["value"])
    return out, outcome, cl

"""Metric-row builders of ``measure``: each takes typed inputs and returns tidy results rows.

Every function here is pure (no model, no file): a basis ``Q`` (d, r), a
:class:`~tangentlab.empirical.records.SiteStats`, the config and a
:class:`~tangentlab.empirical.records.RowBase` in, a list of row dicts out. docs/empirical.md
states every metric and formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tangentlab.empirical.records import RowBase, SiteStats
from tangentlab.errors import InsufficientSamplesError

__all__ = [
    "AGGREGATED_METRICS",
    "loss_rows",
    "energy_rows",
    "isotropy_share_rows",
    "representation_rows",
    "frequency_rows",
    "drift_rows",
    "causal_rows",
    "trajectory_rows",
    "aggregate_rows",
    "corr_with_ci",
]

#: Metrics averaged into the ``early`` / ``late`` rows (fixed proxy, every bucket).
AGGREGATED_METRICS = (
    "energy_tangent", "energy_control_mean", "enrichment", "p_value", "position",
    "delta_isoscore_tangent", "delta_isoscore_control_mean", "freq_distance_pearson",
    "freq_distance_spearman", "ablation_loss_tangent", "ablation_loss_control_mean",
    "representation_isoscore_star", "representation_mean_cosine",
)


def loss_rows(st: SiteStats, base: RowBase) -> list[dict]:
    """The clean loss per target of the eval batches (none without a loss)."""
    if not st.n_targets:
        return []
    return [base.row("loss_clean", st.loss_sum / st.n_targets, bucket="all", n=st.n_targets)]


def energy_rows(Q, st: SiteStats, cfg, base: RowBase) -> list[dict]:
    """Energy-test rows (overall and per bucket) for basis ``Q`` (d, r) on ``st``'s gradients."""
    import numpy as np

    from tangentlab.measure import control_test

    out = []
    groups = [("all", None, st.batch_sums)] + [
        (lb, lb, st.bucket_batch_sums[lb]) for lb in st.grad.group_labels
        if st.grad.group_count(lb) >= 2
    ]
    for label, group, batches in groups:
        C = st.grad.second_moment(group)
        if np.trace(C) <= 0:
            continue
        n = st.grad.count if group is None else st.grad.group_count(group)
        nonzero = int(np.sum(np.einsum("bii->b", batches) > 0))
        res = control_test(Q, C, cfg.n_controls, cfg.seed,
                           batches=batches if nonzero >= 2 else None,
                           n_boot=cfg.n_boot, confidence=cfg.confidence)
        rel = res.controls / res.control_mean if res.control_mean > 0 else res.controls * np.nan

        def row(metric, value, _label=label, _n=n, **extra):
            return base.row(metric, value, bucket=_label, n=_n, **extra)

        out += [
            row("energy_tangent", res.energy, ci_low=res.energy_ci_low, ci_high=res.energy_ci_high),
            row("energy_control_mean", res.control_mean,
                ci_low=float(np.min(res.controls)), ci_high=float(np.max(res.controls))),
            row("enrichment", res.enrichment, ci_low=res.enrichment_ci_low,
                ci_high=res.enrichment_ci_high),
            row("enrichment_ci_low", res.enrichment_ci_low),
            row("enrichment_ci_high", res.enrichment_ci_high),
            row("control_enrichment_low", float(np.min(rel))),
            row("control_enrichment_high", float(np.max(rel))),
            row("p_value", res.p_value),
            row("baseline", res.baseline),
            row("oracle", res.oracle),
            row("position", res.position),
        ]
    return out


def isotropy_share_rows(Q, st: SiteStats, cfg, base: RowBase) -> list[dict]:
    """IsoScore* of the gradient covariance, and its change after projecting out Q vs controls."""
    import numpy as np

    from tangentlab.measure import complement_basis, isoscore_star, normal_controls

    cov = st.grad.covariance()
    before = isoscore_star(cov=cov)

    def after(basis) -> float:
        B = complement_basis(basis)
        return isoscore_star(cov=B.T @ cov @ B)

    d_t = after(Q) - before
    d_n = np.array([after(c) - before for c in normal_controls(Q, cfg.n_controls, cfg.seed)])
    lo, hi = np.quantile(d_n, [0.025, 0.975])
    kw = {"bucket": "all", "n": st.grad.count}
    return [
        base.row("grad_isoscore_star", before, **kw),
        base.row("delta_isoscore_tangent", d_t, **kw),
        base.row("delta_isoscore_control_mean", float(d_n.mean()), ci_low=float(lo),
                 ci_high=float(hi), **kw),
        base.row("delta_isoscore_p_value", (1 + int(np.sum(d_n >= d_t))) / (1 + len(d_n)), **kw),
    ]


def representation_rows(st: SiteStats, cfg, base: RowBase) -> list[dict]:
    """IsoScore*, mean cosine (on the row sample) and effective rank (σ variant, centred)."""
    import numpy as np

    from tangentlab.measure import effective_rank, isoscore_star, mean_cosine

    cov = st.act.covariance()
    kw = {"bucket": "all", "n": st.act.count}
    sample = st.sample[np.linalg.norm(st.sample, axis=1) > 0]
    return [
        base.row("representation_isoscore_star", isoscore_star(cov=cov), **kw),
        base.row("representation_mean_cosine",
                 mean_cosine(sample, seed=cfg.seed) if len(sample) >= 2 else float("nan"),
                 bucket="all", n=len(sample)),
        base.row("representation_effective_rank", effective_rank(cov=cov, variant="sigma"),
                 variant="sigma,centred", **kw),
        base.row("representation_rms_norm", math.sqrt(float(np.trace(st.act.second_moment()))),
                 **kw),
    ]


def corr_with_ci(x, y, *, n_boot: int, confidence: float, seed: int) -> dict[str, tuple]:
    """Pearson r, Spearman ρ and their bootstrap (over tokens) percentile intervals.

    ``x``, ``y``: (n,). Returns {"pearson": (value, lo, hi), "spearman": (value, lo, hi)}; NaN
    when n < 4 or either variable is constant.
    """
    import numpy as np
    from scipy import stats as sps

    from tangentlab.measure import bootstrap_ci

    n = len(x)
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        nan = float("nan")
        return {"pearson": (nan, nan, nan), "spearman": (nan, nan, nan)}
    rng = np.random.default_rng([seed, 11])
    idx = rng.integers(0, n, size=(n_boot, n))
    X, Y = x[idx], y[idx]

    def rowcorr(A, B):
        A = A - A.mean(axis=1, keepdims=True)
        B = B - B.mean(axis=1, keepdims=True)
        den = np.sqrt((A * A).sum(axis=1) * (B * B).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, (A * B).sum(axis=1) / den, np.nan)

    reps = {"pearson": rowcorr(X, Y),
            "spearman": rowcorr(sps.rankdata(X, axis=1), sps.rankdata(Y, axis=1))}
    point = {"pearson": float(np.corrcoef(x, y)[0, 1]),
             "spearman": float(sps.spearmanr(x, y).statistic)}
    out = {}
    for name in ("pearson", "spearman"):
        try:
            lo, hi = bootstrap_ci(reps[name], confidence)
        except InsufficientSamplesError:
            lo = hi = float("nan")
        out[name] = (point[name], lo, hi)
    return out


def _corr(x, y, cfg):
    return corr_with_ci(x, y, n_boot=cfg.n_boot, confidence=cfg.confidence, seed=cfg.seed)


def frequency_rows(st: SiteStats, counts, uniq, cfg, base: RowBase):
    """Log-frequency vs spread correlations; returns (rows, per-token scatter data).

    ``counts``: (vocab,) training counts; ``uniq``: (U,) the token ids of ``st``'s per-token arrays.
    """
    import numpy as np

    k = cfg.spread_k
    logf = np.log1p(counts[uniq]).astype(np.float64)
    n = st.tok_n
    # equal-size subsample: mean distance of the first k occurrences to their own centroid
    ok = n >= k
    first = st.tok_first[ok]
    cen = first.mean(axis=1, keepdims=True)
    spread_k = np.linalg.norm(first - cen, axis=2).mean(axis=1)
    # raw (biased) RMS distance over all occurrences, and the unbiased variance estimate
    ok2 = n >= 2
    mean = st.tok_sum[ok2] / n[ok2, None]
    ss = np.maximum(st.tok_sq[ok2] - n[ok2] * np.einsum("ud,ud->u", mean, mean), 0.0)
    raw = np.sqrt(ss / n[ok2])
    unbiased = ss / (n[ok2] - 1)
    rows = []
    for tag, x, y in (("", logf[ok], spread_k), ("_raw", logf[ok2], raw),
                      ("_unbiased", logf[ok2], unbiased)):
        c = _corr(x, y, cfg)
        for name in ("pearson", "spearman"):
            v, lo, hi = c[name]
            rows.append(base.row(f"freq_distance{tag}_{name}", v, bucket="all", ci_low=lo,
                                 ci_high=hi, n=len(x)))
    return rows, {"logf": logf[ok], "spread": spread_k}


def drift_rows(proxies, base: RowBase) -> list[dict]:
    """Principal-angle drift of the refit proxy from the fixed one (and from the previous refit).

    ``proxies``: a :class:`~tangentlab.empirical.proxy_schedule.CheckpointProxies`.
    """
    if proxies.drift is None:
        return []
    b = base.with_(proxy="refit")
    dr = proxies.drift
    rows = [
        b.row("proxy_drift_max_angle", dr.max_angle, bucket="all"),
        b.row("proxy_drift_mean_cos2", dr.mean_cos2, bucket="all"),
        b.row("proxy_drift_projection_distance", dr.projection_distance, bucket="all"),
    ]
    if proxies.drift_previous is not None:
        rows.append(b.row("refit_drift_from_previous_max_angle", proxies.drift_previous.max_angle,
                          bucket="all"))
    return rows


def causal_rows(loss, n_targets: int, n_subspaces: int, steer_sizes: Sequence[float],
                base: RowBase) -> list[dict]:
    """Rows of the causal check from the mean loss per target of each edit variant.

    ``loss``: (1 + m + m·len(steer_sizes),) mean loss: clean, then mean-ablation of each of the
    ``m = n_subspaces`` subspaces (tangent first), then for each step size the shift along each
    subspace's first direction (tangent first).
    """
    import numpy as np

    loss = np.asarray(loss, dtype=np.float64)
    clean = loss[0]
    m = n_subspaces
    abl = loss[1:1 + m] - clean
    kw = {"bucket": "all", "n": int(n_targets)}
    rows = [
        base.row("causal_loss_clean", clean, **kw),
        base.row("ablation_loss_tangent", abl[0], **kw),
        base.row("ablation_loss_control_mean", float(abl[1:].mean()), ci_low=float(abl[1:].min()),
                 ci_high=float(abl[1:].max()), **kw),
    ]
    for j, alpha in enumerate(steer_sizes):
        st_ = loss[1 + m * (j + 1): 1 + m * (j + 2)] - clean
        rows += [
            base.row("steer_loss_tangent", st_[0], step_size=float(alpha), **kw),
            base.row("steer_loss_control_mean", float(st_[1:].mean()), ci_low=float(st_[1:].min()),
                     ci_high=float(st_[1:].max()), step_size=float(alpha), **kw),
        ]
    return rows


def trajectory_rows(centroids, tok_n_last, logf, cfg, base: RowBase) -> list[dict]:
    """Pearson/Spearman of each token's centroid trajectory variance against its log-frequency.

    ``centroids``: (T, U, d), each checkpoint's per-token centroids divided by its RMS activation
    norm; ``tok_n_last``: (U,) occurrence counts; ``logf``: (U,) log(1 + count).
    """
    import numpy as np

    C = np.asarray(centroids)
    ok = tok_n_last >= cfg.spread_k
    var = ((C - C.mean(axis=0, keepdims=True)) ** 2).sum(axis=2).sum(axis=0) / (C.shape[0] - 1)
    c = _corr(logf[ok], var[ok], cfg)
    return [base.row(f"trajectory_variance_{name}", c[name][0], bucket="all", ci_low=c[name][1],
                     ci_high=c[name][2], n=int(ok.sum())) for name in ("pearson", "spearman")]


def aggregate_rows(rows: Sequence[dict], cut: float) -> list[dict]:
    """Early (0 < step ≤ ``cut``) and late (step > ``cut``) means of :data:`AGGREGATED_METRICS`.

    Fixed proxy (or no proxy) only; step 0 is left out. ``ci_low``/``ci_high`` hold the min and max
    over checkpoints.
    """
    import numpy as np

    groups: dict[tuple, dict[str, list]] = {}
    keep = {}
    for r in rows:
        if r["metric"] not in AGGREGATED_METRICS or r.get("proxy") not in (None, "fixed"):
            continue
        if not isinstance(r.get("step"), int) or r["step"] == 0:
            continue
        phase = "early" if r["step"] <= cut else "late"
        key = (r["site"], r["bucket"], r["metric"], r.get("step_size"))
        groups.setdefault(key, {"early": [], "late": []})[phase].append(r["value"])
        keep[key] = r
    out = []
    for key, phases in groups.items():
        for phase, vals in phases.items():
            v = np.asarray([x for x in vals if x == x], dtype=float)
            if not v.size:
                continue
            base = {k: keep[key].get(k) for k in ("experiment", "model", "arch", "layer", "site",
                                                   "bucket", "method", "proxy", "seed")}
            r = dict(base, checkpoint=phase, step=None, metric=key[2], value=float(v.mean()),
                     ci_low=float(v.min()), ci_high=float(v.max()), n=int(v.size))
            out.append(r)
    return out

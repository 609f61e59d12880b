"""Metric-row builders of ``measure``: each takes typed inputs and returns tidy results rows.

Every function here is pure (no model, no file): a basis ``Q`` (d, r), a
:class:`~tangentlab.empirical.measurement.records.SiteStats`, the config and a
:class:`~tangentlab.empirical.measurement.records.RowBase` in, a list of row dicts out. docs/empirical.md
states every metric and formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tangentlab.empirical.measurement.records import RowBase, SiteStats

__all__ = [
    "AGGREGATED_METRICS",
    "ISO_NOTE",
    "loss_rows",
    "energy_rows",
    "isotropy_share_rows",
    "representation_rows",
    "frequency_rows",
    "forced_direction_rows",
    "reachable_rows",
    "drift_rows",
    "trajectory_rows",
    "aggregate_rows",
    "corr_with_ci",
]

#: Metrics averaged into the ``early`` / ``late`` rows (fixed proxy, every bucket).
AGGREGATED_METRICS = (
    "energy_tangent", "energy_control_mean", "enrichment", "p_value", "position",
    "delta_isoscore_tangent", "delta_isoscore_control_mean", "freq_distance_pearson",
    "freq_distance_spearman", "ablation_loss_tangent", "ablation_loss_control_mean",
    "ablation_loss_matched_mean", "representation_isoscore_star", "representation_mean_cosine",
)

#: The ``controls`` column of a ``p_value`` row, by ``BatchControlTestResult.p_value_controls``:
#: the p-value counts full-space controls (Haar rank-r subspaces of all of R^d, exchangeable
#: with Q_T under the null) where the measurement projected them, else the complement pool.
P_VALUE_CONTROLS = {"full": "full-space", "complement": "complement"}

#: The note on a ``ratio_cv`` row (and its ``enrichment`` row) whose per-batch ratio CV lies
#: above ``tangentlab.measure.tails.VALIDATED_RATIO_CV`` (stored as the row's ``band_high``):
#: coverage of the enrichment interval was not shown by simulation there; it may run low.
CV_FLAG = "cv_outside_validated_range"

#: The note on every ΔIsoScore* row: it is not an independent test.
ISO_NOTE = ("depends on the enrichment: removing a subspace that holds more gradient energy "
            "raises the isotropy of the rest; not an independent verdict")


def loss_rows(st: SiteStats, base: RowBase) -> list[dict]:
    """The clean loss per target over all eval batches (none without a loss)."""
    if not st.n_targets:
        return []
    return [base.row("loss_clean", st.loss_sum / st.n_targets, bucket="all", n=st.n_targets)]


def energy_rows(st: SiteStats, proxy: str, cfg, base: RowBase, *, constrained: bool = False,
                U=None, oracles: dict | None = None) -> list[dict]:
    """Energy-test rows (overall and per bucket) of ``proxy`` from the per-batch scalars in ``st``.

    ``batch_control_test`` resamples test batches and redraws ``n_controls`` controls from the
    pool in every replicate (``cfg.interval``, ``cfg.n_boot``); the oracle comes from the float64
    gradient moments of the same rows. ``constrained``: use ``st.constrained`` (the test inside
    the complement of a fixed forced subspace, in the coordinates U (d, d−k) of that complement:
    the oracle uses UᵀCU); those rows carry ``subspace="constrained"``. ``oracles``: an optional
    dict shared by the calls of one site, so that proxies of the same rank reuse each bucket's
    oracle (an eigendecomposition of a (d, d) matrix, the same for every proxy).
    """
    import numpy as np

    from tangentlab.measure import batch_control_test, oracle_energy
    from tangentlab.measure.tails import VALIDATED_RATIO_CV, outside_validated_range, ratio_cv

    source = st.constrained if constrained else st.energies
    out = []
    for (px, label), be in source.items():
        if px != proxy:
            continue
        group = None if label == "all" else label
        n = st.grad.count if group is None else st.grad.group_count(group)
        if n < 2 or not be.trace.sum() > 0 or int(np.sum(be.trace > 0)) < 2:
            continue
        key = (label, constrained, be.r)
        if oracles is None or key not in oracles:
            C = st.grad.second_moment(group)
            if U is not None:
                C = U.T @ C @ U
            oracle = oracle_energy(C, be.r)
            if oracles is not None:
                oracles[key] = oracle
        res = batch_control_test(be, n_controls=cfg.n_controls, n_boot=cfg.n_boot,
                                 confidence=cfg.confidence, seed=cfg.seed, interval=cfg.interval,
                                 oracle=oracles[key] if oracles is not None else oracle)
        rel = res.controls / res.control_mean if res.control_mean > 0 else res.controls * np.nan
        kw = {"bucket": label, "n": n}
        if constrained:
            kw["subspace"] = "constrained"
        ci = {"interval": res.interval, "n_batches": res.n_batches}
        cv = ratio_cv(be)
        flag = {"note": CV_FLAG} if outside_validated_range(cv) else {}
        out += [
            base.row("ratio_cv", cv, band_high=VALIDATED_RATIO_CV, n_batches=res.n_batches,
                     **flag, **kw),
            base.row("energy_tangent", res.energy, ci_low=res.energy_ci_low,
                     ci_high=res.energy_ci_high, **ci, **kw),
            base.row("energy_control_mean", res.control_mean, band_low=res.control_band_low,
                     band_high=res.control_band_high, **kw),
            base.row("enrichment", res.enrichment, ci_low=res.enrichment_ci_low,
                     ci_high=res.enrichment_ci_high, **ci, **flag, **kw),
            base.row("enrichment_ci_low", res.enrichment_ci_low, **kw),
            base.row("enrichment_ci_high", res.enrichment_ci_high, **kw),
            base.row("control_enrichment_low", float(np.min(rel)), **kw),
            base.row("control_enrichment_high", float(np.max(rel)), **kw),
            base.row("p_value", res.p_value, controls=P_VALUE_CONTROLS[res.p_value_controls],
                     **kw),
            base.row("p_value_complement", res.p_value_complement, controls="complement", **kw),
            base.row("baseline", res.baseline, **kw),
            base.row("oracle", res.oracle, **kw),
            base.row("position", res.position, **kw),
            base.row("bootstrap_replicates_kept", res.n_replicates_kept,
                     n_replicates=res.n_replicates, **kw),
        ]
    return out


def isotropy_share_rows(Q, st: SiteStats, cfg, base: RowBase) -> list[dict]:
    """IsoScore* of the gradient covariance, and its change after projecting out Q vs controls.

    The controls' 2.5–97.5% quantiles go to ``band_low``/``band_high`` (a spread, not an
    interval). Every row carries ``note`` = :data:`ISO_NOTE`.
    """
    import numpy as np

    from tangentlab.measure import isoscore_star, isoscore_star_after_removal, normal_controls

    cov = st.grad.covariance()
    before = isoscore_star(cov=cov)
    # Q and its controls at once, without an eigendecomposition each (O(d² r) per basis)
    after = isoscore_star_after_removal(
        cov, np.concatenate([np.asarray(Q)[None], normal_controls(Q, cfg.n_controls, cfg.seed)]))
    d_t = float(after[0] - before)
    d_n = after[1:] - before
    lo, hi = np.quantile(d_n, [0.025, 0.975])
    kw = {"bucket": "all", "n": st.grad.count, "note": ISO_NOTE}
    return [
        base.row("grad_isoscore_star", before, bucket="all", n=st.grad.count),
        base.row("delta_isoscore_tangent", d_t, **kw),
        base.row("delta_isoscore_control_mean", float(d_n.mean()), band_low=float(lo),
                 band_high=float(hi), **kw),
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


def corr_with_ci(x, y, *, n_boot: int, confidence: float, seed) -> dict[str, tuple]:
    """Pearson r and Spearman ρ with bootstrap (over tokens) intervals.

    NaN when n < 4 or a variable is constant. ``x``, ``y``: (n,). See
    :func:`tangentlab.measure.correlation_with_ci`.
    """
    import numpy as np

    from tangentlab.measure import correlation_with_ci

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        nan = float("nan")
        return {"pearson": (nan, nan, nan), "spearman": (nan, nan, nan)}
    return correlation_with_ci(x, y, n_boot=n_boot, confidence=confidence, seed=seed)


def _corr(x, y, cfg, tag: int):
    return corr_with_ci(x, y, n_boot=cfg.n_boot, confidence=cfg.confidence,
                        seed=[cfg.seed, 11, tag])


#: How the corrected per-token geometry picks its occurrences (recorded in the rows).
GEOMETRY_RULE = ("disjoint eval windows; one random occurrence per (document, token) and per "
                 "(window, token), then k at random per token")

#: The interval of the corrected frequency–spread rows: documents resampled, statistic recomputed.
DOCUMENT_INTERVAL = "document jackknife"


def _correlation_rows(prefix: str, c: dict, n: int, base: RowBase, **extra) -> list[dict]:
    return [base.row(f"{prefix}_{name}", c[name][0], bucket="all", ci_low=c[name][1],
                     ci_high=c[name][2], n=n, statistic=name, **extra)
            for name in ("pearson", "spearman")]


def frequency_rows(st: SiteStats, counts, uniq, cfg, base: RowBase):
    """Log-frequency vs spread correlations; returns (rows, per-token scatter data).

    Corrected (``freq_distance_*``): the mean distance to their centroid of k occurrences per
    token, drawn at random from the geometry occurrences (at most one per document and token,
    and per window and token; no MLM-selected position), with a *document* jackknife interval
    (:func:`tangentlab.measure.document_jackknife_correlation`: groups of documents left out,
    the statistic recomputed; ``interval="document jackknife"``, ``n_documents``) where the
    rows' documents are known, else a token bootstrap. Raw (``freq_distance_raw_*``, RMS distance over
    all geometry rows) and ``freq_distance_unbiased_*`` (variance with n − 1) stay beside it,
    with token-bootstrap intervals. Each row says its ``statistic`` (pearson or spearman).
    ``counts``: (vocab,); ``uniq``: (U,) ids of ``st.tok_*``.
    """
    import numpy as np

    from tangentlab.errors import InsufficientSamplesError
    from tangentlab.measure import document_jackknife_correlation, equal_size_picks

    k = cfg.spread_k
    rows = []
    try:
        tokens, picks = equal_size_picks(st.geo_rows, st.geo_tokens, k, [cfg.seed, 19])
    except InsufficientSamplesError:  # no token with k occurrences: report NaN rows
        tokens, picks = np.zeros(0, dtype=np.int64), np.zeros((0, k), dtype=np.int64)
    logf_k = np.log1p(counts[tokens]).astype(np.float64)
    H = np.asarray(st.geo_rows, dtype=np.float64)
    pts = H[picks] if len(tokens) else np.zeros((0, k, H.shape[1] if H.ndim == 2 else 0))
    spread = np.linalg.norm(pts - pts.mean(axis=1, keepdims=True), axis=2).mean(axis=1) \
        if len(tokens) else np.zeros(0)
    if st.geo_docs is not None and len(tokens) >= 4 and np.ptp(logf_k) > 0 and np.ptp(spread) > 0:
        got = document_jackknife_correlation(H, picks, logf_k, st.geo_docs,
                                             confidence=cfg.confidence, seed=[cfg.seed, 11, 0])
        c, extra = got, {"interval": DOCUMENT_INTERVAL, "n_documents": got["n_documents"]}
    else:
        c = _corr(logf_k, spread, cfg, 0)
        extra = {"interval": "token bootstrap"}
    rows += _correlation_rows("freq_distance", c, len(tokens), base, rule=GEOMETRY_RULE, **extra)
    logf = np.log1p(counts[uniq]).astype(np.float64)
    n = st.tok_n
    ok2 = n >= 2
    mean = st.tok_sum[ok2] / n[ok2, None]
    ss = np.maximum(st.tok_sq[ok2] - n[ok2] * np.einsum("ud,ud->u", mean, mean), 0.0)
    raw = np.sqrt(ss / n[ok2])
    unbiased = ss / (n[ok2] - 1)
    for j, (tag, y) in enumerate((("_raw", raw), ("_unbiased", unbiased)), start=1):
        rows += _correlation_rows(f"freq_distance{tag}", _corr(logf[ok2], y, cfg, j),
                                  int(ok2.sum()), base, rule="all geometry rows",
                                  interval="token bootstrap")
    return rows, {"logf": logf_k, "spread": spread}


def forced_direction_rows(st: SiteStats, base: RowBase, tol: float) -> list[dict]:
    """Max and mean |cos| between the gradient rows and each direction a norm may force.

    The directions are 𝟙, the centred activation and the activation; the max rows say whether
    the direction is ``forced`` (max |cos| < ``tol``).
    """
    f = st.forced
    rows = []
    for name in ("ones", "centred", "raw"):
        if f"{name}_max" not in f:
            continue
        kw = {"bucket": "all", "n": int(f["n"])}
        rows += [base.row(f"grad_cos_{name}_max", f[f"{name}_max"],
                          forced=bool(f[f"{name}_max"] < tol), **kw),
                 base.row(f"grad_cos_{name}_mean", f[f"{name}_mean"],
                          band_high=f["unconstrained_typical"], **kw)]
    return rows


def reachable_rows(st: SiteStats, proxy: str, Q, pool, forced: str, cfg, base: RowBase,
                   *, full=None) -> list[dict]:
    """The energy test against per-row reachable baselines (``forced`` = ``raw`` or ``centred``).

    Each subspace's per-batch energies are divided by its own reachable baseline
    (:func:`tangentlab.measure.reachable_baseline` on the test half's activation rows, for Q and
    for every control of the pool), so the enrichment of the rescaled energies is
    :func:`tangentlab.measure.normalised_enrichment`; ``batch_control_test`` on them gives its
    interval (test batches resampled, controls redrawn) and p-value. Rows carry
    ``subspace="constrained"`` and ``forced``. ``full``: the full-space controls ``(K_f, d, r)``
    whose energies ``BatchEnergies.full`` holds; rescaled by their own baselines they give the
    p-value. The baselines weight each sampled row by its squared gradient norm
    (``st.test_act_weights``) where the measurement stored it, which makes them the expected
    energy of the null.
    """
    from dataclasses import replace

    from tangentlab.measure import batch_control_test, reachable_baseline

    be = st.energies.get((proxy, "all"))
    if be is None or not be.trace.sum() > 0 or be.n_batches < 2:
        return []
    w = getattr(st, "test_act_weights", None)
    b_t = float(reachable_baseline(Q, st.test_acts, forced=forced, weights=w))
    b_c = reachable_baseline(pool, st.test_acts, forced=forced, weights=w)
    fs = None
    if full is not None and be.full is not None and be.full_size == len(full):
        fs = be.full / reachable_baseline(full, st.test_acts, forced=forced, weights=w)[None, :]
    scaled = replace(be, tangent=be.tangent / b_t, controls=be.controls / b_c[None, :], full=fs)
    res = batch_control_test(scaled, n_controls=cfg.n_controls, n_boot=cfg.n_boot,
                             confidence=cfg.confidence, seed=cfg.seed, interval=cfg.interval)
    kw = {"bucket": "all", "n": st.grad.count, "subspace": "constrained", "forced": forced}
    return [base.row("baseline_reachable", b_t, **kw),
            base.row("enrichment_reachable", res.enrichment, ci_low=res.enrichment_ci_low,
                     ci_high=res.enrichment_ci_high, interval=res.interval,
                     n_batches=res.n_batches, **kw),
            base.row("p_value_reachable", res.p_value,
                     controls=P_VALUE_CONTROLS[res.p_value_controls], **kw)]


def drift_rows(proxies, base: RowBase) -> list[dict]:
    """Principal-angle drift of the refit proxy from the fixed one (and from the previous refit).

    ``proxies``: a :class:`~tangentlab.empirical.measurement.proxy_schedule.CheckpointProxies`.
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


def trajectory_rows(centroids, logf, base: RowBase, cfg, *, raw: bool = False) -> list[dict]:
    """Pearson/Spearman of each token's centroid trajectory variance against its log-frequency.

    ``centroids``: (T, t, d), each checkpoint's per-token centroids divided by its RMS
    activation norm (equal-size k-subsample centroids, the same occurrences at every checkpoint;
    ``raw``: all-occurrence centroids, the old statistic, as ``trajectory_variance_raw_*``);
    ``logf``: (t,) log(1 + count).
    """
    import numpy as np

    C = np.asarray(centroids)
    var = ((C - C.mean(axis=0, keepdims=True)) ** 2).sum(axis=2).sum(axis=0) / (C.shape[0] - 1)
    prefix = "trajectory_variance_raw" if raw else "trajectory_variance"
    return _correlation_rows(prefix, _corr(logf, var, cfg, 5 if raw else 4), len(logf), base,
                             rule="all geometry rows" if raw else GEOMETRY_RULE)


def aggregate_rows(rows: Sequence[dict], cut: float, max_step: int) -> list[dict]:
    """Early (0 < step ≤ ``cut``) and late (step > ``cut``) aggregates of the tracked metrics.

    The metrics are :data:`AGGREGATED_METRICS` (fixed proxy or none; step 0 left out).

    Each checkpoint is weighted by the span of training steps it stands for inside its phase
    (:func:`~tangentlab.empirical.measurement.proxy_schedule.step_spans` over ``[0, cut]`` or
    ``[cut, max_step]``), so "early" means the first part of *training*, not of the checkpoint
    list. ``value`` is the weighted mean, ``band_low``/``band_high`` the min and max over
    checkpoints, ``effective_step`` the weighted median step, ``n`` the number of checkpoints.
    """
    import numpy as np

    from tangentlab.empirical.measurement.proxy_schedule import step_spans, weighted_median

    groups: dict[tuple, dict[str, dict[int, float]]] = {}
    keep = {}
    for r in rows:
        if r["metric"] not in AGGREGATED_METRICS or r.get("proxy") not in (None, "fixed"):
            continue
        if r.get("subspace") is not None:
            continue
        if not isinstance(r.get("step"), int) or r["step"] == 0:
            continue
        phase = "early" if r["step"] <= cut else "late"
        key = (r["site"], r["bucket"], r["metric"], r.get("step_size"))
        groups.setdefault(key, {"early": {}, "late": {}})[phase][r["step"]] = r["value"]
        keep[key] = r
    out = []
    for key, phases in groups.items():
        for phase, by_step in phases.items():
            steps = sorted(s for s, v in by_step.items() if v == v)
            if not steps:
                continue
            lo, hi = (0.0, cut) if phase == "early" else (cut, float(max_step))
            w = np.asarray(step_spans(steps, lo, hi), dtype=np.float64)
            if not w.sum() > 0:
                w = np.ones(len(steps))
            v = np.asarray([by_step[s] for s in steps], dtype=np.float64)
            base = {k: keep[key].get(k) for k in ("experiment", "model", "arch", "layer", "site",
                                                   "bucket", "method", "proxy", "seed",
                                                   "step_size", "statistic", "note", "rule",
                                                   "controls")}
            out.append(dict(base, checkpoint=phase, step=None, metric=key[2],
                            value=float(w @ v / w.sum()), band_low=float(v.min()),
                            band_high=float(v.max()), n=len(steps),
                            effective_step=weighted_median(steps, w)))
    return out

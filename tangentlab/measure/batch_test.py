"""The batch control test: enrichment and energy with intervals that cover, and the p-value.

:func:`batch_control_test` resamples test batches and redraws the controls in every replicate
(expanded percentile, BCa, jackknife, or the log-scale studentized bootstrap, the default of the
measurement), from the per-batch scalars of :mod:`tangentlab.measure.batch_energy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ValidationError
from tangentlab.measure._validate import (
    check_positive_int,
)
from tangentlab.measure.batch_energy import BatchEnergies
from tangentlab.measure.energy import _ControlTestFields

__all__ = ["BatchControlTestResult", "batch_control_test", "VALIDATED_MIN_BATCHES"]

#: The fewest test batches at which the validation battery checks the intervals' coverage
#: (``BatteryConfig.coverage_batches``): an interval from fewer batches is outside what was
#: validated, and the summary and report say so beside it.
VALIDATED_MIN_BATCHES = 32


_INTERVALS = ("bootstrap", "bca", "jackknife", "studentized")


def _log_ratio_se(W: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Delta-method standard error of ``log(sum_b w_b num_b / sum_b w_b den_b)`` per replicate.

    ``W``: ``(m, B)`` batch counts; ``num``: ``(B,)`` or ``(m, B)``; ``den``: ``(m, B)`` or
    ``(B,)``. The linearisation of a log ratio of means is ``num_b / mean(num) - den_b /
    mean(den)``; its variance over the (weighted) batches, divided by B, is the variance of the
    log ratio. Returns ``(m,)`` (NaN where a mean is not positive).
    """
    B = W.shape[1]
    P = W / W.sum(axis=1, keepdims=True)
    num = np.broadcast_to(num, W.shape)
    den = np.broadcast_to(den, W.shape)
    mn = (P * num).sum(1, keepdims=True)
    md = (P * den).sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = num / mn - den / md
        var = (P * (u - (P * u).sum(1, keepdims=True)) ** 2).sum(1) * B / (B - 1) / B
        return np.where((mn[:, 0] > 0) & (md[:, 0] > 0), np.sqrt(var), np.nan)


def _studentized(be: BatchEnergies, n_controls: int, n_boot: int, confidence: float,
                 rng: np.random.Generator) -> tuple[float, float, float, float]:
    """Bootstrap-t intervals of the energy and the enrichment on the log scale.

    Each replicate resamples the B batches and redraws ``n_controls`` controls from the pool (as
    the percentile interval does) and studentizes ``log(ratio*) - log(ratio of the bootstrap
    world)`` by its own delta-method standard error (:func:`_log_ratio_se`); the interval is
    ``exp(log ratio - t*_{1-a} se, log ratio - t*_a se)``. A heavy right tail of per-batch ratios
    shows up in the replicates' standard errors, so the interval reaches further up than a
    percentile interval does (docs/empirical.md: coverage by per-batch ratio CV).
    """
    B, K = be.n_batches, be.pool_size
    a = _expanded_alpha(confidence, B)
    t, tr, C = be.tangent, be.trace, be.controls
    ones = np.ones((1, B))
    m_pt = C[:, :n_controls].mean(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        le = float(np.log(t.sum() / tr.sum()))
        lq = float(np.log(t.sum() / m_pt.sum()))
    se_e = float(_log_ratio_se(ones, t, tr[None])[0])
    se_q = float(_log_ratio_se(ones, t, m_pt[None])[0])
    W = rng.multinomial(B, np.full(B, 1.0 / B), size=n_boot).astype(np.float64)
    idx = rng.integers(0, K, size=(n_boot, n_controls))
    mb = C[:, idx].mean(axis=2).T  # (n_boot, B): each replicate's control mean per batch
    with np.errstate(divide="ignore", invalid="ignore"):
        le_rep = np.log((W @ t) / (W @ tr))
        lq_rep = np.log((W @ t) / (W * mb).sum(1))
        lq_world = float(np.log(t.sum() / C.mean(1).sum()))
        te = (le_rep - le) / _log_ratio_se(W, t, tr[None])
        tq = (lq_rep - lq_world) / _log_ratio_se(W, t, mb)
    out = []
    for point, se, rep in ((le, se_e, te), (lq, se_q, tq)):
        rep = rep[np.isfinite(rep)]
        if rep.size < 2 or not (np.isfinite(point) and np.isfinite(se)):
            out += [float("nan"), float("nan")]
            continue
        lo_t, hi_t = np.quantile(rep, [a, 1 - a])
        with np.errstate(over="ignore"):  # with very few batches a bound can be +inf: no bound
            out += [float(np.exp(point - hi_t * se)), float(np.exp(point - lo_t * se))]
    return out[0], out[1], out[2], out[3]


@dataclass(frozen=True)
class BatchControlTestResult(_ControlTestFields):
    """Result of :func:`batch_control_test`.

    Point estimates use all batches and the first ``n_controls`` controls of the pool:
    ``energy`` (E_T), ``controls`` ``(n_controls,)``, ``control_mean``, ``enrichment``
    (E_T / mean E_N), ``p_value`` ((1 + #{E_N >= E_T}) / (1 + n)), ``baseline`` (r / d),
    ``oracle`` (passed in; NaN if not given) and ``position`` ((E_T - r/d) / (oracle - r/d)).

    ``p_value_controls`` names the controls behind ``p_value``: ``"full"`` (the first
    ``n_controls`` full-space controls of ``BatchEnergies.full``, exchangeable with Q under the
    null, so p is exactly uniform on {1/(n+1), ..., 1} whatever r/d) when the record holds them,
    else ``"complement"`` (the matched-rank normal controls, anti-conservative at large r/d: a Q
    that happens to hold much energy leaves less to its complement). ``p_value_complement`` is
    the complement-control p-value in either case, kept beside it.

    ``energy_ci_*`` and ``enrichment_ci_*`` are intervals at ``confidence`` by ``interval``
    (``"bootstrap"`` percentile, ``"bca"`` or ``"jackknife"``), whose replicates resample batches
    *and* redraw ``n_controls`` controls from the pool, so the control-draw variance is inside
    them. ``n_replicates`` replicates were drawn (pseudo-values for the jackknife), of which
    ``n_replicates_kept`` were finite; the rest are counted here, not silently dropped.

    ``control_band_low`` / ``control_band_high`` are the min and max of the control energies: a
    band, not a confidence interval.
    """

    pool_size: int
    n_batches: int
    n_rows: int
    energy_ci_low: float
    energy_ci_high: float
    enrichment_ci_low: float
    enrichment_ci_high: float
    control_band_low: float
    control_band_high: float
    interval: str
    confidence: float
    n_replicates: int
    n_replicates_kept: int
    seed: int
    p_value_controls: str = "complement"
    p_value_complement: float = float("nan")


def _norm_ppf(p: Any) -> Any:
    from scipy.special import ndtri

    return ndtri(p)


def _norm_cdf(x: Any) -> Any:
    from scipy.special import ndtr

    return ndtr(x)


def _expanded_alpha(confidence: float, n_units: int) -> float:
    """Tail probability of Hesterberg's *expanded* percentile interval.

    The tail is ``Phi(-sqrt(n/(n-1)) t_{n-1, 1-a})`` (Hesterberg 2015, "What teachers should know
    about the bootstrap", sec. 5.4).

    The plain percentile interval is too narrow for few resampling units (its variance is
    ``(n-1)/n`` of the unbiased one, and it uses normal instead of t quantiles: about 93.7%
    coverage of a nominal 95% with n = 32 well-behaved units); this widens it to first order.
    """
    from scipy.special import stdtrit  # Student t quantile (scipy.stats costs seconds to import)

    a = (1 - confidence) / 2
    n = max(int(n_units), 2)
    return float(_norm_cdf(-np.sqrt(n / (n - 1)) * stdtrit(n - 1, 1 - a)))


def _percentile(rep: np.ndarray, tail: float) -> tuple[float, float]:
    rep = rep[np.isfinite(rep)]
    if rep.size < 2:
        return float("nan"), float("nan")
    lo, hi = np.quantile(rep, [tail, 1 - tail])
    return float(lo), float(hi)


def _bca(rep: np.ndarray, theta: float, jack: np.ndarray, tail: float) -> tuple[float, float]:
    """BCa interval (Efron 1987) of the replicates ``rep`` around the point estimate ``theta``.

    The bias correction comes from the replicates, the acceleration from the leave-one-batch-out
    jackknife values ``jack``.
    """
    rep = rep[np.isfinite(rep)]
    if rep.size < 2 or not np.isfinite(theta):
        return float("nan"), float("nan")
    frac = (np.sum(rep < theta) + 0.5 * np.sum(rep == theta)) / rep.size
    frac = min(max(frac, 0.5 / rep.size), 1 - 0.5 / rep.size)
    z0 = float(_norm_ppf(frac))
    jack = jack[np.isfinite(jack)]
    diff = np.mean(jack) - jack if jack.size >= 2 else np.zeros(1)
    den = 6.0 * float(np.sum(diff**2)) ** 1.5
    acc = float(np.sum(diff**3)) / den if den > 0 else 0.0
    out = []
    for z in (float(_norm_ppf(tail)), float(_norm_ppf(1 - tail))):
        adj = float(_norm_cdf(z0 + (z0 + z) / (1 - acc * (z0 + z))))
        out.append(float(np.quantile(rep, min(max(adj, 0.0), 1.0))))
    return out[0], out[1]


def batch_control_test(
    be: BatchEnergies,
    *,
    n_controls: int = 20,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    interval: str = "bootstrap",
    oracle: float | None = None,
) -> BatchControlTestResult:
    """Control test with an interval that covers, from per-batch scalars (:func:`batch_energies`).

    Args:
        be: per-batch energies of the tested subspace and a control pool of size K.
        n_controls: controls used by the point estimate (the first ``n_controls`` of the pool,
            so the p-value floor is ``1 / (1 + n_controls)``) and redrawn in every replicate;
            needs ``n_controls <= K``.
        n_boot: replicates for ``"bootstrap"`` and ``"bca"`` (at least 2; ignored by
            ``"jackknife"``, which uses one leave-one-batch-out value per batch).
        confidence: two-sided confidence level in (0, 1).
        seed: seed of the replicates (batch resampling and control redraws).
        interval:
            - ``"bootstrap"``: expanded percentile interval (percentiles at Hesterberg's
              small-sample tail ``Phi(-sqrt(B/(B-1)) t_{B-1})`` instead of ``(1-confidence)/2``);
              each replicate resamples B batches with replacement and draws ``n_controls``
              controls from the pool with replacement, then recomputes energy and enrichment on
              the resampled batches. The enrichment replicates are shifted by (point estimate -
              whole-pool enrichment), so the point's own control draw counts as error.
            - ``"bca"``: the same replicates, bias-corrected and accelerated (acceleration from the
              leave-one-batch-out jackknife of the point estimate).
            - ``"studentized"``: bootstrap-t on the log scale (the same resampled batches and
              redrawn controls, each replicate studentized by its own delta-method standard
              error of the log ratio): keeps coverage where per-batch ratios are heavy tailed
              (see :mod:`tangentlab.measure.tails`).
            - ``"jackknife"``: leave-one-batch-out standard error, plus (for the enrichment) the
              control-draw variance ``(E_T / m_N^2)^2 var_pool(E_N) / n_controls``; the interval
              is the estimate plus or minus Student's t quantile with B - 1 degrees of freedom.
        oracle: the top-r eigen-energy of the overall moment matrix (e.g. :func:`oracle_energy`),
            which per-batch scalars cannot give; NaN when omitted.

    The p-value comes from the full-space controls (``be.full``) when the record holds at least
    ``n_controls`` of them, else from the complement pool (see :class:`BatchControlTestResult`).

    Resampling units are batches, so the interval is only as good as the number of batches:
    use at least 32 (see the coverage simulation in :mod:`tangentlab.validate`).
    """
    if not isinstance(be, BatchEnergies):
        raise ValidationError(
            f"be must be a BatchEnergies (from batch_energies), not {type(be).__name__}"
        )
    n_controls = check_positive_int(n_controls, "n_controls")
    if n_controls > be.pool_size:
        raise ValidationError(
            f"n_controls={n_controls} exceeds the control pool of {be.pool_size}; build a larger "
            "pool (e.g. 200 controls) or ask for fewer"
        )
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    if interval not in _INTERVALS:
        raise ValidationError(f"interval must be one of {_INTERVALS}, got {interval!r}")
    B = be.n_batches
    if B < 2:
        raise InsufficientSamplesError(
            f"an interval over batches needs at least 2 batches, got {B}; pass more batches"
        )
    tot = float(be.trace.sum())
    if not tot > 0:
        raise ValidationError("the batches' total trace is not positive (were all rows zero?)")
    r, d = be.r, be.d
    energy = float(be.tangent.sum() / tot)
    ctrl_e = be.controls[:, :n_controls].sum(0) / tot
    control_mean = float(ctrl_e.mean())
    enrichment = energy / control_mean if control_mean > 0 else float("inf")
    p_complement = (1 + int(np.sum(ctrl_e >= energy))) / (1 + n_controls)
    if be.full_size >= n_controls:
        full_e = be.full[:, :n_controls].sum(0) / tot
        p_value, p_kind = (1 + int(np.sum(full_e >= energy))) / (1 + n_controls), "full"
    else:
        p_value, p_kind = p_complement, "complement"
    baseline = r / d
    orc = float("nan") if oracle is None else float(oracle)
    gap = orc - baseline
    position = (energy - baseline) / gap if np.isfinite(gap) and gap > 1e-12 else float("nan")

    rng = np.random.default_rng([int(seed), 20261202])
    if interval == "studentized":
        n_boot = check_positive_int(n_boot, "n_boot", minimum=2)
        e_lo, e_hi, q_lo, q_hi = _studentized(be, n_controls, n_boot, confidence, rng)
        n_rep = n_boot
        kept = n_boot if np.isfinite(q_lo) and np.isfinite(e_lo) else 0
    elif interval in ("bootstrap", "bca"):
        n_boot = check_positive_int(n_boot, "n_boot", minimum=2)
        e_rep = np.empty(n_boot)
        q_rep = np.empty(n_boot)
        chunk = max(1, min(n_boot, 2_000_000 // max(1, B * be.pool_size)))
        for start in range(0, n_boot, chunk):
            m = min(chunk, n_boot - start)
            draws = rng.integers(0, B, size=(m, B)) + B * np.arange(m)[:, None]
            W = np.bincount(draws.ravel(), minlength=m * B).reshape(m, B).astype(np.float64)
            idx = rng.integers(0, be.pool_size, size=(m, n_controls))
            num_t = W @ be.tangent
            tots = W @ be.trace
            num_c = W @ be.controls  # (m, K)
            mean_c = np.take_along_axis(num_c, idx, axis=1).mean(1)
            with np.errstate(divide="ignore", invalid="ignore"):
                e_rep[start:start + m] = np.where(tots > 0, num_t / tots, np.nan)
                q_rep[start:start + m] = np.where(mean_c > 0, num_t / mean_c, np.nan)
        n_rep = n_boot
        kept = int(np.sum(np.isfinite(e_rep) & np.isfinite(q_rep)))
        # The replicates' control draws come from the pool, so their enrichment centres on the
        # whole-pool enrichment (the bootstrap world's truth), not on the point estimate, whose
        # own n_controls draw deviates from it. Shift the enrichment replicates by that
        # deviation so that the point's control-draw error is carried into the interval (without
        # the shift a percentile interval over-covers: it centres on the better-informed pool).
        pool_mean = float(be.controls.sum() / be.pool_size)
        q_pool = float(be.tangent.sum()) / pool_mean if pool_mean > 0 else float("nan")
        q_rep = q_rep + (enrichment - q_pool)
        tail = _expanded_alpha(confidence, B)
        if interval == "bootstrap":
            e_lo, e_hi = _percentile(e_rep, tail)
            q_lo, q_hi = _percentile(q_rep, tail)
        else:
            e_jack, q_jack = _jackknife_values(be, n_controls)
            e_lo, e_hi = _bca(e_rep, energy, e_jack, tail)
            q_lo, q_hi = _bca(q_rep, enrichment, q_jack, tail)
    else:
        from scipy.special import stdtrit

        e_jack, q_jack = _jackknife_values(be, n_controls)
        n_rep = B
        kept = int(np.sum(np.isfinite(e_jack) & np.isfinite(q_jack)))
        tq = float(stdtrit(B - 1, 0.5 + confidence / 2))

        def jse(vals: np.ndarray) -> float:
            v = vals[np.isfinite(vals)]
            if v.size < 2:
                return float("nan")
            return float(np.sqrt((v.size - 1) / v.size * np.sum((v - v.mean()) ** 2)))

        se_e = jse(e_jack)
        pool_e = be.controls.sum(0) / tot  # (K,) every pool control on all batches
        var_draw = float(np.var(pool_e, ddof=1)) / n_controls if be.pool_size > 1 else 0.0
        se_q = float(np.sqrt(jse(q_jack) ** 2 + (energy / control_mean**2) ** 2 * var_draw)) \
            if control_mean > 0 else float("nan")
        e_lo, e_hi = energy - tq * se_e, energy + tq * se_e
        q_lo, q_hi = enrichment - tq * se_q, enrichment + tq * se_q

    return BatchControlTestResult(
        energy=energy, controls=ctrl_e, control_mean=control_mean,
        enrichment=float(enrichment), p_value=float(p_value), baseline=baseline, oracle=orc,
        position=float(position), rank=r, dim=d, n_controls=n_controls,
        pool_size=be.pool_size, n_batches=B, n_rows=int(be.rows.sum()),
        energy_ci_low=float(e_lo), energy_ci_high=float(e_hi),
        enrichment_ci_low=float(q_lo), enrichment_ci_high=float(q_hi),
        control_band_low=float(ctrl_e.min()), control_band_high=float(ctrl_e.max()),
        interval=interval, confidence=float(confidence), n_replicates=int(n_rep),
        n_replicates_kept=kept, seed=int(seed), p_value_controls=p_kind,
        p_value_complement=float(p_complement),
    )


def _jackknife_values(be: BatchEnergies, n_controls: int) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-batch-out energy and enrichment (point controls: the first ``n_controls``)."""
    t = be.tangent.sum() - be.tangent
    tr = be.trace.sum() - be.trace
    c = (be.controls[:, :n_controls].sum() - be.controls[:, :n_controls].sum(1)) / n_controls
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(tr > 0, t / tr, np.nan)
        q = np.where(c > 0, t / c, np.nan)
    return e, q

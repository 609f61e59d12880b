"""Simulation studies: the protocol's statistics fed with streams whose truth is known.

Each study calls the *same* functions the empirical protocol uses
(:func:`~tangentlab.measure.batch_energies`, :func:`~tangentlab.measure.batch_control_test`,
:mod:`tangentlab.measure.geometry`) and returns a frozen record of what it measured.
:mod:`tangentlab.validate.battery` turns them into checks. The causal rows are calibrated by the
end-to-end battery (:mod:`tangentlab.validate.end_to_end`), whose scenarios run the real
dose-matched test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "CoverageStudy",
    "coverage_study",
    "CalibrationStudy",
    "calibration_study",
    "FrequencyNullStudy",
    "frequency_null_study",
]


def _se(x: np.ndarray) -> float:
    """Standard error of the mean of ``x`` (sd with ddof 1 / sqrt(size)); NaN below 2 values."""
    return float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")


def _record(obj) -> dict[str, Any]:
    out = {}
    for k, v in asdict(obj).items():
        out[k] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


# -- interval coverage ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CoverageStudy:
    """Coverage of the true energy and enrichment by nominal ``confidence`` intervals.

    ``coverage_*`` are the fractions of ``n_sims`` simulations whose interval held the truth;
    ``old_coverage_*`` the same for the previous method (percentile bootstrap over
    ``old_batches`` batches, controls held fixed: :func:`~tangentlab.measure.control_test`), or
    NaN when it was not run. ``miss_low_*`` counts truths below the interval.
    """

    n_sims: int
    n_batches: int
    interval: str
    confidence: float
    true_energy: float
    true_enrichment: float
    coverage_energy: float
    coverage_enrichment: float
    miss_low_enrichment: float
    mean_width_enrichment: float
    replicates_dropped: int
    old_batches: int
    old_coverage_energy: float
    old_coverage_enrichment: float
    d: int
    r: int
    tail_sigma: float = 0.0
    median_ratio_cv: float = float("nan")
    miss_high_enrichment: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict for JSON (arrays become lists)."""
        return _record(self)


def coverage_study(*, n_sims: int, n_batches: int = 32, windows_per_batch: int = 4,
                   rows_per_window: int = 32, d: int = 32, r: int = 2, signal: float = 1.0,
                   context: float = 0.5, scale_sigma: float = 0.3, spectrum_sigma: float = 0.8,
                   n_controls: int = 20, pool: int = 200, n_boot: int = 1000,
                   interval: str = "studentized", confidence: float = 0.95, old_batches: int = 0,
                   tail_sigma: float = 0.0, seed: int = 0) -> CoverageStudy:
    """Simulate ``n_sims`` measurements of one gradient model with a known enrichment.

    The model (:func:`~tangentlab.validate.streams.make_gradient_model`) is fixed; every
    simulation draws fresh batches (``windows_per_batch`` windows of ``rows_per_window`` rows,
    each window with its own shared context, each batch with its own scale) and a fresh control
    pool (:func:`~tangentlab.measure.normal_controls`). The truth is the enrichment against Haar
    controls of the complement, ``E_T (d - r) / (r (1 - E_T))``.

    ``tail_sigma > 0``: heavy-tailed batches instead
    (:func:`~tangentlab.validate.streams.heavy_tail_batches`: the planted ``signal`` varies by
    batch with a log-normal weight of log-sd ``tail_sigma``); ``median_ratio_cv`` is the median
    over simulations of :func:`~tangentlab.measure.tails.ratio_cv`, the number a real run stores
    as its ``ratio_cv`` row, and ``miss_high_enrichment`` the share of truths above the interval.
    """
    from tangentlab.measure import (
        batch_control_test,
        batch_energies,
        control_test,
        normal_controls,
        outer_product_sum,
    )
    from tangentlab.measure.tails import ratio_cv
    from tangentlab.validate.streams import (
        heavy_tail_batches,
        heavy_tail_second_moment,
        make_gradient_model,
        true_enrichment,
    )

    tails = tail_sigma > 0
    gm = make_gradient_model(d, r, signal=0.0 if tails else signal, context=context,
                             scale_sigma=scale_sigma, spectrum_sigma=spectrum_sigma,
                             seed=[seed, 0])
    eT, qT = true_enrichment(gm.Q, heavy_tail_second_moment(gm, signal) if tails
                             else gm.second_moment())
    cvs = []
    high_q = 0
    hit_e = hit_q = low_q = 0
    width = 0.0
    dropped = 0
    old_e = old_q = 0
    nb = max(n_batches, old_batches)
    for s in range(int(n_sims)):
        if tails:
            bs = heavy_tail_batches(gm, nb, rows_per_window, signal=signal,
                                    tail_sigma=tail_sigma, seed=[seed, 1, s],
                                    windows_per_batch=windows_per_batch)
        else:
            bs = gm.batches(nb, rows_per_window, seed=[seed, 1, s],
                            windows_per_batch=windows_per_batch)
        ctrl = normal_controls(gm.Q, pool, seed=int(np.random.default_rng([seed, 2, s])
                                                      .integers(2**31)))
        be = batch_energies(gm.Q, ctrl, bs[:n_batches])
        res = batch_control_test(be, n_controls=n_controls, n_boot=n_boot,
                                 confidence=confidence, seed=s, interval=interval)
        hit_e += res.energy_ci_low <= eT <= res.energy_ci_high
        hit_q += res.enrichment_ci_low <= qT <= res.enrichment_ci_high
        low_q += qT < res.enrichment_ci_low
        high_q += qT > res.enrichment_ci_high
        cvs.append(ratio_cv(be))
        width += res.enrichment_ci_high - res.enrichment_ci_low
        dropped += res.n_replicates - res.n_replicates_kept
        if old_batches:
            ob = bs[:old_batches]
            sums = np.stack([outer_product_sum(b) for b in ob])
            C = sums.sum(0) / sum(len(b) for b in ob)
            old = control_test(gm.Q, C, n_controls=n_controls, seed=s, batches=sums, n_boot=200,
                               confidence=confidence)
            old_e += old.energy_ci_low <= eT <= old.energy_ci_high
            old_q += old.enrichment_ci_low <= qT <= old.enrichment_ci_high
    n = int(n_sims)
    nan = float("nan")
    return CoverageStudy(
        n_sims=n, n_batches=n_batches, interval=interval, confidence=confidence,
        true_energy=eT, true_enrichment=qT, coverage_energy=hit_e / n,
        coverage_enrichment=hit_q / n, miss_low_enrichment=low_q / n,
        mean_width_enrichment=width / n, replicates_dropped=int(dropped),
        old_batches=int(old_batches),
        old_coverage_energy=old_e / n if old_batches else nan,
        old_coverage_enrichment=old_q / n if old_batches else nan, d=d, r=r,
        tail_sigma=float(tail_sigma), median_ratio_cv=float(np.median(cvs)),
        miss_high_enrichment=high_q / n,
    )


# -- power and null calibration ------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationStudy:
    """How often the control test declares enrichment: power (signal > 0) or false positives.

    A simulation "finds" enrichment when ``p <= alpha`` *and* the enrichment interval's lower end
    is above 1 (``found_rate``); ``p_rate`` counts ``p <= alpha`` alone (the false-positive rate
    of the p-value). ``p_values`` ``(n_sims,)`` are kept for the calibration figure.
    """

    n_sims: int
    signal: float
    control_space: str
    alpha: float
    found_rate: float
    p_rate: float
    mean_enrichment: float
    mean_proxy_angle_deg: float
    p_values: np.ndarray
    d: int
    r: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict for JSON (arrays become lists)."""
        return _record(self)


def calibration_study(*, n_sims: int, signal: float, d: int = 64, m: int = 3,
                      n_batches: int = 32, windows_per_batch: int = 4, rows_per_window: int = 32,
                      context: float = 0.5, scale_sigma: float = 0.3, spectrum_sigma: float = 0.8,
                      n_controls: int = 20, pool: int = 60, n_boot: int = 200,
                      control_space: str = "full", alpha: float = 0.05,
                      fit_windows: int = 64, seed: int = 0) -> CalibrationStudy:
    """Fit Q_T on token-model activations, then test gradients with a planted tangent signal.

    Per simulation: Zipf tokens on an m-sphere patch in R^d, in windows with shared context
    (:func:`~tangentlab.validate.streams.token_windows`); Q_T = top-m PCA of these activations
    (:func:`~tangentlab.measure.make_proxy`). Gradients come in ``n_batches`` checkpoint-like
    batches (:class:`~tangentlab.validate.streams.GradientModel`, a fresh random anisotropy
    every simulation) with ``signal`` extra variance per direction of the manifold's *true*
    tangent (0: the null, where Q_T is unrelated to the gradients). The enrichment always
    divides by matched-rank complement controls (:func:`~tangentlab.measure.normal_controls`);
    ``control_space`` names the controls of the p-value: ``"full"`` (the protocol's since issue
    18: :func:`~tangentlab.measure.full_space_controls`, exchangeable with Q_T under the null, at
    every r/d) or ``"complement"`` (the old protocol's, anti-conservative at large r/d).
    """
    from tangentlab.measure import (
        batch_control_test,
        batch_energies,
        full_space_controls,
        make_proxy,
        normal_controls,
        principal_angles,
    )
    from tangentlab.validate.streams import make_gradient_model, token_windows

    if control_space not in ("complement", "full"):
        from tangentlab.errors import ValidationError

        raise ValidationError(f"control_space must be 'complement' or 'full', got {control_space!r}")
    found = hits = 0
    enr = 0.0
    ang = 0.0
    pv = np.empty(int(n_sims))
    for s in range(int(n_sims)):
        tw = token_windows(d=d, m=m, n_types=200, zipf_s=1.0, pin_alpha=0.3, t0=0.05,
                           n_windows=fit_windows, window=64, context=0.05, noise=0.05,
                           patch_radius=0.5, seed=[seed, 10, s])
        Q = make_proxy("pca", n_components=m).fit(tw.H).basis()
        ang += float(np.degrees(principal_angles(Q, tw.tangent).max()))
        gm = make_gradient_model(d, m, signal=signal, context=context, scale_sigma=scale_sigma,
                                 spectrum_sigma=spectrum_sigma, seed=[seed, 11, s], Q=tw.tangent)
        bs = gm.batches(n_batches, rows_per_window, seed=[seed, 12, s],
                        windows_per_batch=windows_per_batch)
        cseed = int(np.random.default_rng([seed, 13, s]).integers(2**31))
        full = full_space_controls(Q, pool, cseed) if control_space == "full" else None
        be = batch_energies(Q, normal_controls(Q, pool, cseed), bs, full_controls=full)
        res = batch_control_test(be, n_controls=n_controls, n_boot=n_boot, seed=s)
        pv[s] = res.p_value
        hits += res.p_value <= alpha
        found += res.p_value <= alpha and res.enrichment_ci_low > 1
        enr += res.enrichment
    n = int(n_sims)
    return CalibrationStudy(n_sims=n, signal=float(signal), control_space=control_space,
                            alpha=alpha, found_rate=found / n, p_rate=hits / n,
                            mean_enrichment=enr / n, mean_proxy_angle_deg=ang / n, p_values=pv,
                            d=d, r=m)


# -- frequency-spread null -----------------------------------------------------------------------


@dataclass(frozen=True)
class FrequencyNullStudy:
    """Spearman rho(log frequency, spread) when spread does not depend on frequency.

    ``rho_fair`` ``(n_sims,)``: one occurrence per window, then equal-size k-subsamples (the
    corrected statistic); ``rho_first_k``: each token's first k rows in row order (the old rule).
    ``se_*``: standard errors over simulations (sd with ddof 1 / sqrt(n_sims); NaN below 2).
    """

    n_sims: int
    k: int
    mean_tokens: float
    rho_fair: np.ndarray
    rho_first_k: np.ndarray
    mean_abs_rho_fair: float
    mean_rho_fair: float
    se_rho_fair: float
    mean_rho_first_k: float
    se_abs_rho_fair: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict for JSON (arrays become lists)."""
        return _record(self)


def frequency_null_study(*, n_sims: int, n_types: int = 3000, n_windows: int = 500,
                         window: int = 128, d: int = 32, k: int = 4, context: float = 0.1,
                         seed: int = 0) -> FrequencyNullStudy:
    """Simulate the frequency-spread null: token spread that does not depend on frequency.

    This is the null toy of issue 10, item 1: pin_alpha = 0 (every token has spread t0 = 0.1) and
    each window adds a shared context offset ``N(0, context^2 I_d)``.
    """
    from tangentlab.measure.geometry import (
        correlation_with_ci,
        equal_size_spread,
        first_k_indices,
        one_per_window,
    )
    from tangentlab.validate.streams import token_windows

    fair = np.empty(int(n_sims))
    first = np.empty(int(n_sims))
    ntok = 0
    for s in range(int(n_sims)):
        tw = token_windows(d=d, m=2, n_types=n_types, zipf_s=1.0, pin_alpha=0.0, t0=0.1,
                           n_windows=n_windows, window=window, context=context, noise=0.02,
                           patch_radius=0.5, seed=[seed, 20, s])
        logf = np.log(tw.frequencies)
        j = one_per_window(tw.token_ids, tw.window_ids, seed=[seed, 21, s])
        t, sp = equal_size_spread(tw.H[j], tw.token_ids[j], k, seed=[seed, 22, s])
        ntok += t.size
        fair[s] = correlation_with_ci(logf[t], sp, n_boot=2, seed=s)["spearman"][0]
        i = first_k_indices(tw.token_ids, k)
        t, sp = equal_size_spread(tw.H[i], tw.token_ids[i], k, seed=[seed, 23, s])
        first[s] = correlation_with_ci(logf[t], sp, n_boot=2, seed=s)["spearman"][0]
    n = int(n_sims)
    return FrequencyNullStudy(
        n_sims=n, k=k, mean_tokens=ntok / n, rho_fair=fair, rho_first_k=first,
        mean_abs_rho_fair=float(np.mean(np.abs(fair))), mean_rho_fair=float(fair.mean()),
        se_rho_fair=_se(fair),
        mean_rho_first_k=float(first.mean()), se_abs_rho_fair=_se(np.abs(fair)),
    )

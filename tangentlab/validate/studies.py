"""Simulation studies: the protocol's statistics fed with streams whose truth is known.

Each study calls the *same* functions the empirical protocol uses
(:func:`~tangentlab.measure.batch_energies`, :func:`~tangentlab.measure.batch_control_test`,
:mod:`tangentlab.measure.geometry`, :mod:`tangentlab.measure.controls`) and returns a frozen record
of what it measured. :mod:`tangentlab.validate.battery` turns them into checks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "CoverageStudy",
    "coverage_study",
]


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

    def to_dict(self) -> dict[str, Any]:
        return _record(self)


def coverage_study(*, n_sims: int, n_batches: int = 32, windows_per_batch: int = 4,
                   rows_per_window: int = 32, d: int = 32, r: int = 2, signal: float = 1.0,
                   context: float = 0.5, scale_sigma: float = 0.3, spectrum_sigma: float = 0.8,
                   n_controls: int = 20, pool: int = 200, n_boot: int = 1000,
                   interval: str = "bootstrap", confidence: float = 0.95, old_batches: int = 0,
                   seed: int = 0) -> CoverageStudy:
    """Simulate ``n_sims`` measurements of one gradient model with a known enrichment.

    The model (:func:`~tangentlab.validate.streams.make_gradient_model`) is fixed; every
    simulation draws fresh batches (``windows_per_batch`` windows of ``rows_per_window`` rows,
    each window with its own shared context, each batch with its own scale) and a fresh control
    pool (:func:`~tangentlab.measure.normal_controls`). The truth is the enrichment against Haar
    controls of the complement, ``E_T (d - r) / (r (1 - E_T))``.
    """
    from tangentlab.measure import (
        batch_control_test,
        batch_energies,
        control_test,
        normal_controls,
        outer_product_sum,
    )
    from tangentlab.validate.streams import make_gradient_model, true_enrichment

    gm = make_gradient_model(d, r, signal=signal, context=context, scale_sigma=scale_sigma,
                             spectrum_sigma=spectrum_sigma, seed=[seed, 0])
    eT, qT = true_enrichment(gm.Q, gm.second_moment())
    hit_e = hit_q = low_q = 0
    width = 0.0
    dropped = 0
    old_e = old_q = 0
    nb = max(n_batches, old_batches)
    for s in range(int(n_sims)):
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
    )

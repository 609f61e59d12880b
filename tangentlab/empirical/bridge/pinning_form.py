"""Is the spread a power law of rank? The curvature of log spread against log rank (issue 36).

The closed forms take one pinning law, ``t_r ∝ r^β`` over every rank. Pinning concentrated in
the most frequent tokens bends that line: on the default decoder an independent fit gave
β = 0.17 over the 98 most frequent tokens and 0.08 over 657. :func:`power_law_curvature` tests
the form on the per-token spreads a pinning fit already has
(:class:`~tangentlab.measure.pinning.PinningFit` ``ranks``, ``spreads``): the least-squares fit

    log t = a + b x + c x²,    x = log r − mean(log r)

has ``c = 0`` under one power law; ``c < 0`` where the slope flattens with rank (pinning in the
head), ``c > 0`` where it steepens. The interval resamples tokens (a pairs bootstrap, robust to
residuals whose spread changes with rank); a power law is rejected at ``confidence`` when the
interval excludes 0. The slopes over the head and the tail (tokens below and above the median
log rank) are returned beside it, as a description.

Example::

    >>> import numpy as np
    >>> from tangentlab.empirical.bridge.pinning_form import power_law_curvature
    >>> r = np.arange(1, 401, dtype=float)
    >>> noise = np.random.default_rng(0).normal(0, 0.1, r.size)
    >>> bent = power_law_curvature(r, np.exp(0.2 * np.log(r) - 0.03 * np.log(r) ** 2 + noise))
    >>> bool(bent.ci_high < 0)
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from tangentlab.errors import InsufficientSamplesError, ValidationError

__all__ = ["MIN_TOKENS", "POWER_LAW_REJECTED", "PowerLawCurvature", "power_law_curvature",
           "curvature_row"]

#: Tokens a curvature fit needs (three coefficients, and a head and a tail of five each).
MIN_TOKENS = 10
#: The note a ``pinning_curvature`` row carries when one power law is rejected (the report's
#: findings list reads it: ``report.theory_numbers.POWER_LAW_REJECTED``, the same words).
POWER_LAW_REJECTED = "one power law rejected"


@dataclass(frozen=True)
class PowerLawCurvature:
    """Result of :func:`power_law_curvature`.

    Attributes:
        curvature: ``c``, the coefficient of ``x²`` (0 under one power law).
        ci_low, ci_high: its percentile bootstrap interval (tokens resampled) at ``confidence``.
        slope_head, slope_tail: the OLS slope of log spread on log rank over the tokens at or
            below, and above, the median log rank.
        n_tokens: tokens in the fit; confidence: the interval's level.
        replicates: bootstrap replicates of ``c`` ``(n_boot,)``.
    """

    curvature: float
    ci_low: float
    ci_high: float
    slope_head: float
    slope_tail: float
    n_tokens: int
    confidence: float
    replicates: np.ndarray = field(repr=False)

    @property
    def power_law_rejected(self) -> bool:
        """Whether the interval excludes 0 (one power law does not describe the spreads).

        False where the interval is not finite (fewer than 2 bootstrap fits): no evidence.
        """
        finite = np.isfinite(self.ci_low) and np.isfinite(self.ci_high)
        return bool(finite and not (self.ci_low <= 0.0 <= self.ci_high))


def _quadratic(x: np.ndarray, y: np.ndarray) -> float:
    """The ``x²`` coefficient of the least-squares quadratic through (x, y)."""
    X = np.column_stack([np.ones_like(x), x, x * x])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return float(coef[2])


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    xc = x - x.mean()
    return float(xc @ (y - y.mean()) / (xc @ xc)) if xc @ xc > 0 else float("nan")


def power_law_curvature(ranks: ArrayLike, spreads: ArrayLike, *, n_boot: int = 200,
                        confidence: float = 0.95, seed: int = 0) -> PowerLawCurvature:
    """Test ``t_r ∝ r^β`` on per-token ranks ``(t,)`` (1 = most frequent) and spreads ``(t,)``.

    Raises ValidationError for mismatched shapes, a rank below 1, a spread that is not positive
    and finite, or ``confidence`` outside (0, 1); InsufficientSamplesError below
    :data:`MIN_TOKENS` tokens or with fewer than 3 distinct ranks.
    """
    r = np.asarray(ranks, dtype=np.float64).ravel()
    t = np.asarray(spreads, dtype=np.float64).ravel()
    if r.shape != t.shape:
        raise ValidationError(f"ranks and spreads need one value per token; got {r.size} ranks "
                              f"and {t.size} spreads")
    if r.size and (not np.all(np.isfinite(r)) or r.min() < 1):
        raise ValidationError("ranks must be finite and >= 1 (1 = the most frequent token)")
    if r.size and (not np.all(np.isfinite(t)) or t.min() <= 0):
        raise ValidationError("spreads must be positive and finite (a log is taken)")
    if not 0.0 < confidence < 1.0:
        raise ValidationError(f"confidence must lie in (0, 1); got {confidence}")
    if r.size < MIN_TOKENS or np.unique(r).size < 3:
        raise InsufficientSamplesError(f"a power-law curvature fit needs {MIN_TOKENS} tokens "
                                       f"with at least 3 distinct ranks; got {r.size} tokens")
    x = np.log(r)
    x = x - x.mean()
    y = np.log(t)
    c = _quadratic(x, y)
    rng = np.random.default_rng([int(seed), 36])
    reps = np.full(max(int(n_boot), 0), np.nan)
    for b in range(reps.size):
        j = rng.integers(0, r.size, size=r.size)
        if np.unique(x[j]).size >= 3:
            reps[b] = _quadratic(x[j], y[j])
    ok = reps[np.isfinite(reps)]
    a = (1.0 - confidence) / 2.0
    lo, hi = (np.quantile(ok, [a, 1.0 - a]) if ok.size >= 2 else (np.nan, np.nan))
    head = x <= np.median(x)
    return PowerLawCurvature(curvature=c, ci_low=float(lo), ci_high=float(hi),
                             slope_head=_slope(x[head], y[head]),
                             slope_tail=_slope(x[~head], y[~head]), n_tokens=int(r.size),
                             confidence=float(confidence), replicates=reps)


def curvature_row(fit, kind: str, why: str, *, n_boot: int, confidence: float,
                  seed: int) -> dict[str, Any]:
    """The ``pinning_curvature_KIND`` input row of ``bridge.csv`` for a pinning fit.

    ``fit``: a :class:`~tangentlab.measure.pinning.PinningFit` (its per-token ranks and
    spreads), or None where the pinning fit itself failed; ``why``: the reason the fit is not
    trusted or failed ("" when it is trusted), which the row carries instead of a number. A
    fit the test cannot run, or whose interval has fewer than 2 bootstrap fits, is not
    measurable, with the reason.
    """
    from tangentlab.empirical.bridge.rows import bridge_row

    f = None
    if fit is None:
        why = why or "the pinning fit failed"
    if not why:
        try:
            f = power_law_curvature(fit.ranks, fit.spreads, n_boot=n_boot,
                                    confidence=confidence, seed=seed)
        except (InsufficientSamplesError, ValidationError) as exc:
            why = str(exc)
    if f is not None and not (np.isfinite(f.ci_low) and np.isfinite(f.ci_high)):
        why, f = "fewer than 2 bootstrap fits of the curvature succeeded (no interval)", None
    note = ("c of log t = a + b x + c x², x = log rank centred: 0 under one power law, < 0 where "
            "the slope flattens with rank" + ("" if f is None else
            f"; slope {f.slope_head:.3g} over the head, {f.slope_tail:.3g} over the tail"
            f"{'; ' + POWER_LAW_REJECTED if f.power_law_rejected else ''}"))
    return bridge_row(f"pinning_curvature_{kind}", "input", measured=why or (
        f.curvature, f.ci_low, f.ci_high), n=None if fit is None else fit.n_tokens, note=note)

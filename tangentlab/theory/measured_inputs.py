"""The closed forms evaluated at measured inputs, with propagated intervals (issue 20, item 4).

The theory's ``frequency-attenuation`` and ``curvature-visibility`` closed forms at inputs a
measurement supplies (the fits of s, beta, ‖II‖², m from :mod:`tangentlab.measure`, read as plain
numbers and replicates). It is theory (issue 34, item 5): it imports no measure, synthetic or
empirical module, so empirical's bridge modules reach it without touching synthetic.

- :func:`predict_attenuation`: ``attenuation(s, alpha = beta / s, V)`` from a Zipf fit and a
  pinning fit;
- :func:`predict_bucket_visibility`: per frequency bucket (a rank range), the type-pooled
  visibility of the bucket's tokens, ``sum_r t_r² V_r / sum_r t_r²`` with ``V_r`` the theory's
  ``visibility_by_rank`` (pooled normal over pooled tangent variance; ``t_r² ∝ r^(2 beta)``).

**Intervals**: each input carries bootstrap replicates (``fit.replicates`` for s and beta;
:class:`Measured` for any other input, e.g. ‖II‖² with a normal approximation). Replicate b of
the prediction uses replicate b of every input, so the prediction's percentile interval carries
all their uncertainty. The replicates of s resample *documents*; those of beta resample tokens
(see :mod:`tangentlab.measure.pinning`); the inputs' bootstraps are independent of each other.

Example::

    >>> import numpy as np
    >>> from tangentlab.theory.measured_inputs import Measured, predict_attenuation
    >>> s = Measured(1.0, np.full(50, 1.0)); beta = Measured(0.3, np.full(50, 0.3))
    >>> p = predict_attenuation(s, beta, n_types=100)
    >>> bool(p.value < 1 and p.ci_low == p.ci_high == p.value)
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tangentlab.errors import ValidationError
from tangentlab.theory.attenuation import attenuation, visibility_by_rank

__all__ = ["Measured", "Prediction", "measured", "predict_attenuation",
           "predict_bucket_visibility"]


@dataclass(frozen=True)
class Measured:
    """A measured input: its point value and bootstrap replicates ``(B,)``."""

    value: float
    replicates: np.ndarray = field(repr=False)

    @staticmethod
    def normal(value: float, se: float, n: int, seed: int = 0) -> Measured:
        """Replicates from a normal approximation ``N(value, se²)`` (for delta-method inputs)."""
        rng = np.random.default_rng(seed)
        return Measured(float(value), float(value) + float(se) * rng.standard_normal(int(n)))


def measured(fit: Any, attr: str) -> Measured:
    """A fit's point value and bootstrap replicates as a :class:`Measured` input.

    ``measured(zipf_fit, "s")`` or ``measured(pinning_fit, "beta")``.
    """
    return Measured(float(getattr(fit, attr)), np.asarray(fit.replicates, dtype=np.float64))


@dataclass(frozen=True)
class Prediction:
    """A closed-form prediction from measured inputs.

    Attributes:
        quantity: what is predicted; value: at the inputs' point values; ci_low, ci_high:
        percentile interval of the replicates; n_replicates: replicates used (finite ones);
        confidence: the level.
    """

    quantity: str
    value: float
    ci_low: float
    ci_high: float
    n_replicates: int
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict."""
        return dict(self.__dict__)


def _paired(inputs: list[Measured]) -> int:
    n = min(x.replicates.size for x in inputs)
    if n < 2:
        raise ValidationError("every measured input needs at least 2 bootstrap replicates")
    return n


def _interval(quantity: str, value: float, reps: np.ndarray, confidence: float) -> Prediction:
    reps = reps[np.isfinite(reps)]
    a = (1 - confidence) / 2
    lo, hi = (np.quantile(reps, [a, 1 - a]) if reps.size >= 2 else (np.nan, np.nan))
    return Prediction(quantity, float(value), float(lo), float(hi), int(reps.size),
                      float(confidence))


def predict_attenuation(s: Measured, beta: Measured, n_types: int, *,
                        confidence: float = 0.95) -> Prediction:
    """Predicted attenuation ``A(s, alpha = beta / s, V)`` with a propagated interval.

    Replicates with ``beta < 0`` are clipped to ``beta = 0`` (the closed form needs
    ``alpha >= 0``; ``A = 1`` there).
    """
    n = _paired([s, beta])
    sv = np.r_[s.value, s.replicates[:n]]
    bv = np.maximum(np.r_[beta.value, beta.replicates[:n]], 0.0)
    ok = sv > 0
    out = np.full(sv.size, np.nan)
    out[ok] = attenuation(sv[ok], bv[ok] / sv[ok], int(n_types))
    return _interval("attenuation", out[0], out[1:], confidence)


def predict_bucket_visibility(ranks: np.ndarray, s: Measured, beta: Measured, t0: Measured,
                              ii_norm_sq: Measured, m: int, n_types: int, *,
                              confidence: float = 0.95) -> Prediction:
    """Predicted type-pooled visibility of the tokens of ``ranks`` ``(b,)`` (one bucket).

    ``sum_r t_r² V_r / sum_r t_r²`` with ``V_r = visibility_by_rank(r, s, alpha, t0, ‖II‖², m,
    V)`` and ``t_r = t0 r^beta``. For one rank it is ``visibility_by_rank`` itself.
    """
    r = np.asarray(ranks, dtype=np.int64).ravel()
    if r.size == 0 or r.min() < 1 or r.max() > n_types:
        raise ValidationError(f"ranks must be a non-empty set in 1..{n_types}")
    n = _paired([s, beta, t0, ii_norm_sq])
    cols = [np.r_[x.value, x.replicates[:n]] for x in (s, beta, t0, ii_norm_sq)]
    out = np.full(n + 1, np.nan)
    for b in range(n + 1):
        sb, bb, tb, ib = (c[b] for c in cols)
        bb = max(bb, 0.0)
        if not (sb > 0 and tb > 0 and ib >= 0):
            continue
        v = visibility_by_rank(r, sb, bb / sb, tb, ib, m, n_types)
        w = r.astype(np.float64) ** (2 * bb)
        out[b] = float(np.sum(w * v) / np.sum(w))
    return _interval("bucket_visibility", out[0], out[1:], confidence)

"""The stated rules of the theory-against-measurement table (issue 20): agreement and trust.

Written down before the first run on real activations (``docs/bridge.md``):

- **Agreement** (:func:`agreement`): a predicted value with interval ``[p_lo, p_hi]`` and a measured
  value with interval ``[m_lo, m_hi]`` *agree* when the two intervals overlap **and** the ratio
  predicted / measured lies within ``[1 / TOLERANCE, TOLERANCE]`` (``TOLERANCE = 1.2``: within
  20%); otherwise they *disagree*. When either side is "not measurable here" (or not finite),
  the line reads :data:`NOT_MEASURABLE` and carries no number.
- **Trust** (:func:`trust`): the synthetic calibration (``tangentlab synthetic run
  estimator-calibration``, tables in ``docs/bridge.md``) says where each estimator covers its
  truth. Outside those cells a quantity is written as :data:`NOT_MEASURABLE` with the reason,
  never as a number:

  - ‖II‖²: trusted for a local dimension ``2 <= m <= 32`` in ``64 <= d <= 768``, the calibrated
    range (since issue 36 the estimate is extrapolated across two neighbourhood scales, which
    removed the +4-8% chart bias: 28 of 30 cells trusted; the two others, m = 16 and 32 at
    d = 768 and the larger noise, are noise-dominated, and a per-fit marker or a wide interval
    says so on the data);
  - Zipf s: needs at least :data:`MIN_ZIPF_RANKS` ranks in the fit range;
  - pinning beta: needs at least :data:`MIN_PINNING_TOKENS` tokens in the regression (the
    calibration used 150);
  - visibility and attenuation: the per-token markers of
    :func:`~tangentlab.measure.curvature_stats.local_curvature` (|bias| <= 3% in every calibrated
    cell), and at least :data:`MIN_BUCKET_TOKENS` measurable tokens per pool.

Example::

    >>> from tangentlab.claims.bridge_rules import agreement
    >>> agreement(1.0, 0.9, 1.1, 1.05, 0.95, 1.15)
    'agree'
    >>> agreement(1.0, 0.9, 1.1, 2.0, 1.8, 2.2)
    'disagree'
"""

from __future__ import annotations

import math

__all__ = ["TOLERANCE", "NOT_MEASURABLE", "OUTSIDE_DOMAIN", "AGREEMENT_RULE", "MIN_ZIPF_RANKS",
           "MIN_PINNING_TOKENS", "MIN_BUCKET_TOKENS", "II_TRUSTED_M", "II_TRUSTED_D",
           "agreement", "trust"]

#: The ratio tolerance of the agreement rule: predicted / measured within [1/1.2, 1.2].
TOLERANCE = 1.2
#: What a cell reads where the calibration (or the data) does not allow a number.
NOT_MEASURABLE = "not measurable here"
#: Marks a note whose prediction used beta = 0 because the measured beta was negative (the
#: closed forms need alpha = beta / s >= 0); the report flags those lines' agreement.
OUTSIDE_DOMAIN = "outside the closed form"
#: The agreement rule in words (shown under the report table).
AGREEMENT_RULE = (f"agree: the predicted and measured intervals overlap and predicted/measured "
                  f"lies in [1/{TOLERANCE:g}, {TOLERANCE:g}]; disagree: otherwise; "
                  f"'{NOT_MEASURABLE}': either side is not measurable (calibration or data)")
#: Fewest ranks in the Zipf fit range for s to be reported.
MIN_ZIPF_RANKS = 5
#: Fewest tokens in the pinning regression for beta to be reported.
MIN_PINNING_TOKENS = 20
#: Fewest measurable tokens in a pool (bucket or all) for a pooled visibility.
MIN_BUCKET_TOKENS = 3
#: The local dimensions where the calibration trusts ‖II‖² (inclusive).
II_TRUSTED_M = (2, 32)
#: The ambient dimensions where the calibration trusts ‖II‖² (inclusive: the calibrated range).
II_TRUSTED_D = (64, 768)


def _finite(*xs: float | None) -> bool:
    return all(x is not None and math.isfinite(float(x)) for x in xs)


def agreement(pred: float | None, pred_lo: float | None, pred_hi: float | None,
              meas: float | None, meas_lo: float | None, meas_hi: float | None,
              tolerance: float = TOLERANCE) -> str:
    """``"agree"``, ``"disagree"`` or :data:`NOT_MEASURABLE` by the stated rule (module docstring)."""
    if not _finite(pred, pred_lo, pred_hi, meas, meas_lo, meas_hi):
        return NOT_MEASURABLE
    overlap = max(pred_lo, meas_lo) <= min(pred_hi, meas_hi)
    if meas == 0 or pred == 0:
        close = pred == meas
    else:
        ratio = pred / meas
        close = ratio > 0 and 1.0 / tolerance <= ratio <= tolerance
    return "agree" if overlap and close else "disagree"


def trust(quantity: str, *, m: int | None = None, d: int | None = None,
          n_ranks: int | None = None, n_tokens: int | None = None) -> str:
    """``""`` when the calibration trusts ``quantity`` here, else the reason it is not measurable.

    ``quantity``: ``"ii_norm_sq"``, ``"zipf_s"``, ``"pinning_beta"`` or ``"pooled_visibility"``.
    """
    if quantity == "ii_norm_sq":
        (lo, hi), (d_lo, d_hi) = II_TRUSTED_M, II_TRUSTED_D
        if m is None or d is None or not (lo <= m <= hi and d_lo <= d <= d_hi):
            return (f"the calibration trusts ‖II‖² only for m = {lo}-{hi} in d = {d_lo}-{d_hi} "
                    f"(here m = {m}, d = {d}; docs/bridge.md)")
        return ""
    if quantity == "zipf_s":
        if n_ranks is None or n_ranks < MIN_ZIPF_RANKS:
            return f"the Zipf fit range holds {n_ranks} ranks (< {MIN_ZIPF_RANKS})"
        return ""
    if quantity == "pinning_beta":
        if n_tokens is None or n_tokens < MIN_PINNING_TOKENS:
            return f"{n_tokens} tokens in the pinning regression (< {MIN_PINNING_TOKENS})"
        return ""
    if quantity == "pooled_visibility":
        if n_tokens is None or n_tokens < MIN_BUCKET_TOKENS:
            return f"{n_tokens} measurable tokens in the pool (< {MIN_BUCKET_TOKENS})"
        return ""
    raise KeyError(quantity)

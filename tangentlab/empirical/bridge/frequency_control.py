"""The intrinsic dimension with and without the frequency weighting (issue 36, item 3).

The eval stream samples each token type as often as it occurs, on purpose: the account is about
what frequency does to the geometry. A global dimension estimate (TwoNN) of such a sample is
dominated by the frequent types, so the peers' dimension rows mix the manifold with its
sampling. :func:`dimension_by_type` is the control: TwoNN on one occurrence per token type
(every type weighted alike) against TwoNN on as many occurrences drawn at random from all of
them (weighted by frequency, as the stream is), each redrawn ``draws`` times so that each comes
with the spread of its own draws. A gap between the two is the frequency weighting's share of
the dimension the peers report, not a property of the manifold.

Both read the geometry occurrences of a site (at most one per document and token:
:class:`~tangentlab.empirical.bridge.site_bridge.SiteArrays` ``H``, ``tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from tangentlab.errors import InsufficientSamplesError, ValidationError

__all__ = ["MIN_TYPES", "TypeWeighting", "dimension_by_type", "frequency_control_rows"]

#: Token types the comparison needs (TwoNN wants a few dozen points at least).
MIN_TYPES = 30


@dataclass(frozen=True)
class TypeWeighting:
    """Result of :func:`dimension_by_type`: TwoNN per weighting, over ``draws`` redraws.

    Attributes:
        per_type, per_type_low, per_type_high: one occurrence per type: the median estimate and
            the 2.5% / 97.5% quantiles over the redraws.
        by_frequency, by_frequency_low, by_frequency_high: the same for as many occurrences drawn
            at random from all (frequency-weighted).
        n_points: points per estimate (the number of types); draws: redraws of each.
    """

    per_type: float
    per_type_low: float
    per_type_high: float
    by_frequency: float
    by_frequency_low: float
    by_frequency_high: float
    n_points: int
    draws: int


def _summary(values: list[float]) -> tuple[float, float, float]:
    v = np.asarray(values, dtype=np.float64)
    return float(np.median(v)), float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))


def dimension_by_type(H: ArrayLike, token_ids: ArrayLike, *, draws: int = 10,
                      seed: int = 0) -> TypeWeighting:
    """TwoNN on one occurrence per type against as many frequency-weighted occurrences.

    ``H`` (n, d) occurrences, ``token_ids`` (n,). ValidationError for mismatched shapes or
    ``draws`` < 2; InsufficientSamplesError below :data:`MIN_TYPES` types;
    :class:`~tangentlab.measure.spectrum.OptionalDependencyError` without scikit-dimension.
    """
    from tangentlab.measure.spectrum import intrinsic_dimension

    X = np.asarray(H, dtype=np.float64)
    t = np.asarray(token_ids).ravel()
    if X.ndim != 2 or X.shape[0] != t.size:
        raise ValidationError(f"H must be (n, d) with one token id per row; got {X.shape} and "
                              f"{t.size} ids")
    if draws < 2:
        raise ValidationError(f"draws must be >= 2 (the spread needs two); got {draws}")
    types, first = np.unique(t, return_inverse=True)
    if types.size < MIN_TYPES:
        raise InsufficientSamplesError(f"the frequency control needs {MIN_TYPES} token types; "
                                       f"got {types.size}")
    rng = np.random.default_rng([int(seed), 3602])
    per_type, by_freq = [], []
    for _ in range(draws):
        order = rng.permutation(t.size)
        _, pick = np.unique(first[order], return_index=True)  # one random row per type
        per_type.append(intrinsic_dimension(X[order[pick]], "twonn"))
        rows = rng.choice(t.size, size=types.size, replace=False)
        by_freq.append(intrinsic_dimension(X[rows], "twonn"))
    a, b = _summary(per_type), _summary(by_freq)
    return TypeWeighting(*a, *b, n_points=int(types.size), draws=int(draws))


def frequency_control_rows(H: ArrayLike, token_ids: ArrayLike, *, seed: int = 0) -> list[dict]:
    """The two baseline rows of ``bridge.csv`` (context, no verdict).

    ``twonn_per_type`` and ``twonn_by_frequency`` (:func:`dimension_by_type`), or why they could
    not be computed.
    """
    from tangentlab.empirical.bridge.rows import bridge_row

    names = ("twonn_per_type", "twonn_by_frequency")
    notes = ("one occurrence per token type (the frequency weighting removed)",
             "as many occurrences drawn from all (weighted by frequency, as the stream is)")
    try:
        w = dimension_by_type(H, token_ids, seed=seed)
    except Exception as exc:  # noqa: BLE001 - a control that cannot run is context only
        why = " ".join(str(exc).split())[:160]
        return [bridge_row(n, "baseline", measured=why, note=note) for n, note in zip(names, notes)]
    tail = f"; TwoNN, {w.n_points} points, median and 2.5-97.5% of {w.draws} redraws"
    values = ((w.per_type, w.per_type_low, w.per_type_high),
              (w.by_frequency, w.by_frequency_low, w.by_frequency_high))
    return [bridge_row(n, "baseline", measured=v, status="context", n=w.n_points, note=note + tail)
            for n, v, note in zip(names, values, notes)]

"""The intrinsic dimension with and without the frequency weighting (issue 36, item 3).

The eval stream samples each token type as often as it occurs, on purpose: the account is about
what frequency does to the geometry. A global dimension estimate (TwoNN) of such a sample is
dominated by the frequent types, so the peers' dimension rows mix the manifold with its
sampling. :func:`dimension_by_type` is the control: TwoNN on one occurrence per token type
(every type weighted alike) against TwoNN on as many occurrences drawn at random from all of
them (weighted by frequency, as the stream is), each redrawn ``draws`` times (the range of the
draws beside each median; types seen once are the same point in every draw, so it understates
the uncertainty). A gap between the two is what the frequency weighting does to the estimate.
It is not all "frequent types live in fewer dimensions": a weighted draw repeats frequent
types, and TwoNN reads only the two nearest neighbours, so where a point's nearest neighbour is
an occurrence of its own type the estimate reads the spread *within* a type, which may have
few dimensions on any manifold. The share of weighted points whose nearest neighbour is of
their own type (``same_type_neighbour``) is reported beside the gap for that reason.

Both read the geometry occurrences of a site (at most one per document and token:
:class:`~tangentlab.empirical.bridge.site_bridge.SiteArrays` ``H``, ``tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from tangentlab.errors import InsufficientSamplesError, ValidationError

__all__ = ["MIN_TYPES", "MAX_TYPES", "TypeWeighting", "dimension_by_type",
           "frequency_control_rows"]

#: Token types the comparison needs (TwoNN wants a few dozen points at least).
MIN_TYPES = 30
#: Token types it reads at most (the most frequent in the occurrences; TwoNN costs n² per fit).
MAX_TYPES = 2000


@dataclass(frozen=True)
class TypeWeighting:
    """Result of :func:`dimension_by_type`: TwoNN per weighting, over ``draws`` redraws.

    Attributes:
        per_type, per_type_low, per_type_high: one occurrence per type: the median estimate and
            the 2.5% / 97.5% quantiles over the redraws.
        by_frequency, by_frequency_low, by_frequency_high: the same for as many occurrences drawn
            at random from all (frequency-weighted).
        same_type_neighbour: the median share, over the weighted draws, of points whose
            nearest neighbour (Euclidean) is an occurrence of their own type.
        n_points: points per estimate (the number of types, at most :data:`MAX_TYPES`);
            draws: redraws of each.
    """

    per_type: float
    per_type_low: float
    per_type_high: float
    by_frequency: float
    by_frequency_low: float
    by_frequency_high: float
    same_type_neighbour: float
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
    types, counts = np.unique(t, return_counts=True)
    if types.size < MIN_TYPES:
        raise InsufficientSamplesError(f"the frequency control needs {MIN_TYPES} token types; "
                                       f"got {types.size}")
    if types.size > MAX_TYPES:  # the most frequent types (ties by id), all their occurrences
        keep = np.isin(t, types[np.argsort(-counts, kind="stable")[:MAX_TYPES]])
        X, t = X[keep], t[keep]
        types = np.unique(t)
    _, inv = np.unique(t, return_inverse=True)
    rng = np.random.default_rng([int(seed), 3602])
    per_type, by_freq, same = [], [], []
    for _ in range(draws):
        order = rng.permutation(t.size)
        _, pick = np.unique(inv[order], return_index=True)  # one random row per type
        per_type.append(intrinsic_dimension(X[order[pick]], "twonn"))
        rows = rng.choice(t.size, size=types.size, replace=False)
        by_freq.append(intrinsic_dimension(X[rows], "twonn"))
        same.append(_same_type_share(X[rows], inv[rows]))
    a, b = _summary(per_type), _summary(by_freq)
    return TypeWeighting(*a, *b, same_type_neighbour=float(np.median(same)),
                         n_points=int(types.size), draws=int(draws))


def _same_type_share(X: np.ndarray, labels: np.ndarray) -> float:
    """The share of rows whose nearest other row (Euclidean) has their label."""
    from sklearn.neighbors import NearestNeighbors

    _, idx = NearestNeighbors(n_neighbors=2).fit(X).kneighbors(X)
    return float(np.mean(labels[idx[:, 1]] == labels))


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
    tail = (f"; TwoNN, {w.n_points} points, median and 2.5-97.5% of {w.draws} redraws; "
            f"{w.same_type_neighbour:.0%} of the weighted points have a nearest neighbour of "
            "their own type")
    values = ((w.per_type, w.per_type_low, w.per_type_high),
              (w.by_frequency, w.by_frequency_low, w.by_frequency_high))
    return [bridge_row(n, "baseline", measured=v, status="context", n=w.n_points, note=note + tail)
            for n, v, note in zip(names, values, notes)]

"""Per-token curvature, pooled visibility per bucket and the measured attenuation (issue 20, item 3).

The closed forms' model: every token r has occurrences ``chart(c_r, u)``, ``u ~ N(0, t_r² I_m)``
around its own centroid. So each token is its own neighbourhood:

1. :func:`per_token_curvature`: one occurrence per (document, token)
   (:func:`~tangentlab.measure.one_per_window`), k of them at random per token with at least k
   (k by :func:`~tangentlab.measure.curvature_stats.neighbourhood_size`), then
   :func:`~tangentlab.measure.curvature_stats.local_curvature` on them: the token's noise-corrected
   normal and tangent variances, ‖II‖² and visibility.
2. :func:`pooled_visibility`: pooled normal over pooled tangent variance of a set of tokens with
   weights (1 for type pooling, the token's frequency for occurrence pooling), never a mean of
   ratios; the same definition as the theory's ``occurrence_visibility`` / ``type_visibility``.
3. :func:`measured_attenuation`: occurrence-pooled over type-pooled visibility, with a percentile
   bootstrap over tokens.

Tokens whose fit is "not measurable here" are left out and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ValidationError
from tangentlab.measure._validate import as_points
from tangentlab.measure.curvature_stats import LocalCurvature, local_curvature, neighbourhood_size
from tangentlab.measure.geometry import one_per_window
from tangentlab.typing import ArrayLike, Seed

__all__ = ["per_token_curvature", "pooled_visibility", "PooledRatio", "measured_attenuation"]


def per_token_curvature(H: ArrayLike, token_ids: ArrayLike, doc_ids: ArrayLike, m: int, *,
                        k: int | None = None, seed: Seed = 0,
                        keep: ArrayLike | None = None) -> dict[int, LocalCurvature]:
    """:func:`local_curvature` of every token with at least k occurrences in distinct documents.

    Args:
        H: activations ``(n, d)``.
        token_ids: ``(n,)`` integer token ids.
        doc_ids: ``(n,)`` integer document ids.
        m: the manifold dimension.
        k: occurrences per token (default :func:`neighbourhood_size` ``(m)``); equal for every
            token so that the fits are comparable.
        seed: seed of the occurrence choice and of the k-subsample.
        keep: optional boolean mask ``(n,)`` of usable rows.

    Returns:
        ``{token_id: LocalCurvature}`` for the tokens with enough documents (ascending ids).
    """
    from tangentlab.measure.geometry import _labels

    X = as_points(H, name="H")
    tok = _labels(token_ids, "token_ids", n=X.shape[0])
    doc = _labels(doc_ids, "doc_ids", n=X.shape[0])
    k = neighbourhood_size(m) if k is None else int(k)
    rng = np.random.default_rng(seed)
    idx = one_per_window(tok, doc, seed=rng, keep=keep)
    t = tok[idx]
    out: dict[int, LocalCurvature] = {}
    for token in np.unique(t):
        rows = idx[t == token]
        if rows.size < k:
            continue
        pick = np.sort(rng.choice(rows, size=k, replace=False))
        out[int(token)] = local_curvature(X[pick], m)
    if not out:
        raise InsufficientSamplesError(f"no token has k={k} occurrences in distinct documents; "
                                       "pass more documents or a smaller k (fewer dimensions)")
    return out


def _arrays(fits: dict[int, LocalCurvature], weights: dict[int, float] | None):
    toks = [t for t, f in fits.items() if f.measurable]
    if not toks:
        raise InsufficientSamplesError("no token's fit is measurable here")
    nv = np.array([fits[t].normal_var for t in toks])
    tv = np.array([fits[t].tangent_var for t in toks])
    if weights is None:
        w = np.ones(len(toks))
    else:
        try:
            w = np.array([float(weights[t]) for t in toks])
        except KeyError as exc:
            raise ValidationError(f"weights lacks token {exc.args[0]}") from None
    return np.array(toks), nv, tv, w


def pooled_visibility(fits: dict[int, LocalCurvature],
                      weights: dict[int, float] | None = None) -> float:
    """``sum_r w_r N_r / sum_r w_r T_r`` over the measurable tokens (weights default to 1)."""
    _, nv, tv, w = _arrays(fits, weights)
    return float(np.sum(w * nv) / np.sum(w * tv))


@dataclass(frozen=True)
class PooledRatio:
    """Measured attenuation: value, percentile interval, tokens used and left out."""

    value: float
    ci_low: float
    ci_high: float
    n_tokens: int
    n_not_measurable: int
    replicates: np.ndarray


def measured_attenuation(fits: dict[int, LocalCurvature], frequencies: dict[int, float], *,
                         n_boot: int = 500, confidence: float = 0.95,
                         seed: Seed = 0) -> PooledRatio:
    """Occurrence-pooled over type-pooled visibility, bootstrap over tokens.

    Args:
        fits: from :func:`per_token_curvature`.
        frequencies: ``{token_id: frequency}`` (the training data's), the occurrence weights.
        n_boot: bootstrap replicates (tokens resampled with replacement).
        confidence: the interval's level.
        seed: seed of the bootstrap.
    """
    toks, nv, tv, f = _arrays(fits, frequencies)
    value = float((np.sum(f * nv) / np.sum(f * tv)) / (np.sum(nv) / np.sum(tv)))
    rng = np.random.default_rng(seed)
    j = rng.integers(0, toks.size, size=(int(n_boot), toks.size))
    reps = (np.sum(f[j] * nv[j], 1) / np.sum(f[j] * tv[j], 1)) / (np.sum(nv[j], 1)
                                                                 / np.sum(tv[j], 1))
    a = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return PooledRatio(value, float(lo), float(hi), int(toks.size),
                       int(len(fits) - toks.size), reps)

"""Removed activation variance and mean-ablation (issue 10, item 5).

The variance a mean-ablation removes is the confound a causal test of Q_T must match: a PCA
proxy Q_T is, by construction, the rank-r subspace whose mean-ablation removes the most
activation variance. The dose-matched controls of :mod:`tangentlab.measure.causal_controls`
match it with :func:`removed_variance`. (The earlier variance-matched complement controls and
their contrast, ``variance_matched_controls`` and ``causal_contrast``, are retired: issue 34.)

Conventions:

- mean-ablation along a basis B ``(d, k)``: ``h' = h - (h - mu) B B^T`` (rows h, mean mu);
- removed variance: ``tr(Sigma) - tr(Cov(h'))``; for orthonormal B it is ``tr(B^T Sigma B)``;
  along one unit direction v scaled by s it is ``(1 - (1 - s^2)^2) v^T Sigma v``, and it adds up
  over orthogonal directions (see :func:`removed_variance`).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.controls import mean_ablate, removed_variance
    >>> cov = np.diag([9.0, 4.0] + [1.0] * 18)
    >>> Q = np.eye(20)[:, :2]                         # removes 13
    >>> removed_variance(Q, cov)
    13.0
    >>> H = np.random.default_rng(0).standard_normal((50, 20))
    >>> bool(np.allclose(mean_ablate(H, Q)[:, :2], H[:, :2].mean(0)))
    True
"""

from __future__ import annotations

import numpy as np

from tangentlab.errors import ShapeError
from tangentlab.measure._validate import as_moment, to_float64
from tangentlab.typing import ArrayLike

__all__ = ["removed_variance", "mean_ablate"]


def removed_variance(B: ArrayLike, cov: ArrayLike) -> float | np.ndarray:
    """Variance removed by mean-ablating along B: ``tr(Sigma) - tr((I - BB^T) Sigma (I - BB^T))``.

    Args:
        B: ``(d, k)`` (columns need not be orthonormal or non-zero) or a stack ``(n, d, k)``.
        cov: activation covariance ``(d, d)``.

    Returns a float, or ``(n,)`` for a stack. Computed as ``2 tr(B^T S B) - tr(B^T B B^T S B)``
    (no cancellation against ``tr(Sigma)``).
    """
    S = as_moment(cov, name="cov")
    arr = to_float64(B, "B")
    single = arr.ndim == 2
    if single:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1] != S.shape[0]:
        raise ShapeError(f"B must be (d, k) or (n, d, k) with d={S.shape[0]}; got {arr.shape}")
    SB = np.einsum("ij,njk->nik", S, arr)
    BtSB = np.einsum("nik,nil->nkl", arr, SB)
    BtB = np.einsum("nik,nil->nkl", arr, arr)
    out = 2 * np.einsum("nkk->n", BtSB) - np.einsum("nkl,nlk->n", BtB, BtSB)
    return float(out[0]) if single else out


def mean_ablate(H: ArrayLike, B: ArrayLike, mean: ArrayLike | None = None) -> np.ndarray:
    """``h' = h - (h - mu) B B^T`` for rows H ``(n, d)`` and B ``(d, k)``; mu defaults to H's mean."""
    from tangentlab.measure._validate import as_points, as_vector

    X = as_points(H, name="H")
    Bm = to_float64(B, "B")
    if Bm.ndim != 2 or Bm.shape[0] != X.shape[1]:
        raise ShapeError(f"B must have shape ({X.shape[1]}, k); got {Bm.shape}")
    mu = X.mean(0) if mean is None else as_vector(mean, name="mean", dim=X.shape[1])
    return X - ((X - mu) @ Bm) @ Bm.T

"""Causal controls matched on the confound: removed activation variance (issue 10, item 5).

A PCA proxy Q_T is, by construction, the rank-r subspace whose mean-ablation removes the most
activation variance, so a causal test against rank-r controls that remove far less variance
proves nothing about geometry. :func:`variance_matched_controls` builds controls from random
directions of the complement of span(Q), as many as it takes (the last one scaled) to remove
exactly the variance Q removes.

Conventions:

- mean-ablation along a basis B ``(d, k)``: ``h' = h - (h - mu) B B^T`` (rows h, mean mu);
- removed variance: ``tr(Sigma) - tr(Cov(h'))``; for orthonormal B it is ``tr(B^T Sigma B)``;
  along one unit direction v scaled by s it is ``(1 - (1 - s^2)^2) v^T Sigma v``, and it adds up
  over orthogonal directions (see :func:`removed_variance`).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.controls import variance_matched_controls, removed_variance
    >>> cov = np.diag([9.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    >>> Q = np.eye(8)[:, :2]                          # removes 13
    >>> mc = variance_matched_controls(Q, cov, n=5, seed=0)
    >>> bool(np.allclose(mc.removed_variance, 13.0)), mc.bases.shape[0]
    (True, 5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import RankError, ShapeError
from tangentlab.measure._validate import as_basis, as_moment, check_positive_int, to_float64

__all__ = ["MatchedControls", "variance_matched_controls", "removed_variance", "mean_ablate"]


@dataclass(frozen=True)
class MatchedControls:
    """Variance-matched controls for a basis Q.

    Attributes:
        bases: ``(n, d, r_max)``: control j uses its first ``ranks[j]`` columns (orthogonal, unit
            except the last, which is scaled by ``scales[j]``); the rest are zero.
        ranks: ``(n,)`` directions per control (the last one partial).
        scales: ``(n,)`` the scale s in (0, 1] of each control's last direction.
        removed_variance: ``(n,)`` variance each control's mean-ablation removes.
        target: ``tr(Q^T Sigma Q)``, the variance Q's mean-ablation removes.
        seed: the seed used.
    """

    bases: np.ndarray
    ranks: np.ndarray
    scales: np.ndarray
    removed_variance: np.ndarray
    target: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """Summary for JSON (bases left out: they are large)."""
        return {"ranks": self.ranks.tolist(), "scales": self.scales.tolist(),
                "removed_variance": self.removed_variance.tolist(), "target": self.target,
                "seed": self.seed, "shape": list(self.bases.shape)}


def removed_variance(B: Any, cov: Any) -> float | np.ndarray:
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


def mean_ablate(H: Any, B: Any, mean: Any = None) -> np.ndarray:
    """``h' = h - (h - mu) B B^T`` for rows H ``(n, d)`` and B ``(d, k)``; mu defaults to H's mean."""
    from tangentlab.measure._validate import as_points, as_vector

    X = as_points(H, name="H")
    Bm = to_float64(B, "B")
    if Bm.ndim != 2 or Bm.shape[0] != X.shape[1]:
        raise ShapeError(f"B must have shape ({X.shape[1]}, k); got {Bm.shape}")
    mu = X.mean(0) if mean is None else as_vector(mean, name="mean", dim=X.shape[1])
    return X - ((X - mu) @ Bm) @ Bm.T


def variance_matched_controls(Q: Any, cov: Any, n: int, seed: int) -> MatchedControls:
    """Controls from the complement of span(Q) that remove exactly Q's activation variance.

    Args:
        Q: ``(d, r)`` orthonormal basis (e.g. the top-r activation PCA subspace).
        cov: activation covariance ``Sigma``, ``(d, d)`` (of the rows to be ablated).
        n: number of controls.
        seed: seed (``numpy.random.default_rng``).

    For each control, the complement of span(Q) is randomly rotated (Haar) and its directions
    v_1, v_2, ... are taken in order until ``sum v_j^T Sigma v_j`` reaches ``tr(Q^T Sigma Q)``;
    the last direction is scaled by ``s = sqrt(1 - sqrt(1 - f))`` with f the fraction of its
    variance still needed, so that the mean-ablation removes exactly the target.

    Raises RankError if the whole complement holds less variance than the target (then no
    control inside it can match: compare against full-space controls or lower r).
    """
    S = as_moment(cov, name="cov")
    d = S.shape[0]
    Q = as_basis(Q, d=d)
    r = Q.shape[1]
    n = check_positive_int(n, "n")
    target = float(np.sum(Q * (S @ Q)))
    full, _ = np.linalg.qr(Q, mode="complete")
    P = full[:, r:]  # (d, d - r)
    comp_var = float(np.sum(P * (S @ P)))
    if not target <= comp_var * (1 - 1e-12):
        raise RankError(
            f"the complement of span(Q) holds variance {comp_var:.6g}, less than Q's "
            f"{target:.6g}: no control inside it can remove as much; use full-space controls "
            "or a smaller rank"
        )
    rng = np.random.default_rng(seed)
    dirs = []
    ranks = np.empty(n, dtype=np.int64)
    scales = np.empty(n)
    for j in range(n):
        R, tri = np.linalg.qr(rng.standard_normal((d - r, d - r)))
        R = R * np.sign(np.diag(tri))
        V = P @ R  # (d, d - r) Haar-rotated orthonormal complement basis
        var = np.einsum("dk,dk->k", V, S @ V)
        cum = np.cumsum(var)
        k = int(np.searchsorted(cum, target, side="left"))  # index of the last direction
        k = min(k, d - r - 1)
        before = float(cum[k - 1]) if k > 0 else 0.0
        f = min(max((target - before) / var[k], 0.0), 1.0) if var[k] > 0 else 1.0
        s = float(np.sqrt(1.0 - np.sqrt(1.0 - f)))
        Bj = V[:, :k + 1].copy()
        Bj[:, k] *= s
        dirs.append(Bj)
        ranks[j] = k + 1
        scales[j] = s
    r_max = int(ranks.max())
    bases = np.zeros((n, d, r_max))
    for j, Bj in enumerate(dirs):
        bases[j, :, :Bj.shape[1]] = Bj
    return MatchedControls(bases=bases, ranks=ranks, scales=scales,
                           removed_variance=removed_variance(bases, S), target=target,
                           seed=int(seed))

"""Curvature estimators from samples: local tangent, quadratic fit of II, curvature visibility.

Setting: points X ``(n, d)`` sampled near an m-dimensional manifold; a base point ``p`` ``(d,)``.
Near p the manifold is ``x(u) = p + J u + 1/2 sum_a n_a u^T A_a u + O(|u|^3)`` with J ``(d, m)`` an
orthonormal tangent basis, ``n_a`` an orthonormal normal frame and ``A_a`` ``(m, m)`` the shape
matrices of the second fundamental form II, ``||II||_F^2 = sum_a tr(A_a^2)``.

*Visibility* is normal variance over tangent variance of a neighbourhood (centred covariance).
For Gaussian chart coordinates ``u ~ N(0, t^2 I_m)`` it is ``t^2 ||II||_F^2 / (2 m)`` to leading
order (a sphere of radius R: ``t^2 / (2 R^2)``).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure import visibility_in_frame
    >>> rng = np.random.default_rng(0)
    >>> u = 0.1 * rng.standard_normal((4000, 2))
    >>> X = np.c_[u, 1 - np.sqrt(1 - (u ** 2).sum(1))]        # unit sphere patch at the pole
    >>> v = visibility_in_frame(X, np.eye(3)[:, :2])           # theory: 0.1**2 / 2 = 0.005
    >>> bool(abs(v / 0.005 - 1) < 0.15)
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError
from tangentlab.measure._validate import (
    as_basis,
    as_points,
    as_vector,
    check_positive_int,
    check_rank,
)
from tangentlab.measure.subspace import complement_basis
from tangentlab.typing import ArrayLike

__all__ = [
    "nearest_neighbours",
    "local_tangent",
    "SecondFundamentalFormFit",
    "fit_second_fundamental_form",
    "empirical_visibility",
    "visibility_in_frame",
]


def _check_k_m(X: np.ndarray, k: Any, m: Any, need: int | None = None) -> tuple[int, int]:
    n, d = X.shape
    m = check_rank(m, d, name="m")
    k = check_positive_int(k, "k")
    need = m + 1 if need is None else need
    if k < need:
        raise InsufficientSamplesError(
            f"k={k} neighbours are too few for manifold dimension m={m}: need k >= {need}"
        )
    if k > n:
        raise InsufficientSamplesError(
            f"k={k} neighbours requested but X has only {n} points; lower k or pass more points"
        )
    return k, m


def nearest_neighbours(X: ArrayLike, point: ArrayLike, k: int) -> np.ndarray:
    """Indices ``(k,)`` of the k rows of X ``(n, d)`` nearest to ``point`` ``(d,)``, nearest first.

    Ties are broken by row index (stable sort), so the result is deterministic.
    """
    X = as_points(X)
    p = as_vector(point, name="point", dim=X.shape[1])
    k = check_positive_int(k, "k")
    if k > X.shape[0]:
        raise InsufficientSamplesError(f"k={k} exceeds the {X.shape[0]} points of X")
    dist2 = np.sum((X - p) ** 2, axis=1)
    return np.argsort(dist2, kind="stable")[:k]


def _local_frame(Y: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending) and eigenvectors of the centred covariance of Y ``(k, d)``."""
    Yc = Y - Y.mean(axis=0)
    cov = Yc.T @ Yc / max(Y.shape[0] - 1, 1)
    vals, vecs = np.linalg.eigh(cov)
    return np.clip(vals[::-1], 0.0, None), vecs[:, ::-1]


def local_tangent(X: ArrayLike, point: ArrayLike, k: int, m: int) -> np.ndarray:
    """Local-PCA tangent basis ``(d, m)`` at ``point`` from its k nearest neighbours in X ``(n, d)``.

    The top-m eigenvectors of the centred covariance of the neighbours. Needs ``1 <= m < d``,
    ``m + 1 <= k <= n``.
    """
    X = as_points(X)
    k, m = _check_k_m(X, k, m)
    Y = X[nearest_neighbours(X, point, k)]
    _, vecs = _local_frame(Y, m)
    return np.ascontiguousarray(vecs[:, :m])


@dataclass(frozen=True)
class SecondFundamentalFormFit:
    """Result of :func:`fit_second_fundamental_form`.

    Attributes:
        point: the base point ``(d,)``.
        tangent: estimated tangent basis J ``(d, m)``.
        normal: normal frame N ``(d, d - m)`` (complement of J), ordered by curvature: rotated
            so that the first normals carry the most of II (SVD of the stacked A_a).
        shape_operators: ``(d - m, m, m)`` symmetric shape matrices A_a in the frame (J, N).
        second_fundamental_norm2: ``||II||_F^2 = sum_a tr(A_a^2)``.
        offset: fitted constant normal offset ``(d - m,)`` (0 if the point lies on the manifold).
        residual: relative residual ``||V - fit||_F / ||V||_F`` of the normal coordinates V.
        k, m: neighbours used and manifold dimension.
    """

    point: np.ndarray
    tangent: np.ndarray
    normal: np.ndarray
    shape_operators: np.ndarray
    second_fundamental_norm2: float
    offset: np.ndarray
    residual: float
    k: int
    m: int


def fit_second_fundamental_form(X: ArrayLike, point: ArrayLike, k: int,
                                m: int) -> SecondFundamentalFormFit:
    """Least-squares quadratic fit of the normal coordinates in the estimated local frame.

    With J = :func:`local_tangent` (k neighbours) and N its complement, each neighbour y gives
    tangent coordinates ``u = J^T (y - p)`` and normal ones ``v = N^T (y - p)``; fit
    ``v_a ~ c_a + b_a . u + 1/2 u^T A_a u`` (the linear term absorbs tilt of the estimated frame).
    Needs ``k >= 1 + m + m (m + 1) / 2`` neighbours.
    """
    X = as_points(X)
    p = as_vector(point, name="point", dim=X.shape[1])
    n_par = 1 + m + m * (m + 1) // 2 if isinstance(m, int) and m > 0 else None
    k, m = _check_k_m(X, k, m, need=n_par)
    Y = X[nearest_neighbours(X, p, k)]
    _, vecs = _local_frame(Y, m)
    J = np.ascontiguousarray(vecs[:, :m])
    N = complement_basis(J)
    D = Y - p
    U = D @ J
    V = D @ N
    iu, ju = np.triu_indices(m)
    design = np.hstack([np.ones((k, 1)), U, U[:, iu] * U[:, ju]])
    coef, *_ = np.linalg.lstsq(design, V, rcond=None)  # (n_par, d - m)
    quad = coef[1 + m:]  # (m(m+1)/2, d - m)
    A = np.zeros((N.shape[1], m, m))
    diag = iu == ju
    A[:, iu[diag], ju[diag]] = 2.0 * quad[diag].T
    off = ~diag
    A[:, iu[off], ju[off]] = quad[off].T
    A[:, ju[off], iu[off]] = quad[off].T
    # canonical normal frame: rotate it so the first normals carry the most curvature (SVD of the
    # stacked shape matrices); ||II||_F^2 and the fit are unchanged by this rotation
    U, _, _ = np.linalg.svd(A.reshape(A.shape[0], m * m), full_matrices=True)
    A = np.einsum("ab,bij->aij", U.T, A)
    N = N @ U
    offset = U.T @ coef[0]
    fitted = design @ coef
    vnorm = float(np.linalg.norm(V))
    residual = float(np.linalg.norm(V - fitted) / vnorm) if vnorm > 0 else 0.0
    return SecondFundamentalFormFit(
        point=p,
        tangent=J,
        normal=N,
        shape_operators=A,
        second_fundamental_norm2=float(np.sum(A * A)),
        offset=offset,
        residual=residual,
        k=k,
        m=m,
    )


def empirical_visibility(X: ArrayLike, point: ArrayLike, k: int, m: int) -> float:
    """Normal variance over tangent variance of the k nearest neighbours of ``point``.

    The frame is estimated by local PCA on those neighbours (centred covariance): the ratio of the
    sum of the ``d - m`` smallest eigenvalues to the sum of the m largest.
    """
    X = as_points(X)
    k, m = _check_k_m(X, k, m)
    Y = X[nearest_neighbours(X, point, k)]
    vals, _ = _local_frame(Y, m)
    tangent = float(vals[:m].sum())
    if not tangent > 0:
        raise InsufficientSamplesError("the neighbours have no spread; use more or distinct points")
    return float(vals[m:].sum() / tangent)


def visibility_in_frame(X: ArrayLike, tangent_basis: ArrayLike) -> float:
    """Normal over tangent variance of all of X ``(n, d)`` in a given tangent basis ``(d, m)``.

    ``(tr S - tr(J^T S J)) / tr(J^T S J)`` with S the centred (ddof=1) covariance of X.
    """
    X = as_points(X, min_rows=2)
    J = as_basis(tangent_basis, d=X.shape[1], name="tangent_basis")
    Xc = X - X.mean(axis=0)
    total = float(np.sum(Xc * Xc))
    tangent = float(np.sum((Xc @ J) ** 2))
    if not tangent > 0:
        raise InsufficientSamplesError("X has no spread along the tangent basis")
    return (total - tangent) / tangent

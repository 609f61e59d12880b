"""Subspaces: orthonormal bases, projectors, principal angles, random and matched-rank controls.

A *basis* is always a float64 array of shape ``(d, r)`` whose columns are orthonormal; it spans an
r-dimensional subspace of R^d. Bases returned here have a deterministic sign convention (the
triangular factor of their QR has a positive diagonal), so a seed fixes them exactly.

Example::

    >>> import numpy as np
    >>> from tangentlab.measure import random_subspace, normal_controls, principal_angles
    >>> Q = random_subspace(10, 2, seed=0)
    >>> N = normal_controls(Q, 5, seed=1)          # shape (5, 10, 2), each orthogonal to Q
    >>> bool(np.allclose(Q.T @ N[0], 0))
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import RankError
from tangentlab.measure._validate import as_basis, check_positive_int, check_rank, to_float64
from tangentlab.typing import ArrayLike

__all__ = [
    "orthonormalize",
    "projector",
    "complement_basis",
    "principal_angles",
    "random_subspace",
    "normal_controls",
    "random_subspaces",
    "full_space_controls",
    "SubspaceDrift",
    "subspace_drift",
]


def _qr_positive(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reduced QR (batched over leading axes) with diag(R) >= 0, so the factorisation is unique."""
    q, r = np.linalg.qr(A)
    diag = np.diagonal(r, axis1=-2, axis2=-1)
    signs = np.where(diag < 0, -1.0, 1.0)
    return q * signs[..., None, :], r * signs[..., :, None]


def orthonormalize(A: ArrayLike, rank_tol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis of the column span of ``A`` (shape ``(d, r)``), by QR.

    Returns shape ``(d, r)``, float64, with the positive-diagonal sign convention (so span order is
    kept: column j of the result lies in the span of columns 0..j of A). Raises RankError if
    ``r > d`` or if A is rank deficient: smallest / largest singular value below ``rank_tol``.
    """
    arr = to_float64(A, "A")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        from tangentlab.errors import ShapeError

        raise ShapeError(f"A must be a (d, r) matrix of column vectors; got shape {arr.shape}")
    d, r = arr.shape
    if r < 1 or d < 1:
        raise RankError(f"A has shape {arr.shape}; need at least one row and one column")
    if r > d:
        raise RankError(
            f"A has {r} columns in dimension {d}: at most d columns can be independent "
            "(did you pass (r, d)? then use A.T)"
        )
    if not np.all(np.isfinite(arr)):
        from tangentlab.errors import NonFiniteError

        raise NonFiniteError("A holds NaN or Inf entries; pass finite vectors")
    s = np.linalg.svd(arr, compute_uv=False)
    if s[0] == 0 or s[-1] / s[0] < rank_tol:
        ratio = 0.0 if s[0] == 0 else s[-1] / s[0]
        raise RankError(
            f"A (shape {arr.shape}) is rank deficient: smallest/largest singular value = "
            f"{ratio:.3g} < rank_tol={rank_tol:g}; drop dependent columns or lower the rank"
        )
    q, _ = _qr_positive(arr)
    return q


def projector(Q: ArrayLike) -> np.ndarray:
    """Orthogonal projector ``Q Q^T`` onto span(Q); Q shape ``(d, r)`` orthonormal -> ``(d, d)``."""
    Q = as_basis(Q)
    return Q @ Q.T


def complement_basis(Q: ArrayLike) -> np.ndarray:
    """Orthonormal basis of the orthogonal complement of span(Q): shape ``(d, d - r)``.

    Taken from the complete QR of Q (deterministic). For ``r == d`` the result has shape (d, 0).
    """
    Q = as_basis(Q)
    d, r = Q.shape
    full, _ = np.linalg.qr(Q, mode="complete")
    return np.ascontiguousarray(full[:, r:])


def principal_angles(Q1: ArrayLike, Q2: ArrayLike) -> np.ndarray:
    """Principal angles between span(Q1) and span(Q2), in radians, ascending.

    Q1 ``(d, r1)`` and Q2 ``(d, r2)`` orthonormal; returns shape ``(min(r1, r2),)`` in [0, pi/2].
    Uses :func:`scipy.linalg.subspace_angles` (accurate for small angles, unlike arccos of the
    singular values of Q1^T Q2).
    """
    from scipy.linalg import subspace_angles

    Q1 = as_basis(Q1, name="Q1")
    Q2 = as_basis(Q2, d=Q1.shape[0], name="Q2")
    return np.sort(subspace_angles(Q1, Q2))


def random_subspace(d: int, r: int, seed: int) -> np.ndarray:
    """Haar-random r-dimensional subspace of R^d: basis of shape ``(d, r)``.

    QR of a standard Gaussian ``(d, r)`` matrix from ``numpy.random.default_rng(seed)`` with the
    positive-diagonal convention, which makes the distribution exactly Haar. Needs ``1 <= r < d``.
    """
    d = check_positive_int(d, "d", minimum=2)
    r = check_rank(r, d)
    rng = np.random.default_rng(seed)
    q, _ = _qr_positive(rng.standard_normal((d, r)))
    return q


def random_subspaces(d: int, r: int, n: int, seed: int) -> np.ndarray:
    """``n`` independent Haar-random rank-r subspaces of R^d: shape ``(n, d, r)``.

    Batched QR of standard Gaussian ``(n, d, r)`` draws from ``numpy.random.default_rng(seed)``.
    These are the ``control_space="full"`` controls of :func:`tangentlab.measure.control_test`.
    """
    d = check_positive_int(d, "d", minimum=2)
    r = check_rank(r, d)
    n = check_positive_int(n, "n")
    q, _ = _qr_positive(np.random.default_rng(seed).standard_normal((n, d, r)))
    return q


#: Second seed word of :func:`full_space_controls`, so that its draws are independent of the
#: Gaussians :func:`normal_controls` projects for the same seed.
FULL_SPACE_STREAM = 20261203


def full_space_controls(Q: ArrayLike, n: int, seed: int) -> np.ndarray:
    """Full-space controls for span(Q): ``n`` Haar rank-r subspaces of all of R^d, ``(n, d, r)``.

    Drawn from ``numpy.random.default_rng([seed, FULL_SPACE_STREAM])`` and independent of Q
    (only its shape is used), so under the null "span(Q) is no different from a random rank-r
    subspace" (any C whose law is rotation invariant, or a Q independent of C and Haar) Q and the
    controls are exchangeable and the control p-value ``(1 + #{E_N >= E_T}) / (1 + n)`` is
    exactly uniform on {1/(n+1), ..., 1}, at every r/d. Complement controls
    (:func:`normal_controls`) are not: they live where Q is not, so a Q that holds much energy by
    chance leaves less to them (measured false-positive rate 0.12 at r/d = 1/4, see
    docs/empirical.md). Needs ``1 <= r < d``.
    """
    Q = as_basis(Q)
    d, r = Q.shape
    d = check_positive_int(d, "d", minimum=2)
    r = check_rank(r, d, name="rank of Q")
    n = check_positive_int(n, "n")
    rng = np.random.default_rng([int(seed), FULL_SPACE_STREAM])
    q, _ = _qr_positive(rng.standard_normal((n, d, r)))
    return q


def normal_controls(Q: ArrayLike, n: int, seed: int) -> np.ndarray:
    """Matched-rank normal controls for span(Q): shape ``(n, d, r)``.

    Each control is a standard Gaussian ``(d, r)`` matrix with span(Q) projected out, then QR
    (positive-diagonal convention): a Haar-random r-dimensional subspace of the orthogonal
    complement of span(Q). All ``n`` draws come from ``numpy.random.default_rng(seed)`` at once, so
    the same (Q, n, seed) gives the same controls. Needs ``2 r <= d`` (an r-dimensional subspace
    must fit in the (d - r)-dimensional complement); otherwise RankError.
    """
    Q = as_basis(Q)
    d, r = Q.shape
    check_rank(r, d, name="rank of Q")
    if 2 * r > d:
        raise RankError(
            f"rank r={r} controls need an r-dimensional subspace of the {d - r}-dimensional "
            f"complement of Q; need 2r <= d (d={d}), so use r <= {d // 2}"
        )
    n = check_positive_int(n, "n")
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((n, d, r))
    Qt = np.ascontiguousarray(Q.T)
    G = G - Q @ (Qt @ G)  # (n, d, r): batched matmuls (an einsum here took 2.5x longer)
    q, _ = _qr_positive(G)
    # one more projection removes the O(eps) leakage QR leaves, then re-normalise via QR
    q = q - Q @ (Qt @ q)
    q, _ = _qr_positive(q)
    return q


@dataclass(frozen=True)
class SubspaceDrift:
    """How far a subspace moved from ``Q_old`` ``(d, r1)`` to ``Q_new`` ``(d, r2)``.

    Attributes:
        angles: principal angles in radians, ascending, shape ``(min(r1, r2),)``.
        max_angle: the largest principal angle (radians).
        projection_distance: ``||P_old - P_new||_F / sqrt(2)``; equals ``sqrt(sum sin^2 angles)``
            for equal ranks (0 = same subspace, sqrt(r) = orthogonal).
        mean_cos2: mean of ``cos^2`` over the principal angles (1 = same, 0 = orthogonal).
    """

    angles: np.ndarray
    max_angle: float
    projection_distance: float
    mean_cos2: float

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (angles as a list) for JSON or a results table."""
        return {
            "angles": [float(a) for a in self.angles],
            "max_angle": self.max_angle,
            "projection_distance": self.projection_distance,
            "mean_cos2": self.mean_cos2,
        }


def subspace_drift(Q_old: ArrayLike, Q_new: ArrayLike) -> SubspaceDrift:
    """Drift between two subspaces (see :class:`SubspaceDrift`); both ``(d, r)`` orthonormal."""
    Q_old = as_basis(Q_old, name="Q_old")
    Q_new = as_basis(Q_new, d=Q_old.shape[0], name="Q_new")
    angles = principal_angles(Q_old, Q_new)
    cos2 = np.cos(angles) ** 2
    r1, r2 = Q_old.shape[1], Q_new.shape[1]
    dist2 = max(r1 + r2 - 2.0 * float(np.sum(cos2)), 0.0)
    if r1 == r2:  # accurate for tiny angles
        dist2 = 2.0 * float(np.sum(np.sin(angles) ** 2))
    return SubspaceDrift(
        angles=angles,
        max_angle=float(angles.max()),
        projection_distance=float(np.sqrt(dist2 / 2.0)),
        mean_cos2=float(np.mean(cos2)),
    )

"""Reusable validators for the measurement core (and any package that wants them).

Every validator turns a numpy array, a torch tensor or a nested list into a float64 numpy array,
or raises a typed :mod:`tangentlab.errors` error whose message says what was wrong and what would
be right. Accepted dtypes: real floating point and integers (converted to float64). Rejected:
complex, bool, object, string/bytes, datetime.

Conventions: a point cloud has shape ``(n_samples, dim)``; a moment matrix has shape ``(d, d)``;
a basis has shape ``(d, r)`` with orthonormal columns.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from tangentlab.errors import (
    DTypeError,
    InsufficientSamplesError,
    NonFiniteError,
    NotOrthonormalError,
    RankError,
    ShapeError,
    ValidationError,
)

__all__ = [
    "to_float64",
    "as_points",
    "as_moment",
    "as_basis",
    "as_vector",
    "check_rank",
    "check_positive_int",
]

_BAD_KINDS = {
    "b": "bool",
    "c": "complex",
    "O": "object",
    "U": "string",
    "S": "bytes",
    "V": "void/structured",
    "M": "datetime",
    "m": "timedelta",
}


def _torch_to_numpy(x: Any, name: str) -> np.ndarray:
    import torch

    if x.is_complex():
        raise DTypeError(f"{name} has complex dtype {x.dtype}; pass a real floating-point tensor")
    if x.dtype == torch.bool:
        raise DTypeError(f"{name} has dtype torch.bool; pass a real floating-point tensor")
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


def to_float64(x: Any, name: str = "array") -> np.ndarray:
    """Convert numpy / torch / nested lists to a float64 numpy array, rejecting bad dtypes.

    Finiteness and shape are not checked here (see :func:`as_points` and friends).
    """
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        return _torch_to_numpy(x, name)
    if isinstance(x, (str, bytes)):
        raise DTypeError(f"{name} is a {type(x).__name__}, not an array; pass a real numeric array")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:  # ragged lists and the like
        raise ShapeError(
            f"{name} could not be read as a rectangular array ({exc}); pass a 2-D numeric array"
        ) from exc
    kind = arr.dtype.kind
    if kind in _BAD_KINDS:
        raise DTypeError(
            f"{name} has {_BAD_KINDS[kind]} dtype {arr.dtype}; pass real floating-point numbers"
        )
    if kind not in "fiu":
        raise DTypeError(f"{name} has unsupported dtype {arr.dtype}; pass real floating-point numbers")
    return np.array(arr, dtype=np.float64, copy=True)


def _check_finite(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        bad = ~np.isfinite(arr)
        if arr.ndim == 2:
            rows = np.flatnonzero(bad.any(axis=1))
            where = f"in {rows.size} row(s), first row {int(rows[0])}"
        else:
            where = f"at {int(bad.sum())} entr(y/ies)"
        raise NonFiniteError(
            f"{name} holds NaN or Inf {where}; drop or repair those rows before measuring"
        )


def as_points(
    X: Any,
    name: str = "X",
    min_rows: int = 1,
    dim: int | None = None,
    check_finite: bool = True,
) -> np.ndarray:
    """Validate a point cloud: returns float64 of shape ``(n, d)`` (always a fresh copy).

    Raises ShapeError (not 2-D, zero columns, wrong ``dim``), DTypeError, NonFiniteError (unless
    ``check_finite=False``: for callers that check a cheaper summary instead), and
    InsufficientSamplesError when fewer than ``min_rows`` rows are given.
    """
    arr = to_float64(X, name)
    if arr.ndim != 2:
        raise ShapeError(
            f"{name} must be a point cloud of shape (n_samples, dim); got {arr.ndim}-D shape "
            f"{arr.shape}" + ("; for one point use X[None, :]" if arr.ndim == 1 else "")
        )
    n, d = arr.shape
    if d < 1:
        raise ShapeError(f"{name} has shape {arr.shape} with no columns; pass dim >= 1")
    if dim is not None and d != dim:
        raise ShapeError(f"{name} has {d} columns but dim {dim} is expected; shape (n, {dim})")
    if n < min_rows:
        raise InsufficientSamplesError(
            f"{name} has {n} row(s) but at least {min_rows} are needed; pass more samples"
        )
    if check_finite:
        _check_finite(arr, name)
    return arr


def as_vector(x: Any, name: str = "x", dim: int | None = None) -> np.ndarray:
    """Validate a single point: returns float64 of shape ``(d,)`` (a ``(1, d)`` row is accepted)."""
    arr = to_float64(x, name)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise ShapeError(f"{name} must be one point of shape (d,); got shape {arr.shape}")
    if dim is not None and arr.shape[0] != dim:
        raise ShapeError(f"{name} has length {arr.shape[0]} but dim {dim} is expected")
    _check_finite(arr, name)
    return arr


def as_moment(
    C: Any, name: str = "C", dim: int | None = None, symmetric_rtol: float = 1e-6
) -> np.ndarray:
    """Validate a moment (second-moment or covariance) matrix: float64 ``(d, d)``, finite, symmetric.

    Symmetry is checked to ``symmetric_rtol`` relative to the largest entry; the returned matrix is
    symmetrised exactly. A negative trace raises ValidationError (a moment matrix is PSD).
    """
    arr = to_float64(C, name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ShapeError(f"{name} must be a square (d, d) moment matrix; got shape {arr.shape}")
    if arr.shape[0] < 1:
        raise ShapeError(f"{name} is empty; pass a (d, d) matrix with d >= 1")
    if dim is not None and arr.shape[0] != dim:
        raise ShapeError(f"{name} has shape {arr.shape} but ({dim}, {dim}) is expected")
    _check_finite(arr, name)
    scale = float(np.max(np.abs(arr))) if arr.size else 0.0
    asym = float(np.max(np.abs(arr - arr.T))) if arr.size else 0.0
    if asym > symmetric_rtol * max(scale, np.finfo(float).tiny):
        raise ValidationError(
            f"{name} is not symmetric (max |C - C^T| = {asym:.3g}, max |C| = {scale:.3g}); pass a "
            "second-moment or covariance matrix such as X.T @ X / n"
        )
    if np.trace(arr) < 0:
        raise ValidationError(f"{name} has negative trace; a moment matrix must be PSD")
    return 0.5 * (arr + arr.T)


def check_rank(r: Any, d: int, name: str = "r") -> int:
    """Check a requested rank: an integer with ``1 <= r < d``. Returns it as int, else RankError."""
    if isinstance(r, (bool, np.bool_)) or not isinstance(r, numbers.Integral):
        raise RankError(f"{name} must be an integer rank, got {r!r}")
    r = int(r)
    if r < 1 or r >= d:
        raise RankError(f"{name}={r} is out of range for dimension d={d}; need 1 <= {name} < d")
    return r


def check_positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """Check an integer count ``>= minimum``; raises ValidationError otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValidationError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise ValidationError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def as_basis(
    Q: Any,
    d: int | None = None,
    check_orthonormal: bool = True,
    atol: float = 1e-6,
    name: str = "Q",
) -> np.ndarray:
    """Validate a subspace basis: float64 ``(d, r)`` with ``1 <= r <= d`` orthonormal columns.

    Orthonormality means ``max |Q^T Q - I| <= atol``; otherwise NotOrthonormalError (use
    :func:`tangentlab.measure.orthonormalize` first). A 1-D vector is read as a (d, 1) basis.
    """
    arr = to_float64(Q, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ShapeError(f"{name} must be a (d, r) basis with columns as vectors; got shape {arr.shape}")
    dd, r = arr.shape
    if d is not None and dd != d:
        raise ShapeError(
            f"{name} has {dd} rows but the ambient dimension is d={d}; a basis is (d, r) with "
            "basis vectors as columns (did you pass (r, d)? then use Q.T)"
        )
    if r < 1:
        raise RankError(f"{name} has {r} columns; a basis needs rank r >= 1")
    if r > dd:
        raise RankError(
            f"{name} has shape {arr.shape}: more columns than rows cannot be orthonormal; a basis "
            "is (d, r) with r <= d (did you pass (r, d)? then use Q.T)"
        )
    _check_finite(arr, name)
    if check_orthonormal:
        err = float(np.max(np.abs(arr.T @ arr - np.eye(r))))
        if err > atol:
            raise NotOrthonormalError(
                f"{name} does not have orthonormal columns (max |Q^T Q - I| = {err:.3g} > "
                f"atol={atol:g}); orthonormalize it first, e.g. tangentlab.measure.orthonormalize(Q)"
            )
    return arr

"""Tests for tangentlab.measure._validate: every bad input raises a typed, explanatory error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tangentlab.errors import (
    DTypeError,
    InsufficientSamplesError,
    NonFiniteError,
    NotOrthonormalError,
    RankError,
    ShapeError,
    ValidationError,
)
from tangentlab.measure._validate import as_basis, as_moment, as_points, check_rank


@pytest.mark.parametrize(
    "X",
    [
        np.ones((3, 2), dtype=complex),
        np.ones((3, 2), dtype=bool),
        np.array([["a", "b"], ["c", "d"]]),
        np.array([[object(), 1]], dtype=object),
        torch.ones(3, 2, dtype=torch.complex64),
        torch.ones(3, 2, dtype=torch.bool),
        "not an array",
    ],
)
def test_bad_dtypes(X):
    with pytest.raises(DTypeError, match="pass (a )?real"):
        as_points(X)


def test_good_inputs_become_float64_copies():
    base = np.arange(6, dtype=np.int32).reshape(3, 2)
    out = as_points(base)
    assert out.dtype == np.float64 and out.shape == (3, 2)
    out[0, 0] = 99
    assert base[0, 0] == 0
    t = torch.arange(6, dtype=torch.bfloat16).reshape(3, 2)
    assert as_points(t).dtype == np.float64
    assert as_points([[1, 2], [3, 4]]).shape == (2, 2)


@given(
    n=st.integers(min_value=1, max_value=20),
    d=st.integers(min_value=1, max_value=6),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
    data=st.data(),
)
def test_nonfinite_rows_named(n, d, bad, data):
    X = np.zeros((n, d))
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    X[i, data.draw(st.integers(min_value=0, max_value=d - 1))] = bad
    with pytest.raises(NonFiniteError, match=f"first row {i}"):
        as_points(X)


def test_shapes_and_counts():
    with pytest.raises(ShapeError, match=r"X\[None, :\]"):
        as_points(np.ones(4))
    with pytest.raises(ShapeError):
        as_points(np.ones((2, 2, 2)))
    with pytest.raises(ShapeError, match="columns but dim 3"):
        as_points(np.ones((4, 2)), dim=3)
    with pytest.raises(InsufficientSamplesError, match="at least 5"):
        as_points(np.ones((4, 2)), min_rows=5)
    with pytest.raises(ShapeError, match="rectangular"):
        as_points([[1.0, 2.0], [3.0]])


def test_moment_validation():
    with pytest.raises(ShapeError, match="square"):
        as_moment(np.ones((2, 3)))
    with pytest.raises(ValidationError, match="symmetric"):
        as_moment(np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValidationError, match="PSD"):
        as_moment(-np.eye(2))
    C = np.array([[2.0, 1.0], [1.0 + 1e-14, 2.0]])
    out = as_moment(C)
    assert np.array_equal(out, out.T)


def test_basis_validation():
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((5, 2)))[0]
    assert as_basis(Q).shape == (5, 2)
    with pytest.raises(NotOrthonormalError, match="orthonormalize"):
        as_basis(Q * 1.01)
    with pytest.raises(RankError, match="Q.T"):
        as_basis(Q.T)
    with pytest.raises(ShapeError, match="d=4"):
        as_basis(Q, d=4)
    assert as_basis(Q[:, 0]).shape == (5, 1)
    assert as_basis(Q * 1.01, check_orthonormal=False).shape == (5, 2)


@pytest.mark.parametrize("r", [0, -1, 5, 6, 2.0, True, "2"])
def test_check_rank_rejects(r):
    with pytest.raises(RankError):
        check_rank(r, 5)


def test_check_rank_accepts_numpy_ints():
    assert check_rank(np.int64(3), 5) == 3

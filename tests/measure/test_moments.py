"""Tests for tangentlab.measure.moments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tangentlab.errors import (
    DTypeError,
    EmptyGroupError,
    InsufficientSamplesError,
    NonFiniteError,
    ShapeError,
    UnknownNameError,
)
from tangentlab.measure import MomentAccumulator, outer_product_sum


@given(
    n=st.integers(min_value=2, max_value=60),
    d=st.integers(min_value=1, max_value=8),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=4),
    seed=st.integers(min_value=0, max_value=10_000),
    offset=st.floats(min_value=-1e3, max_value=1e3),
)
def test_chunked_and_merged_equal_one_pass(n, d, cuts, seed, offset):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) + offset
    labels = rng.integers(0, 3, size=n)
    one = MomentAccumulator(d)
    one.update(X, groups=labels)
    bounds = sorted({0, n, *[c % (n + 1) for c in cuts]})
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        acc = MomentAccumulator(d)
        acc.update(X[a:b], groups=labels[a:b])
        parts.append(acc)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    assert merged.count == one.count == n
    scale = 1 + offset**2
    assert np.allclose(merged.mean(), X.mean(0), atol=1e-9 * (1 + abs(offset)))
    assert np.allclose(merged.second_moment(), X.T @ X / n, rtol=1e-9, atol=1e-9 * scale)
    assert np.allclose(merged.covariance(), np.cov(X.T, ddof=1).reshape(d, d), atol=1e-8)
    for g in one.group_labels:
        Xg = X[labels == g]
        assert merged.group_count(g) == len(Xg)
        assert np.allclose(merged.second_moment(g), Xg.T @ Xg / len(Xg), atol=1e-9 * scale)
        assert np.allclose(merged.outer_sum(g), Xg.T @ Xg, rtol=1e-9, atol=1e-8 * scale)


def test_torch_input_any_dtype_equals_numpy():
    X = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)
    a, b = MomentAccumulator(4), MomentAccumulator(4)
    a.update(X)
    b.update(torch.from_numpy(X))
    assert np.array_equal(a.second_moment(), b.second_moment())
    assert a.second_moment().dtype == np.float64


def test_covariance_stable_with_large_mean():
    rng = np.random.default_rng(0)
    X = 1e8 + rng.standard_normal((1000, 3))
    acc = MomentAccumulator(3)
    for chunk in np.array_split(X, 7):
        acc.update(chunk)
    ref = np.cov((X - 1e8).T)
    assert np.allclose(acc.covariance(), ref, rtol=1e-6, atol=1e-6)


def test_declared_groups_and_copy():
    acc = MomentAccumulator(2, groups=["rare", "frequent"])
    acc.update(np.ones((3, 2)), groups=["rare"] * 3)
    assert acc.group_labels == ("rare", "frequent")
    assert acc.group_count("frequent") == 0
    with pytest.raises(EmptyGroupError, match="frequent"):
        acc.second_moment("frequent")
    with pytest.raises(UnknownNameError):
        acc.update(np.ones((1, 2)), groups=["mid"])
    c = acc.copy()
    c.update(np.zeros((3, 2)), groups=["frequent"] * 3)
    assert acc.count == 3 and c.count == 6
    assert c.mean().tolist() == [0.5, 0.5]


def test_empty_group_and_empty_accumulator():
    acc = MomentAccumulator(3)
    with pytest.raises(InsufficientSamplesError):
        acc.second_moment()
    acc.update(np.ones((1, 3)), groups=[7])
    with pytest.raises(EmptyGroupError, match="no rows"):
        acc.mean(group=8)
    with pytest.raises(InsufficientSamplesError):
        acc.covariance(group=7)  # one row, ddof=1


def test_bad_rows():
    acc = MomentAccumulator(3)
    X = np.ones((4, 3))
    X[2, 1] = np.nan
    with pytest.raises(NonFiniteError, match="row 2"):
        acc.update(X)
    with pytest.raises(NonFiniteError):
        acc.update(torch.tensor([[1.0, float("inf"), 0.0]]))
    with pytest.raises(ShapeError, match=r"\(n, 3\)"):
        acc.update(np.ones((4, 2)))
    with pytest.raises(ShapeError):
        acc.update(np.ones(3))
    with pytest.raises(DTypeError):
        acc.update(np.ones((2, 3), dtype=complex))
    with pytest.raises(DTypeError):
        acc.update(np.ones((2, 3), dtype=bool))
    with pytest.raises(ShapeError, match="one label per row"):
        acc.update(np.ones((2, 3)), groups=[1])
    with pytest.raises(ShapeError):
        acc.merge(MomentAccumulator(4))
    assert acc.count == 0  # nothing half-applied


def test_outer_product_sum():
    X = np.arange(6.0).reshape(3, 2)
    assert np.allclose(outer_product_sum(X), X.T @ X)


def test_tiny_variance_direction_under_a_large_mean_keeps_its_digits():
    # Issue 10, item 7: the old fast path (S - n m m^T when n|m|^2 <= 1e3 tr(M2)) bounded the
    # error relative to the trace only; this direction's variance (1e-12) came out 27% wrong.
    rng = np.random.default_rng(0)
    n, d = 1000, 3
    basis = np.linalg.qr(rng.standard_normal((d, d)))[0]
    coef = rng.standard_normal((n, d)) * np.array([1.0, 1.0, 1e-6])
    X = 30.0 * basis[:, 0] + 30.0 * np.ones(d) / np.sqrt(d) + coef @ basis.T
    acc = MomentAccumulator(d)
    for chunk in np.array_split(X, 4):
        acc.update(chunk)
    u = basis[:, 2]
    ref = u @ np.cov(X.T) @ u
    # evaluating u^T C u with O(1) entries alone costs ~eps absolute (1e-4 relative here), so the
    # tolerance is 1e-3; the old fast path was off by 0.27.
    assert abs(u @ acc.covariance() @ u - ref) / ref < 1e-3
    assert abs(np.linalg.eigvalsh(acc.covariance())[0] - ref) / ref < 1e-3

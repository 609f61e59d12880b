"""Tests for tangentlab.measure.subspace."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tangentlab.errors import NotOrthonormalError, RankError, ShapeError
from tangentlab.measure import (
    complement_basis,
    normal_controls,
    orthonormalize,
    principal_angles,
    projector,
    random_subspace,
    subspace_drift,
)

dims = st.integers(min_value=2, max_value=24)


@st.composite
def dim_rank_seed(draw, max_frac=1.0):
    d = draw(dims)
    r = draw(st.integers(min_value=1, max_value=max(1, int((d - 1) * max_frac))))
    seed = draw(st.integers(min_value=0, max_value=2**31 - 1))
    return d, r, seed


@given(dim_rank_seed())
def test_projectors_idempotent_symmetric_and_complete(drs):
    d, r, seed = drs
    Q = random_subspace(d, r, seed)
    P = projector(Q)
    N = complement_basis(Q)
    PN = projector(N) if N.shape[1] else np.zeros((d, d))
    assert Q.shape == (d, r) and N.shape == (d, d - r)
    assert np.allclose(P @ P, P, atol=1e-12)
    assert np.allclose(P, P.T, atol=1e-14)
    assert np.allclose(P + PN, np.eye(d), atol=1e-12)
    assert np.allclose(Q.T @ N, 0, atol=1e-12)
    assert np.isclose(np.trace(P), r)


@given(dim_rank_seed())
def test_orthonormalize_keeps_span(drs):
    d, r, seed = drs
    A = np.random.default_rng(seed).standard_normal((d, r))
    Q = orthonormalize(A)
    assert np.allclose(Q.T @ Q, np.eye(r), atol=1e-12)
    # span kept: A is reproduced by projecting onto span(Q)
    assert np.allclose(projector(Q) @ A, A, atol=1e-10)


def test_orthonormalize_rejects_rank_deficiency():
    A = np.random.default_rng(0).standard_normal((6, 3))
    A[:, 2] = A[:, 0] - 2 * A[:, 1]
    with pytest.raises(RankError, match="rank deficient"):
        orthonormalize(A)
    with pytest.raises(RankError, match="columns"):
        orthonormalize(np.ones((2, 3)))


@given(dim_rank_seed(max_frac=0.5))
def test_normal_controls_are_orthogonal_and_reproducible(drs):
    d, r, seed = drs
    if 2 * r > d:
        return
    Q = random_subspace(d, r, seed)
    C1 = normal_controls(Q, 4, seed + 1)
    C2 = normal_controls(Q, 4, seed + 1)
    assert C1.shape == (4, d, r)
    assert np.array_equal(C1, C2)
    for c in C1:
        assert np.allclose(c.T @ c, np.eye(r), atol=1e-12)
        assert np.max(np.abs(Q.T @ c)) < 1e-12


def test_normal_controls_differ_across_seeds_and_need_room():
    Q = random_subspace(10, 3, 0)
    assert not np.allclose(normal_controls(Q, 2, 1), normal_controls(Q, 2, 2))
    with pytest.raises(RankError, match="2r <= d"):
        normal_controls(random_subspace(10, 6, 0), 2, 0)


def test_principal_angles_known_values():
    e = np.eye(4)
    th = 0.3
    Q1 = e[:, :2]
    Q2 = np.c_[e[:, 0], np.cos(th) * e[:, 1] + np.sin(th) * e[:, 2]]
    ang = principal_angles(Q1, Q2)
    assert np.allclose(ang, [0.0, th], atol=1e-12)
    assert np.allclose(principal_angles(e[:, :1], e[:, 1:3]), [np.pi / 2])
    tiny = 1e-9
    Q3 = np.c_[np.cos(tiny) * e[:, 0] + np.sin(tiny) * e[:, 3]]
    assert np.isclose(principal_angles(e[:, :1], Q3)[0], tiny, rtol=1e-6)


def test_subspace_drift_fields():
    e = np.eye(5)
    th = 0.4
    Q_new = np.c_[e[:, 0], np.cos(th) * e[:, 1] + np.sin(th) * e[:, 4]]
    dr = subspace_drift(e[:, :2], Q_new)
    P1, P2 = projector(e[:, :2]), projector(Q_new)
    assert np.isclose(dr.projection_distance, np.linalg.norm(P1 - P2) / np.sqrt(2))
    assert np.isclose(dr.max_angle, th)
    assert np.isclose(dr.mean_cos2, (1 + np.cos(th) ** 2) / 2)
    assert dr.to_dict()["angles"][1] == pytest.approx(th)
    same = subspace_drift(e[:, :2], e[:, :2])
    assert same.projection_distance == pytest.approx(0.0, abs=1e-12)


def test_haar_distribution_first_coordinate():
    # Haar: the squared first coordinate of a random unit vector in R^d has mean 1/d.
    d = 6
    vals = np.array([random_subspace(d, 1, s)[0, 0] ** 2 for s in range(3000)])
    assert abs(vals.mean() - 1 / d) < 4 * vals.std() / np.sqrt(vals.size)


def test_random_subspace_bad_rank():
    with pytest.raises(RankError):
        random_subspace(5, 0, 0)
    with pytest.raises(RankError):
        random_subspace(5, 5, 0)
    with pytest.raises(RankError):
        random_subspace(5, 2.5, 0)


def test_non_orthonormal_q_rejected():
    A = np.random.default_rng(1).standard_normal((6, 2))
    with pytest.raises(NotOrthonormalError, match="orthonormalize"):
        projector(A)
    with pytest.raises(NotOrthonormalError):
        normal_controls(A, 3, 0)
    with pytest.raises(ShapeError, match="Q.T"):
        principal_angles(np.eye(6)[:, :2], np.eye(6)[:, :2].T[:, :5])

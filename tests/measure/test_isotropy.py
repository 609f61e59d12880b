"""Tests for tangentlab.measure.isotropy, including a reference check against IsoScore."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import special_ortho_group

from tangentlab.errors import DTypeError, NonFiniteError, RankError, ShapeError, ValidationError
from tangentlab.measure import (
    effective_rank,
    isoscore,
    isoscore_star,
    mean_cosine,
    participation_ratio,
    top_variance_share,
)


def _cloud(seed: int, n: int, d: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * rng.uniform(0.2, 3.0, size=d) + rng.normal(size=d)


METRICS = {
    "isoscore": lambda X: isoscore(X),
    "isoscore_star": lambda X: isoscore_star(X, zeta=0.3),
    "mean_cosine": lambda X: mean_cosine(X, n_pairs=500, seed=1),
    "erank_sigma": lambda X: effective_rank(X, variant="sigma"),
    "erank_sigma2": lambda X: effective_rank(X, variant="sigma2"),
    "erank_uncentred": lambda X: effective_rank(X, centered=False),
    "participation_ratio": lambda X: participation_ratio(X),
    "top2_share": lambda X: top_variance_share(X, 2),
}


@given(
    seed=st.integers(min_value=0, max_value=10_000),
    d=st.integers(min_value=3, max_value=10),
    scale=st.floats(min_value=1e-3, max_value=1e3),
)
def test_rotation_and_scale_invariance(seed, d, scale):
    X = _cloud(seed, 40, d)
    R = special_ortho_group.rvs(d, random_state=seed)
    for name, f in METRICS.items():
        base = f(X)
        assert f(X @ R) == pytest.approx(base, rel=1e-7, abs=1e-9), name
        assert f(scale * X) == pytest.approx(base, rel=1e-7, abs=1e-9), name


def test_isoscore_star_with_absolute_identity_is_not_scale_invariant():
    X = _cloud(0, 200, 5)
    a = isoscore_star(X, zeta=0.5, C0="identity")
    b = isoscore_star(100 * X, zeta=0.5, C0="identity")
    assert a > b + 0.05  # the identity target dominates a small-scale cloud


def test_isoscore_extremes():
    rng = np.random.default_rng(0)
    iso = rng.standard_normal((20_000, 8))
    assert isoscore(iso) > 0.98
    line = np.outer(rng.standard_normal(500), rng.standard_normal(8))
    assert isoscore(line) < 1e-6
    assert isoscore(cov=np.eye(8)) == pytest.approx(1.0)
    assert isoscore(cov=np.diag([1.0] + [0.0] * 7)) == pytest.approx(0.0, abs=1e-12)
    # zeta = 0 is IsoScore; zeta = 1 with an isotropic target is 1
    X = _cloud(2, 300, 6)
    assert isoscore_star(X, zeta=0.0) == pytest.approx(isoscore(X))
    assert isoscore_star(X, zeta=1.0) == pytest.approx(1.0)


def test_reference_isoscore_package():
    IsoScore = pytest.importorskip("IsoScore.IsoScore")
    for seed, (n, d) in enumerate([(300, 5), (1000, 16), (50, 30)]):
        X = _cloud(seed, n, d)
        # the package's code wants (n_samples, dim), like ours (its README says otherwise)
        ref = float(IsoScore.IsoScore(X))
        assert isoscore(X) == pytest.approx(ref, rel=1e-5, abs=1e-6)
        C0 = np.cov(_cloud(seed + 100, 5000, d).T)
        import torch

        ref_star = float(IsoScore.IsoScore_star(X, torch.from_numpy(C0), 0.4))
        assert isoscore_star(X, zeta=0.4, C0=C0) == pytest.approx(ref_star, rel=1e-5, abs=1e-6)
        ref_cov = float(IsoScore.IsoScore_cov(C0))
        assert isoscore(cov=C0) == pytest.approx(ref_cov, rel=1e-5, abs=1e-6)
        # and the transposed (dims, n) convention gives a different number: shape matters
        # (only on the small cloud: the transposed covariance is n x n)
        if n <= 60:
            assert float(IsoScore.IsoScore(X.T)) != pytest.approx(isoscore(X), rel=1e-3)


def test_spectral_metrics_known_values():
    lam = np.array([4.0, 1.0, 1.0, 0.0])
    C = np.diag(lam)
    assert participation_ratio(cov=C) == pytest.approx(36 / 18)
    assert top_variance_share(cov=C, k=1) == pytest.approx(4 / 6)
    p2 = lam[:3] / 6
    assert effective_rank(cov=C, variant="sigma2") == pytest.approx(np.exp(-np.sum(p2 * np.log(p2))))
    s = np.sqrt(lam[:3])
    p1 = s / s.sum()
    assert effective_rank(cov=C, variant="sigma") == pytest.approx(np.exp(-np.sum(p1 * np.log(p1))))
    assert effective_rank(cov=np.eye(5)) == pytest.approx(5.0)


def test_mean_cosine_cone_and_sphere():
    rng = np.random.default_rng(0)
    assert abs(mean_cosine(rng.standard_normal((2000, 16)), n_pairs=5000)) < 0.03
    cone = rng.standard_normal((2000, 16)) * 0.1 + np.r_[1.0, np.zeros(15)]
    assert mean_cosine(cone, n_pairs=5000) > 0.8


def test_bad_inputs():
    X = _cloud(0, 20, 4)
    bad = X.copy()
    bad[3, 2] = np.nan
    for f in (isoscore, participation_ratio, mean_cosine):
        with pytest.raises(NonFiniteError):
            f(bad)
    with pytest.raises(ShapeError):
        isoscore(X[0])
    with pytest.raises(DTypeError):
        isoscore(X.astype(complex))
    with pytest.raises(DTypeError):
        isoscore(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(ValidationError, match="exactly one"):
        isoscore(X, cov=np.eye(4))
    with pytest.raises(ValidationError, match="variant"):
        effective_rank(X, variant="sigma3")
    with pytest.raises(ValidationError, match="zeta"):
        isoscore_star(X, zeta=1.5)
    with pytest.raises(ShapeError):
        isoscore_star(X, zeta=0.2, C0=np.eye(3))
    with pytest.raises(RankError):
        top_variance_share(X, 5)
    with pytest.raises(ValidationError, match="zero row"):
        mean_cosine(np.r_[X, np.zeros((1, 4))])
    with pytest.raises(ValidationError, match="zero"):
        isoscore(np.ones((10, 4)))


@pytest.mark.parametrize(("d", "r", "rank"), [(64, 8, 64), (64, 8, 20), (16, 3, 16), (40, 1, 5)])
def test_isoscore_star_after_removal_equals_the_eigenvalue_route(d, r, rank):
    """The closed form (traces and Frobenius norms) gives what B_iᵀ C B_i's eigenvalues give."""
    from tangentlab.measure import complement_basis, isoscore_star_after_removal, normal_controls

    rng = np.random.default_rng(d + r + rank)
    X = rng.standard_normal((300, rank)) @ rng.standard_normal((rank, d)) * np.exp(
        rng.standard_normal(d))
    C = X.T @ X / 300  # rank-deficient when rank < d: zero eigenvalues stay in the complement
    Q = np.linalg.qr(rng.standard_normal((d, r)))[0]
    bases = np.concatenate([Q[None], normal_controls(Q, 6, 0)])
    for zeta in (0.2, 0.0, 1.0):
        got = isoscore_star_after_removal(C, bases, zeta=zeta)
        want = np.array([isoscore_star(cov=complement_basis(b).T @ C @ complement_basis(b),
                                       zeta=zeta) for b in bases])
        assert got.shape == (7,)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_isoscore_star_after_removal_rejects_bad_shapes():
    from tangentlab.measure import isoscore_star_after_removal

    C = np.eye(8)
    with pytest.raises(ShapeError, match=r"shape \(k, 8, r\)"):
        isoscore_star_after_removal(C, np.zeros((8, 2)))
    with pytest.raises(ShapeError, match="dimension 1"):
        isoscore_star_after_removal(C, np.eye(8)[None, :, :7])
    with pytest.raises(ValidationError, match="zeta"):
        isoscore_star_after_removal(C, np.eye(8)[None, :, :2], zeta=2.0)

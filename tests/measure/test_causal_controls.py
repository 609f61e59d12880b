"""Controls matched to Q_T on rank and removed variance, and the paired dose-response excess."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import RankError, ValidationError
from tangentlab.measure import (
    curve_at,
    dose_plan,
    paired_excess,
    removed_variance,
    spectrum_weighted_controls,
    strength_for,
)


def _rogue(d=32):
    return np.diag(np.r_[100.0, np.linspace(2.0, 0.5, d - 1)])


def test_spectrum_weighted_controls_are_rank_r_orthonormal_and_disjoint_from_q():
    d, r = 24, 3
    cov = np.diag(np.linspace(5, 0.1, d))
    Q = np.eye(d)[:, :r]
    C = spectrum_weighted_controls(Q, cov, 50, seed=0)
    assert C.shape == (50, d, r)
    assert np.allclose(np.einsum("ndk,ndl->nkl", C, C), np.eye(r), atol=1e-10)
    assert np.abs(np.einsum("dq,ndk->nqk", Q, C)).max() < 1e-10
    # the importance draw removes more variance than Haar draws of the same complement
    from tangentlab.measure import normal_controls

    v_w = np.einsum("ndk,ndk->n", C, np.einsum("ij,njk->nik", cov, C)).mean()
    H = normal_controls(Q, 50, 0)
    v_h = np.einsum("ndk,ndk->n", H, np.einsum("ij,njk->nik", cov, H)).mean()
    assert v_w > 1.2 * v_h


def test_a_rank_r_control_needs_a_complement_of_r_dimensions():
    with pytest.raises(RankError, match="at most 2"):
        spectrum_weighted_controls(np.eye(5)[:, :3], np.eye(5), 2, seed=0)


def test_strength_removes_the_target_exactly():
    for full, target in ((4.0, 1.0), (4.0, 4.0), (2.5, 0.3)):
        s = strength_for(target, full)
        assert 0 < s <= 1 and (2 * s - s * s) * full == pytest.approx(target)
        B = np.sqrt(s) * np.eye(6)[:, :2]
        cov = np.diag([full / 2, full / 2, 1, 1, 1, 1])
        assert removed_variance(B, cov) == pytest.approx(target)
    with pytest.raises(ValidationError):
        strength_for(1.0, 0.0)


@pytest.mark.parametrize("name, cov, r", [
    ("1/i spectrum, d=128", np.diag(1.0 / np.arange(1, 129)), 8),
    ("rogue dimension", _rogue(), 4),
])
def test_controls_exist_and_match_rank_and_variance_where_complement_controls_cannot(name, cov, r):
    d = cov.shape[0]
    Q = np.eye(d)[:, :r]  # the top-r PCA subspace
    # the complement holds less variance than Q: no complement control could remove as much
    full, _ = np.linalg.qr(Q, mode="complete")
    assert removed_variance(full[:, r:], cov) < removed_variance(Q, cov)
    plan = dose_plan(Q, cov, 5, seed=0)
    assert plan.bases.shape == (2, 6, d, r)  # every edit rank r
    assert np.allclose(plan.removed_variance, plan.targets[:, None], rtol=1e-10)
    assert np.all(plan.strengths > 0) and np.all(plan.strengths <= 1)
    assert plan.targets[-1] == pytest.approx(plan.v_max) and plan.v_max <= plan.full_variance.min()
    assert plan.strengths[-1, 0] < 1  # Q_T is ablated partially to the controls' dose


def test_the_plan_rejects_bad_levels_and_an_empty_spectrum():
    Q = np.eye(8)[:, :2]
    with pytest.raises(ValidationError):
        dose_plan(Q, np.eye(8), 3, seed=0, levels=(1.0, 0.5))
    with pytest.raises(RankError):
        dose_plan(Q, np.diag([1.0, 1.0] + [0.0] * 6), 3, seed=0)


def test_paired_excess_reads_a_known_excess_with_an_interval_that_covers_it():
    rng = np.random.default_rng(0)
    nb, m = 12, 5
    idx = np.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]])
    L = np.full((nb, 13), 300.0) + rng.normal(0, 0.3, (nb, 13))
    L[:, idx[0, 1:]] += 30 + rng.normal(0, 1, m)  # controls +0.3 nats per target at level 0
    L[:, idx[0, 0]] += 40  # Q_T +0.4
    L[:, idx[1, 1:]] += 60 + rng.normal(0, 1, m)
    L[:, idx[1, 0]] += 90
    dr = paired_excess(L, np.full_like(L, 100.0), idx, [1.0, 2.0], n_boot=400, confidence=0.95,
                       seed=0)
    assert dr.excess == pytest.approx([0.1, 0.3], abs=0.03)
    assert np.all(dr.excess_lo < dr.excess) and np.all(dr.excess < dr.excess_hi)
    assert dr.excess_lo[1] > 0 and dr.p_value[1] <= 0.01
    assert np.all(dr.control_min <= dr.control) and np.all(dr.control <= dr.control_max)
    one = paired_excess(L[:1], np.full_like(L[:1], 100.0), idx, [1.0, 2.0], n_boot=10,
                        confidence=0.95, seed=0)
    assert np.isnan(one.excess_lo).all() and np.isfinite(one.excess).all()


def test_redrawing_controls_widens_the_interval_when_controls_disagree():
    rng = np.random.default_rng(1)
    nb = 16
    idx = np.array([[1, 2, 3, 4]])
    base = np.full((nb, 5), 100.0) + rng.normal(0, 0.05, (nb, 5))
    agree, disagree = base.copy(), base.copy()
    agree[:, 2:] += 10
    disagree[:, 2:] += np.array([0.0, 10.0, 20.0])  # same mean, very different controls
    w = [paired_excess(x, np.full_like(x, 100.0), idx, [1.0], n_boot=400, confidence=0.95,
                       seed=0) for x in (agree, disagree)]
    width = [float(d.excess_hi[0] - d.excess_lo[0]) for d in w]
    assert width[1] > 5 * width[0]


def test_curve_is_exact_for_a_quadratic_through_the_origin():
    x = np.array([1.0, 2.0])
    assert curve_at(x, 0.5 * x + 0.25 * x ** 2, 4.0) == pytest.approx(0.5 * 4 + 0.25 * 16)
    assert curve_at([2.0], [1.0], 6.0) == pytest.approx(3.0)
    assert np.isnan(curve_at([np.nan], [1.0], 1.0))

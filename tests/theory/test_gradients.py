"""gradient-components: alignment constant, counterexample, corrected ratio, mutations."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from tangentlab.errors import ShapeError, ValidationError
from tangentlab.theory import get
from tangentlab.theory.gradients import (
    alignment_constant,
    dimension_factor,
    normal_part_bound,
    ratio_bound,
    tangent_part_bound,
)


def test_alignment_constant_known_values():
    rng = np.random.default_rng(0)
    u = rng.standard_normal((100_000, 2))
    # g = u exactly: E[g u^T] = I, ||I||_F = sqrt(2), G_rms = t sqrt(m) -> c = sqrt(2)/sqrt(2) = 1
    assert alignment_constant(u, u) == pytest.approx(1.0, rel=0.02)
    # g independent of u: c -> 0
    assert alignment_constant(rng.standard_normal((100_000, 3)), u) < 0.02
    # Cauchy-Schwarz range [0, sqrt(m)]: rank-one g = (u1 + u2) e_1 reaches it up to sampling
    g = np.zeros((100_000, 3))
    g[:, 0] = u[:, 0] + u[:, 1]
    assert alignment_constant(g, u) <= np.sqrt(2) + 1e-9
    with pytest.raises(ShapeError):
        alignment_constant(u[:, 0], u)
    with pytest.raises(ShapeError):
        alignment_constant(u[:10], u)
    with pytest.raises(ValidationError):
        alignment_constant(np.zeros((5, 2)), u[:5])


def test_counterexample_independent_monte_carlo():
    rng = np.random.default_rng(1)
    t = 0.2
    u = t * rng.standard_normal(200_000)
    u = np.concatenate([u, -u])  # symmetric
    x = np.stack([u, u**2], 1)  # parabola
    g = np.tile([0.5, 1.5], (len(u), 1))  # constant upstream gradient
    gw = g.T @ x / len(u)
    tangent, normal = np.linalg.norm(gw[:, 0]), np.linalg.norm(gw[:, 1])
    assert tangent < 1e-12
    assert normal == pytest.approx(np.linalg.norm([0.5, 1.5]) * t**2, rel=0.02)
    assert alignment_constant(g, u[:, None]) < 1e-12  # c = 0: the bound does not apply


def test_corrected_ratio_bound_independent_monte_carlo():
    rng = np.random.default_rng(2)
    m, n, D = 2, 200_000, 5
    kappa = 1.7  # codim-1 umbilic-like chart: II(v, v) = kappa |v|^2 n
    for t in (0.05, 0.1, 0.2):
        u = t * rng.standard_normal((n, m))
        g = u @ rng.standard_normal((m, 3)) / t + 0.5 * rng.standard_normal((n, 3))
        x = np.zeros((n, D))
        x[:, :m] = u
        x[:, m] = 0.5 * kappa * np.sum(u * u, 1)
        gw = g.T @ x / n
        ratio = np.linalg.norm(gw[:, m:]) / np.linalg.norm(gw[:, :m])
        c = alignment_constant(g, u)
        t_hat = np.sqrt(np.mean(np.sum(u * u, 1)) / m)
        assert ratio <= ratio_bound(kappa, t_hat, c, m)
        g_rms = np.sqrt(np.mean(np.sum(g * g, 1)))
        assert np.linalg.norm(gw[:, :m]) <= tangent_part_bound(g_rms, t_hat, m) * 1.01
        assert np.linalg.norm(gw[:, m:]) <= normal_part_bound(g_rms, kappa, t_hat, m) * 1.01


def test_ratio_bound_formula_and_scaling():
    assert ratio_bound(2.0, 0.1, 0.5, 2) == pytest.approx(2.0 * 0.1 * np.sqrt(8) / 1.0)
    assert dimension_factor(3) == pytest.approx(np.sqrt(15))
    assert dimension_factor(3, "ball") == pytest.approx(np.sqrt(3 * 25 / 7))
    assert ratio_bound(1.0, 0.2, 1.0, 2) == pytest.approx(2 * ratio_bound(1.0, 0.1, 1.0, 2))
    with pytest.raises(ValidationError):
        ratio_bound(1.0, 0.1, 0.0, 2)


def test_mutation_normal_coefficient_fails_verify():
    d = get("gradient-components").mutated("chart", lambda e: sp.Eq(e.lhs, 1))
    rep = d.verify(seed=0)
    assert not rep.passed
    assert "monte-carlo decomposition and corrected ratio" in {c.name for c in rep.failures}


def test_monte_carlo_ratio_check_has_teeth():
    # Issue 10, item 7: with g linear in u the bound held with 100-400x slack, so a ratio bound
    # off by a factor 2 (either way) still passed verify(). Now g is quadratic in u along II.
    from tangentlab.theory.gradients import MC_MAX_SLACK, mc_ratio_slack

    old = mc_ratio_slack(0, linear=True)
    new = mc_ratio_slack(0)
    assert old > 100
    assert 1.0 < new < MC_MAX_SLACK
    for factor in (0.5, 2.0):
        d = get("gradient-components").mutated("ratio_bound",
                                               lambda e, f=factor: e.func(e.lhs, e.rhs * f))
        rep = d.verify(seed=0)
        assert "monte-carlo decomposition and corrected ratio" in {c.name for c in rep.failures}

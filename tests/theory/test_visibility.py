"""curvature-visibility: independent Monte Carlo, hypothesis properties, mutations."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from tangentlab.errors import ValidationError
from tangentlab.theory import get
from tangentlab.theory.visibility import (
    centroid_shift,
    normal_variance,
    tangent_variance,
    visibility,
)


def _shapes(rng, m, codim):
    A = rng.standard_normal((codim, m, m))
    return (A + A.transpose(0, 2, 1)) / 2


def _sample_x(rng, n, m, A, t, law, D):
    if law == "gaussian":
        u = t * rng.standard_normal((n, m))
    else:  # uniform in the ball: rejection from the cube (independent of the package sampler)
        u = np.empty((0, m))
        while len(u) < n:
            c = rng.uniform(-t, t, size=(2 * n, m))
            u = np.concatenate([u, c[np.sum(c * c, 1) <= t * t]])
        u = u[:n]
    frame, _ = np.linalg.qr(rng.standard_normal((D, D)))
    J, N = frame[:, :m], frame[:, m:m + len(A)]
    x = u @ J.T + 0.5 * np.einsum("ni,aij,nj->na", u, A, u) @ N.T
    return x, J, N


@pytest.mark.parametrize("law", ["gaussian", "ball"])
@pytest.mark.parametrize("m", [1, 3])
def test_visibility_matches_independent_monte_carlo(law, m):
    rng = np.random.default_rng(11 + m)
    A = _shapes(rng, m, 2)
    ii2 = float(np.sum(A**2))
    s = float(np.sum(np.trace(A, axis1=1, axis2=2) ** 2))
    t, n = 0.4, 300_000
    x, J, N = _sample_x(rng, n, m, A, t, law, D=m + 3)
    C = np.cov(x, rowvar=False)
    tv, nv = np.trace(J.T @ C @ J), np.trace(N.T @ C @ N)
    assert tv == pytest.approx(tangent_variance(t, m, law), rel=0.02)
    assert nv == pytest.approx(normal_variance(t, ii2, m, law, trace_sq_sum=s), rel=0.05)
    assert nv / tv == pytest.approx(visibility(t, ii2, m, law, trace_sq_sum=s), rel=0.05)
    shift = np.linalg.norm(x.mean(0) @ N)
    assert shift == pytest.approx(centroid_shift(t, np.sqrt(s), m, law), rel=0.05)
    # cross-covariance vanishes
    assert np.max(np.abs(J.T @ C @ N)) < 0.02 * np.sqrt(tv * nv)


def test_gaussian_formula_and_ball_needs_trace():
    assert visibility(0.3, 2.0, 2) == pytest.approx(0.3**2 * 2.0 / 4)
    with pytest.raises(ValidationError, match="trace_sq_sum"):
        visibility(0.3, 2.0, 2, "ball")
    with pytest.raises(ValidationError, match="swapped"):
        visibility(0.3, 1.0, 2, "ball", trace_sq_sum=5.0)
    out = visibility(np.array([0.1, 0.2]), 1.0, np.array([1, 2]))
    assert out.shape == (2,)


@given(t=st.floats(0.01, 5.0), k=st.floats(0.1, 10.0), ii=st.floats(0.0, 50.0),
       m=st.integers(1, 8), law=st.sampled_from(["gaussian", "ball"]))
def test_visibility_scales_as_t_squared(t, k, ii, m, law):
    s = ii * m * 0.3
    v1 = visibility(t, ii, m, law, trace_sq_sum=s)
    v2 = visibility(k * t, ii, m, law, trace_sq_sum=s)
    assert v2 == pytest.approx(k**2 * v1, rel=1e-9, abs=1e-300)


@given(seed=st.integers(0, 2**16))
def test_visibility_is_invariant_to_frame_rotation(seed):
    rng = np.random.default_rng(seed)
    m, codim = 2, 2
    A = _shapes(rng, m, codim)
    # rotate the tangent frame (A -> R^T A R) and the normal frame (mix the A_a orthogonally)
    R, _ = np.linalg.qr(rng.standard_normal((m, m)))
    Qn, _ = np.linalg.qr(rng.standard_normal((codim, codim)))
    B = np.einsum("ab,bij->aij", Qn, np.einsum("ki,bkl,lj->bij", R, A, R))
    inv = [(float(np.sum(X**2)), float(np.sum(np.trace(X, axis1=1, axis2=2) ** 2))) for X in (A, B)]
    assert inv[0] == pytest.approx(inv[1], rel=1e-9)
    for law in ("gaussian", "ball"):
        va = visibility(0.5, inv[0][0], m, law, trace_sq_sum=inv[0][1])
        vb = visibility(0.5, inv[1][0], m, law, trace_sq_sum=inv[1][1])
        assert va == pytest.approx(vb, rel=1e-9)
    # and the sample visibility of one point cloud does not depend on the ambient frame
    u = 0.5 * rng.standard_normal((2000, m))
    q = 0.5 * np.einsum("ni,aij,nj->na", u, A, u)
    base = np.concatenate([u, q], 1)
    Q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    vis = []
    for F in (np.eye(4), Q):
        x = base @ F.T
        C = np.cov(x, rowvar=False)
        vis.append(np.trace(F[:, 2:].T @ C @ F[:, 2:]) / np.trace(F[:, :2].T @ C @ F[:, :2]))
    assert vis[0] == pytest.approx(vis[1], rel=1e-9)


def test_mutation_drop_half_fails_verify():
    d = get("curvature-visibility").mutated("chart", lambda e: sp.Eq(e.lhs, 2 * e.rhs))
    rep = d.verify(seed=0)
    assert not rep.passed
    failed = {c.name for c in rep.failures}
    assert "gaussian visibility equals t^2 ||II||^2/(2m)" in failed
    assert "monte-carlo visibility and centroid" in failed


def test_mutation_t_cubed_fails_verify():
    T = get("curvature-visibility").symbols["t"]
    d = get("curvature-visibility").mutated("moments_gaussian", lambda e: e.subs(T**2, T**3))
    rep = d.verify(seed=0)
    assert not rep.passed
    assert any(c.name.startswith("explicit m=2 gaussian") for c in rep.failures)


def test_next_order_curve_matches_quadrature():
    from tangentlab.theory.visibility import visibility_curve_next_order

    x, w = np.polynomial.hermite_e.hermegauss(40)  # exact for these polynomial moments
    w = w / w.sum()
    kappa, a3, b3, b4 = 1.3, 0.4, -0.7, 0.9
    errs = []
    for t in (0.02, 0.04, 0.08):
        u = t * x
        tan = u + a3 * u**3
        nor = kappa * u**2 / 2 + b3 * u**3 + b4 * u**4
        v = (w @ nor**2 - (w @ nor) ** 2) / (w @ tan**2 - (w @ tan) ** 2)
        pred = visibility_curve_next_order(t, kappa, a3, b3, b4)
        lead = kappa**2 * t**2 / 2
        assert abs(v - pred) < 0.05 * abs(v - lead)  # the t^4 term captures the correction
        errs.append(abs(v - pred))
    # remainder is O(t^6): doubling t multiplies it by about 64
    assert errs[2] / errs[1] == pytest.approx(64, rel=0.25)

"""Manifolds with ground truth: frames, II, curvature constants, Gauss equation, geomstats cross-checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tangentlab.errors import RankError, ShapeError, UnknownNameError, ValidationError
from tangentlab.synthetic._geometry import gauss_equation_riemann, immersion_geometry
from tangentlab.synthetic.manifolds import (
    Circle,
    FlatTorus,
    Helix,
    HyperbolicPlane,
    ProductManifold,
    RandomImmersion,
    Sphere,
    TorusOfRevolution,
    make_manifold,
)

ALL = {
    "circle": lambda: Circle(2.0, ambient_dim=5, rotation_seed=1),
    "helix": lambda: Helix(1.0, 0.5, ambient_dim=4, rotation_seed=2),
    "sphere": lambda: Sphere(2, 1.5, ambient_dim=6, rotation_seed=3),
    "sphere3": lambda: Sphere(3, 1.0),
    "flat-torus": lambda: FlatTorus(1.0, 2.0, ambient_dim=6, rotation_seed=4),
    "torus": lambda: TorusOfRevolution(2.0, 0.7, ambient_dim=5, rotation_seed=5),
    "hyperbolic": lambda: HyperbolicPlane(ambient_dim=4, rotation_seed=6),
    "product": lambda: ProductManifold(Circle(1.0), Sphere(2, 2.0), ambient_dim=7, rotation_seed=7),
    "immersion": lambda: RandomImmersion(2, 5, ambient_dim=7, rotation_seed=8, seed=3),
}


@pytest.fixture(params=sorted(ALL))
def manifold(request):
    return ALL[request.param]()


def test_frames_orthonormal_and_complementary(manifold):
    x = manifold.sample(9, seed=0)
    f = manifold.frame(x)
    D, m = manifold.ambient_dim, manifold.dim
    assert f.tangent.shape == (9, D, m) and f.normal.shape == (9, D, D - m)
    assert f.ii.shape == (9, D - m, m, m)
    B = np.concatenate([f.tangent, f.normal], axis=2)
    np.testing.assert_allclose(np.einsum("ndi,ndj->nij", B, B), np.broadcast_to(np.eye(D), (9, D, D)), atol=1e-12)
    np.testing.assert_allclose(f.ii, np.swapaxes(f.ii, 2, 3), atol=1e-12)  # symmetric


def test_chart_matches_frame_to_second_order(manifold):
    """(x(hu) - x(-hu))/2h -> J u, and the normal part of x(hu)+x(-hu)-2p -> h² II(u,u)."""
    x = manifold.sample(6, seed=1)
    f = manifold.frame(x)
    u = np.random.default_rng(2).standard_normal((6, manifold.dim))
    h = 1e-3
    plus, minus = manifold.chart(x, h * u), manifold.chart(x, -h * u)
    np.testing.assert_allclose((plus - minus) / (2 * h), np.einsum("ndm,nm->nd", f.tangent, u), atol=1e-5)
    second = np.einsum("nda,nd->na", f.normal, plus + minus - 2 * x) / h**2
    np.testing.assert_allclose(second, np.einsum("naij,ni,nj->na", f.ii, u, u), atol=1e-4)
    # samples and chart images lie on the manifold: the frame at a chart image is still orthonormal
    assert np.all(np.isfinite(manifold.frame(plus).ii))


def test_rotation_and_padding_preserve_geometry():
    a = TorusOfRevolution(2.0, 0.7)
    b = TorusOfRevolution(2.0, 0.7, ambient_dim=8, rotation_seed=11)
    xa = a.sample(5, seed=3)
    xb = b.sample(5, seed=3)
    np.testing.assert_allclose(b.to_native(xb), xa, atol=1e-12)
    np.testing.assert_allclose(a.ii_norm_sq(xa), b.ii_norm_sq(xb), atol=1e-10)
    np.testing.assert_allclose(a.gauss_curvature(xa), b.gauss_curvature(xb), atol=1e-10)
    # the rotation is really used: ambient coordinates differ from padded native ones
    assert np.abs(xb[:, :3] - xa).max() > 1e-3


@pytest.mark.parametrize("radius", [1.0, 0.5, 3.0])
def test_sphere_curvature_closed_form(radius):
    s = Sphere(2, radius, ambient_dim=5, rotation_seed=0)
    x = s.sample(4, seed=0)
    np.testing.assert_allclose(s.gauss_curvature(x), 1 / radius**2, rtol=1e-12)
    np.testing.assert_allclose(s.ii_norm_sq(x), 2 / radius**2, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), radius, rtol=1e-12)


def _sphere_phi(radius):
    def phi(th):
        a, b = th[0], th[1]
        return radius * torch.stack([torch.sin(a) * torch.cos(b), torch.sin(a) * torch.sin(b), torch.cos(a)])
    return phi


@settings(max_examples=8)
@given(radius=st.floats(0.3, 5.0), seed=st.integers(0, 1000))
def test_torch_func_curvature_of_parametrized_sphere(radius, seed):
    """Our torch.func path, on spherical coordinates (away from the poles): K = 1/R², Γ exact."""
    th = np.random.default_rng(seed).uniform([0.3, -3.0], [2.8, 3.0], size=(5, 2))
    geo = immersion_geometry(_sphere_phi(radius), th)
    K = geo.riemann[:, 0, 1, 0, 1]
    np.testing.assert_allclose(K, 1 / radius**2, rtol=1e-9)
    # Christoffel symbols of R²(da² + sin²a db²): Γ^a_bb = -sin a cos a, Γ^b_ab = cot a
    a = th[:, 0]
    np.testing.assert_allclose(geo.christoffel[:, 0, 1, 1], -np.sin(a) * np.cos(a), atol=1e-10)
    np.testing.assert_allclose(geo.christoffel[:, 1, 0, 1], 1 / np.tan(a), atol=1e-9)
    np.testing.assert_allclose(geo.christoffel[:, 0, 0, 0], 0.0, atol=1e-10)


def test_hyperbolic_plane_is_minus_one():
    h = HyperbolicPlane(ambient_dim=5, rotation_seed=1)
    x = h.sample(20, seed=0)
    np.testing.assert_allclose(h.gauss_curvature(x), -1.0, atol=1e-9)
    # the metric of the half-plane chart (dx² + dy²)/y², in parameters (x, s = ln y):
    # diag(1/y², 1)
    geo = h.geometry(x)
    y = h.halfplane(x)[:, 1]
    expected = np.zeros((20, 2, 2))
    expected[:, 0, 0] = 1 / y**2
    expected[:, 1, 1] = 1.0
    np.testing.assert_allclose(geo.metric, expected, atol=1e-12)
    assert np.all((y >= 1.5 - 1e-12) & (y <= 4.0 + 1e-12))


def test_hyperbolic_distance_geomstats_matches_halfplane_formula():
    h = HyperbolicPlane()
    a, b = h.sample(6, seed=1), h.sample(6, seed=2)
    za, zb = h.halfplane(a), h.halfplane(b)
    closed = np.arccosh(1 + ((za - zb) ** 2).sum(1) / (2 * za[:, 1] * zb[:, 1]))
    np.testing.assert_allclose(h.distance(a, b), closed, rtol=1e-8)


def test_flat_torus_flat_but_extrinsically_curved():
    t = FlatTorus(1.0, 2.0, ambient_dim=6, rotation_seed=2)
    x = t.sample(8, seed=0)
    np.testing.assert_allclose(t.gauss_curvature(x), 0.0, atol=1e-10)
    np.testing.assert_allclose(t.ii_norm_sq(x), 1 + 1 / 4, rtol=1e-10)


def test_torus_of_revolution_gauss_curvature():
    R, r = 2.0, 0.7
    t = TorusOfRevolution(R, r)
    x = t.sample(10, seed=0)
    v = t.params(x)[:, 1]
    np.testing.assert_allclose(t.gauss_curvature(x), np.cos(v) / (r * (R + r * np.cos(v))), atol=1e-10)


def test_curve_curvatures():
    c = Circle(2.5, ambient_dim=4, rotation_seed=0)
    np.testing.assert_allclose(c.ii_norm_sq(c.sample(3, 0)), 1 / 2.5**2, rtol=1e-12)
    a, b = 1.0, 0.5
    h = Helix(a, b)
    np.testing.assert_allclose(np.sqrt(h.ii_norm_sq(h.sample(3, 0))), a / (a**2 + b**2), rtol=1e-10)
    with pytest.raises(RankError):
        c.sectional_curvature(c.sample(2, 0))


@pytest.mark.parametrize("m,D0", [(2, 5), (3, 6)])
def test_gauss_equation_for_random_immersion(m, D0):
    """Intrinsic Riemann (metric only) equals the Gauss equation applied to the extrinsic II."""
    M = RandomImmersion(m, D0, hidden=12, scale=1.5, seed=5)
    x = M.sample(16, seed=0)
    R_int = M.riemann_tensor(x)
    R_ext = gauss_equation_riemann(M.second_fundamental_form(x))
    assert np.abs(R_int).max() > 1e-2  # genuinely curved, so the test has teeth
    np.testing.assert_allclose(R_int, R_ext, atol=1e-10)
    # Riemann symmetries
    np.testing.assert_allclose(R_int, -np.swapaxes(R_int, 3, 4), atol=1e-10)
    np.testing.assert_allclose(R_int, -np.swapaxes(R_int, 1, 2), atol=1e-10)


def test_product_curvature_blocks():
    p = ProductManifold(Sphere(2, 2.0), Circle(1.0))
    x = p.sample(4, seed=0)
    K = p.sectional_curvature(x)
    np.testing.assert_allclose(K[:, 0, 1], 0.25, rtol=1e-12)
    np.testing.assert_allclose(K[:, 0, 2], 0.0, atol=1e-14)
    np.testing.assert_allclose(p.ii_norm_sq(x), 2 / 4 + 1, rtol=1e-12)


def test_sphere_chart_is_geomstats_exp_and_frechet_mean():
    from tangentlab.synthetic.manifolds import _geomstats_hypersphere

    s = Sphere(2, 2.0)
    p = s.sample(1, seed=0)
    u = np.random.default_rng(0).standard_normal((5, 2)) * 0.4
    y = s.chart(p, u)
    T = s.tangent_basis(p)[0]
    gs = _geomstats_hypersphere(2)
    expected = 2.0 * np.asarray(gs.metric.exp((u @ T.T) / 2.0, np.repeat(p / 2.0, 5, 0)))
    np.testing.assert_allclose(y, expected, atol=1e-10)
    np.testing.assert_allclose(s.distance(np.repeat(p, 5, 0), y), np.linalg.norm(u, axis=1), rtol=1e-8)
    cloud = s.chart(p, np.random.default_rng(1).standard_normal((200, 2)) * 0.1)
    mean = s.frechet_mean(cloud)
    assert np.linalg.norm(mean - p[0]) < 0.05


def test_projection_closed_forms():
    for M in (Sphere(2, 1.3, ambient_dim=5, rotation_seed=1), FlatTorus(1.0, 0.5), TorusOfRevolution()):
        x = M.sample(5, seed=0)
        N = M.normal_basis(x)
        off = x + 0.05 * N[:, :, 0]
        np.testing.assert_allclose(M.project(off), x, atol=1e-10)
    with pytest.raises(ValidationError):
        Helix().project(Helix().sample(2, 0))


def test_bad_inputs_raise_typed_errors():
    with pytest.raises(RankError):
        RandomImmersion(3, 3)
    with pytest.raises(RankError):
        Sphere(2, ambient_dim=2)
    with pytest.raises(ValidationError):
        Sphere(2, radius=-1.0)
    with pytest.raises(ValidationError):
        TorusOfRevolution(R=1.0, r=2.0)
    with pytest.raises(ValidationError):
        HyperbolicPlane(y_min=0.5)
    with pytest.raises(ShapeError):
        Sphere(2).tangent_basis(np.zeros((3, 4)))
    with pytest.raises(UnknownNameError):
        make_manifold("klein-bottle")
    assert make_manifold("product:circle*circle").dim == 2
    assert math.isclose(make_manifold("sphere", m=3, radius=2.0).radius, 2.0)


@pytest.mark.parametrize("key", ["sphere", "torus", "immersion", "circle"])
def test_chart_torch_matches_numpy_chart_and_differentiates_at_zero(key):
    M = ALL[key]()
    p = M.sample(1, seed=4)
    u = np.random.default_rng(1).standard_normal((5, M.dim)) * 0.2
    xt = M.chart_torch(p[0], torch.as_tensor(u))
    np.testing.assert_allclose(xt.numpy(), M.chart(p, u), atol=1e-12)
    # at u = 0 the Jacobian is the orthonormal tangent basis
    J = torch.func.jacrev(lambda v: M.chart_torch(p[0], v[None])[0])(torch.zeros(M.dim, dtype=torch.float64))
    np.testing.assert_allclose(J.numpy(), M.tangent_basis(p)[0], atol=1e-10)

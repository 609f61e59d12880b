"""Manifolds with known geometry, isometrically placed in an ambient R^D.

Every space honours one contract (:class:`Manifold`). A space is defined in its *native*
Euclidean space R^{D0} (for example R^3 for the torus of revolution); it is placed in the
ambient R^D (D >= D0) by padding with zeros and applying a seeded random rotation, which is an
isometry, so every intrinsic and extrinsic quantity is preserved (the padded directions are
extra normal directions in which the second fundamental form vanishes).

At a batch of points (shape (n, D)) every manifold gives:

- ``tangent_basis`` (n, D, m), orthonormal; ``normal_basis`` (n, D, D - m), orthonormal;
- ``second_fundamental_form`` (n, D - m, m, m): shape matrices ``A_a[i, j] = <n_a, II(e_i, e_j)>``
  in those frames (symmetric);
- ``riemann_tensor`` (n, m, m, m, m), ``[n, d, c, a, b] = <R(e_a, e_b) e_c, e_d>`` computed
  *intrinsically* (closed form, or from the metric alone with ``torch.func``);
  ``sectional_curvature`` (n, m, m) and, for surfaces, ``gauss_curvature`` (n,);
- ``chart(base, u)``: a chart at each base point in orthonormal tangent coordinates ``u``
  (n, m): its differential at 0 is the tangent basis, and its second-order normal part is
  ``½ II(u, u)``, so it realizes the local chart of the theory,
  ``x(u) = p + J u + ½ Σ_a n_a uᵀA_a u + O(|u|³)``. Spheres use the exponential map (geodesic
  normal coordinates); parametrized manifolds use ``theta = theta(p) + g^{-1/2} u``, whose
  quadratic term also has a tangential (Christoffel) part, which only changes the tangent
  variance at order t⁴;
- ``project(x)``: the nearest point, where it has a closed form (else a ValidationError);
- ``sample(n, seed)``.

Spaces: :class:`Circle`, :class:`Helix`, :class:`Sphere`, :class:`FlatTorus`,
:class:`TorusOfRevolution`, :class:`HyperbolicPlane`, :class:`ProductManifold`,
:class:`RandomImmersion`. :func:`make_manifold` builds one from a name and keyword parameters.

Sign conventions: curvature +1/R² on a sphere of radius R, -1 on the hyperbolic plane; normals
of spheres point inward so their shape matrices are ``+I/R``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass

import numpy as np

from tangentlab.errors import (
    RankError,
    ShapeError,
    UnknownNameError,
    ValidationError,
)
from tangentlab.synthetic._geometry import (
    ImmersionGeometry,
    immersion_geometry,
    sectional_from_riemann,
)

__all__ = [
    "LocalFrame",
    "Manifold",
    "ParametrizedManifold",
    "Circle",
    "Helix",
    "Sphere",
    "FlatTorus",
    "TorusOfRevolution",
    "HyperbolicPlane",
    "ProductManifold",
    "RandomImmersion",
    "MANIFOLDS",
    "make_manifold",
    "random_rotation",
]


def random_rotation(dim: int, seed: int) -> np.ndarray:
    """A Haar-random orthogonal matrix, shape (dim, dim), from a seed (QR with sign fix)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))[None, :]


@dataclass(frozen=True)
class LocalFrame:
    """Tangent frame, normal frame and shape matrices at n points (float64).

    Attributes:
        tangent: shape (n, D, m). normal: shape (n, D, D - m). ii: shape (n, D - m, m, m).
    """

    tangent: np.ndarray
    normal: np.ndarray
    ii: np.ndarray

    @property
    def ii_norm_sq(self) -> np.ndarray:
        """‖II‖²_F = Σ_a tr(A_a²), shape (n,)."""
        return np.einsum("naij,naij->n", self.ii, self.ii)

    @property
    def mean_curvature_vector(self) -> np.ndarray:
        """Σ_a n_a tr(A_a), shape (n, D) (the centroid shift is ½ t² times this)."""
        return np.einsum("nda,na->nd", self.normal, np.einsum("naii->na", self.ii))


class Manifold(abc.ABC):
    """Base contract: an m-dimensional submanifold of R^{D0}, placed isometrically in R^D.

    Args:
        ambient_dim: D (default: the native dimension D0). Must be >= D0 and > m.
        rotation_seed: seed of the random rotation of R^D (``None``: no rotation).
    """

    #: short registry name
    name: str = "manifold"

    def __init__(self, *, ambient_dim: int | None = None, rotation_seed: int | None = None):
        D0 = int(self.native_dim)
        D = D0 if ambient_dim is None else int(ambient_dim)
        if self.dim >= D:
            raise RankError(
                f"{self.name}: manifold dimension m={self.dim} must be below the ambient "
                f"dimension D={D}"
            )
        if D < D0:
            raise ValidationError(
                f"{self.name}: ambient_dim={D} is below the native dimension {D0}; use D >= {D0}"
            )
        self.ambient_dim = D
        self.rotation_seed = rotation_seed
        self._rotation = None if rotation_seed is None else random_rotation(D, int(rotation_seed))

    # -- what each space defines (native coordinates, float64 numpy) -------------------------
    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Intrinsic dimension m."""

    @property
    @abc.abstractmethod
    def native_dim(self) -> int:
        """Dimension D0 of the native Euclidean space."""

    @abc.abstractmethod
    def _native_sample(self, n: int, rng: np.random.Generator) -> np.ndarray: ...

    @abc.abstractmethod
    def _native_frame(self, xn: np.ndarray) -> LocalFrame: ...

    @abc.abstractmethod
    def _native_riemann(self, xn: np.ndarray) -> np.ndarray: ...

    @abc.abstractmethod
    def _native_chart(self, xn: np.ndarray, u: np.ndarray) -> np.ndarray: ...

    def _native_project(self, yn: np.ndarray) -> np.ndarray:
        raise ValidationError(f"{self.name} has no closed-form nearest-point projection")

    # -- the ambient placement ---------------------------------------------------------------
    def _check_points(self, points, what: str = "points") -> np.ndarray:
        x = np.asarray(points, dtype=np.float64)
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2 or x.shape[1] != self.ambient_dim:
            raise ShapeError(
                f"{what} must have shape (n, {self.ambient_dim}) for {self.name} in "
                f"R^{self.ambient_dim}; got {tuple(np.shape(points))}"
            )
        if not np.all(np.isfinite(x)):
            raise ValidationError(f"{what} contain NaN or Inf")
        return x

    def to_native(self, points) -> np.ndarray:
        """Ambient points (n, D) to native coordinates (n, D0) (drops the padded coordinates)."""
        x = self._check_points(points)
        if self._rotation is not None:
            x = x @ self._rotation
        return x[:, : self.native_dim]

    def from_native(self, xn: np.ndarray) -> np.ndarray:
        """Native coordinates (n, D0) to ambient points (n, D)."""
        xn = np.asarray(xn, dtype=np.float64)
        pad = np.zeros((xn.shape[0], self.ambient_dim), dtype=np.float64)
        pad[:, : self.native_dim] = xn
        return pad if self._rotation is None else pad @ self._rotation.T

    def _vectors_from_native(self, v: np.ndarray) -> np.ndarray:
        """Native vectors (n, D0, k) to ambient vectors (n, D, k)."""
        n, _, k = v.shape
        pad = np.zeros((n, self.ambient_dim, k), dtype=np.float64)
        pad[:, : self.native_dim] = v
        return pad if self._rotation is None else np.einsum("de,nek->ndk", self._rotation, pad)

    # -- public contract ---------------------------------------------------------------------
    def sample(self, n: int, seed: int) -> np.ndarray:
        """N points on the manifold, shape (n, D) (the sampling law is stated per space)."""
        if int(n) < 1:
            raise ValidationError(f"n must be >= 1; got {n}")
        return self.from_native(self._native_sample(int(n), np.random.default_rng(seed)))

    def frame(self, points) -> LocalFrame:
        """Tangent frame (n, D, m), normal frame (n, D, D-m) and II (n, D-m, m, m) at once."""
        xn = self.to_native(points)
        f = self._native_frame(xn)
        n, m = xn.shape[0], self.dim
        extra = self.ambient_dim - self.native_dim
        normal = f.normal
        ii = f.ii
        if extra:
            eye = np.zeros((n, self.native_dim + extra, extra))
            eye[:, self.native_dim:, :] = np.eye(extra)
            normal = np.concatenate(
                [np.concatenate([normal, np.zeros((n, extra, normal.shape[2]))], axis=1), eye],
                axis=2,
            )
            ii = np.concatenate([ii, np.zeros((n, extra, m, m))], axis=1)
            tangent = self._vectors_from_native(f.tangent)
            if self._rotation is not None:
                normal = np.einsum("de,nek->ndk", self._rotation, normal)
        else:
            tangent = self._vectors_from_native(f.tangent)
            normal = self._vectors_from_native(normal)
        return LocalFrame(tangent=tangent, normal=normal, ii=ii)

    def tangent_basis(self, points) -> np.ndarray:
        """Orthonormal tangent bases, shape (n, D, m)."""
        return self.frame(points).tangent

    def normal_basis(self, points) -> np.ndarray:
        """Orthonormal normal bases, shape (n, D, D - m)."""
        return self.frame(points).normal

    def second_fundamental_form(self, points) -> np.ndarray:
        """Shape matrices in the normal frame of :meth:`normal_basis`, shape (n, D - m, m, m)."""
        return self.frame(points).ii

    def ii_norm_sq(self, points) -> np.ndarray:
        """‖II‖²_F = Σ_a tr(A_a²) at each point, shape (n,)."""
        return self.frame(points).ii_norm_sq

    def riemann_tensor(self, points) -> np.ndarray:
        """Intrinsic Riemann tensor in the tangent frame, shape (n, m, m, m, m) (see module)."""
        return self._native_riemann(self.to_native(points))

    def sectional_curvature(self, points) -> np.ndarray:
        """Sectional curvature of the coordinate planes (e_a, e_b), shape (n, m, m); diagonal 0."""
        if self.dim < 2:
            raise RankError(f"{self.name} has dimension 1: sectional curvature is not defined")
        return sectional_from_riemann(self.riemann_tensor(points))

    def gauss_curvature(self, points) -> np.ndarray:
        """Gauss curvature of a surface (m = 2), shape (n,)."""
        if self.dim != 2:
            raise RankError(f"Gauss curvature needs a surface (m = 2); {self.name} has m={self.dim}")
        return self.sectional_curvature(points)[:, 0, 1]

    def chart(self, base, u) -> np.ndarray:
        """Chart maps at base points, shape (n, D), from orthonormal tangent coordinates u (n, m).

        ``base`` may be one point (D,) shared by all rows of ``u``.
        """
        b = self._check_points(base, "base")
        u = np.asarray(u, dtype=np.float64)
        if u.ndim == 1 and self.dim == 1:
            u = u[:, None]
        if u.ndim != 2 or u.shape[1] != self.dim:
            raise ShapeError(f"chart coordinates u must have shape (n, {self.dim}); got {u.shape}")
        if b.shape[0] == 1 and u.shape[0] != 1:
            b = np.repeat(b, u.shape[0], axis=0)
        if b.shape[0] != u.shape[0]:
            raise ShapeError(f"base has {b.shape[0]} rows but u has {u.shape[0]}")
        return self.from_native(self._native_chart(self.to_native(b), u))

    def chart_torch(self, base, u):
        """Differentiable chart at one base point: torch u (n, m) -> torch (n, D), float64.

        Same map as :meth:`chart` (spheres and parametrized manifolds, products of them), written
        in torch so that gradients flow from the representation back to the chart coordinates.
        """
        import torch

        b = self._check_points(base, "base")
        if b.shape[0] != 1:
            raise ShapeError("chart_torch takes one base point, shape (D,)")
        xn = self._native_chart_torch(self.to_native(b)[0], u)
        pad = torch.zeros((xn.shape[0], self.ambient_dim - self.native_dim), dtype=xn.dtype)
        x = torch.cat([xn, pad], dim=1)
        if self._rotation is not None:
            x = x @ torch.as_tensor(self._rotation.T, dtype=xn.dtype)
        return x

    def _native_chart_torch(self, xn_base: np.ndarray, u):
        raise ValidationError(f"{self.name} has no differentiable (torch) chart")

    def project(self, points) -> np.ndarray:
        """Nearest points on the manifold, shape (n, D) (closed forms only)."""
        x = self._check_points(points)
        xr = x @ self._rotation if self._rotation is not None else x
        return self.from_native(self._native_project(xr[:, : self.native_dim]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(m={self.dim}, D={self.ambient_dim})"


def _require_positive(name: str, value: float, what: str) -> float:
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValidationError(f"{name}: {what} must be a positive finite number; got {value}")
    return value


# ---------------------------------------------------------------------------------------------
# Spheres and circles (closed forms)
# ---------------------------------------------------------------------------------------------
class Sphere(Manifold):
    """The sphere S^m of radius R in R^{m+1} (closed forms everywhere).

    Sampling: uniform (normalized Gaussians). Chart: the exponential map (geodesic normal
    coordinates), ``exp_p(v) = cos(|v|/R) p + R sin(|v|/R) v/|v|``. II: ``A = I/R`` for the inward
    normal ``-p/R``. Curvature ``1/R²``. Projection: ``R x/|x|``.
    """

    name = "sphere"

    def __init__(self, m: int = 2, radius: float = 1.0, **kwargs):
        if int(m) < 1:
            raise ValidationError(f"sphere: m must be >= 1; got {m}")
        self._m = int(m)
        self.radius = _require_positive(self.name, radius, "radius")
        super().__init__(**kwargs)

    @property
    def dim(self) -> int:
        """The intrinsic dimension m."""
        return self._m

    @property
    def native_dim(self) -> int:
        """The dimension of the native (unrotated) embedding, before placement in R^D."""
        return self._m + 1

    def _native_sample(self, n, rng):
        z = rng.standard_normal((n, self.native_dim))
        return self.radius * z / np.linalg.norm(z, axis=1, keepdims=True)

    def _tangent(self, xn):
        """Householder reflection mapping e_last to p/R; its first m columns span T_p."""
        n, D0 = xn.shape
        p = xn / np.linalg.norm(xn, axis=1, keepdims=True)
        e = np.zeros(D0)
        e[-1] = 1.0
        v = e[None, :] - p
        vv = np.einsum("nd,nd->n", v, v)
        H = np.repeat(np.eye(D0)[None], n, axis=0)
        ok = vv > 1e-24
        H[ok] -= 2.0 * np.einsum("nd,ne->nde", v[ok], v[ok]) / vv[ok, None, None]
        return H[:, :, : self._m], p

    def _native_frame(self, xn):
        T, p = self._tangent(xn)
        n = xn.shape[0]
        ii = np.repeat((np.eye(self._m) / self.radius)[None, None], n, axis=0)
        return LocalFrame(tangent=T, normal=-p[:, :, None], ii=ii)

    def _native_riemann(self, xn):
        m = self._m
        d = np.eye(m)
        # <R(e_a,e_b)e_c,e_d> = (δ_bc δ_ad - δ_ac δ_bd)/R²
        R = (np.einsum("bc,ad->dcab", d, d) - np.einsum("ac,bd->dcab", d, d)) / self.radius**2
        return np.repeat(R[None], xn.shape[0], axis=0)

    def _native_chart(self, xn, u):
        T, p = self._tangent(xn)
        v = np.einsum("ndm,nm->nd", T, u)
        r = np.linalg.norm(u, axis=1, keepdims=True)
        ang = r / self.radius
        safe = np.where(r > 0, r, 1.0)
        return self.radius * np.cos(ang) * p + self.radius * np.sin(ang) * v / safe

    def _native_chart_torch(self, xn_base, u):
        import torch

        key = xn_base.tobytes()
        cache = self.__dict__.setdefault("_torch_frame_cache", {})
        if key not in cache:
            if len(cache) > 256:
                cache.clear()
            T, p = self._tangent(xn_base[None])
            cache[key] = (torch.as_tensor(T[0], dtype=torch.float64),
                          torch.as_tensor(p[0], dtype=torch.float64))
        Tt, pt = cache[key]
        r = torch.sqrt(torch.clamp((u * u).sum(dim=1, keepdim=True), min=1e-30))
        ang = r / self.radius
        # R sin(r/R)/r = sinc(r/(πR)); both factors have the right (zero) gradient at u = 0
        return (self.radius * torch.cos(ang) * pt
                + torch.sinc(ang / np.pi) * (u @ Tt.T))

    def _native_project(self, yn):
        norm = np.linalg.norm(yn, axis=1, keepdims=True)
        if np.any(norm == 0):
            raise ValidationError("sphere: the origin has no unique nearest point")
        return self.radius * yn / norm

    # geomstats where it is sound: distance and Fréchet mean on the unit sphere, rescaled.
    def distance(self, a, b) -> np.ndarray:
        """Geodesic distance (geomstats Hypersphere), shape (n,)."""
        sph = _geomstats_hypersphere(self._m)
        an = self.to_native(a) / self.radius
        bn = self.to_native(b) / self.radius
        return self.radius * np.asarray(sph.metric.dist(an, bn), dtype=np.float64).reshape(-1)

    def frechet_mean(self, points) -> np.ndarray:
        """Fréchet mean (geomstats FrechetMean on the Hypersphere), shape (D,)."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from geomstats.learning.frechet_mean import FrechetMean
        sph = _geomstats_hypersphere(self._m)
        est = FrechetMean(sph).fit(self.to_native(points) / self.radius)
        return self.from_native(self.radius * np.asarray(est.estimate_)[None])[0]


def _geomstats_hypersphere(m: int):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from geomstats.geometry.hypersphere import Hypersphere
    return Hypersphere(dim=m)


class Circle(Sphere):
    """The circle of radius R in R^2: a curve of constant curvature κ = 1/R (``Sphere(m=1)``)."""

    name = "circle"

    def __init__(self, radius: float = 1.0, **kwargs):
        super().__init__(m=1, radius=radius, **kwargs)


# ---------------------------------------------------------------------------------------------
# Parametrized manifolds: frames, II and curvature from torch.func
# ---------------------------------------------------------------------------------------------
class ParametrizedManifold(Manifold):
    """A manifold given by an immersion ``theta -> phi(theta)`` in torch, with a known inverse.

    Subclasses define :meth:`phi` (one parameter point (m,) to (D0,), torch float64),
    :meth:`params` (native points (n, D0) to parameters (n, m), numpy) and
    :meth:`_sample_params`. Frames, II (from the Hessian) and the intrinsic Riemann tensor (from
    the metric alone) come from :func:`tangentlab.synthetic._geometry.immersion_geometry`.
    """

    @abc.abstractmethod
    def phi(self, theta):  # torch (m,) -> (D0,)
        """The native immersion: torch parameters, shape (m,), to a point, shape (D0,)."""
        ...

    @abc.abstractmethod
    def params(self, xn: np.ndarray) -> np.ndarray:
        """Parameters, shape (n, m), of native points, shape (n, D0) (the inverse of ``phi``)."""

    @abc.abstractmethod
    def _sample_params(self, n: int, rng: np.random.Generator) -> np.ndarray: ...

    def geometry(self, points, *, with_curvature: bool = True) -> ImmersionGeometry:
        """Full :class:`ImmersionGeometry` (native coordinates) at ambient ``points``."""
        return immersion_geometry(self.phi, self.params(self.to_native(points)),
                                  with_curvature=with_curvature)

    def _embed_params(self, theta: np.ndarray) -> np.ndarray:
        import torch
        from torch.func import vmap

        with torch.no_grad():
            return vmap(self.phi)(torch.as_tensor(theta, dtype=torch.float64)).numpy()

    def _native_sample(self, n, rng):
        return self._embed_params(self._sample_params(n, rng))

    def _native_frame(self, xn):
        geo = immersion_geometry(self.phi, self.params(xn), with_curvature=False)
        return LocalFrame(tangent=geo.tangent, normal=geo.normal, ii=geo.ii)

    def _native_riemann(self, xn):
        return immersion_geometry(self.phi, self.params(xn)).riemann

    def _native_chart(self, xn, u):
        theta = self.params(xn)
        uniq, inverse = np.unique(theta, axis=0, return_inverse=True)
        geo = immersion_geometry(self.phi, uniq, with_curvature=False)
        S = geo.inv_sqrt_metric[inverse.reshape(-1)]
        x = self._embed_params(theta + np.einsum("nij,nj->ni", S, u))
        if not np.all(np.isfinite(x)):
            raise ValidationError(
                f"{self.name}: the chart left the domain of the parametrization (|u| up to "
                f"{float(np.linalg.norm(u, axis=1).max()):.3g}); use smaller chart coordinates"
            )
        return x


    def _native_chart_torch(self, xn_base, u):
        import torch
        from torch.func import vmap

        theta = self.params(xn_base[None])
        # g^{-1/2} at the base is computed once per base point and cached, so that the chart can
        # also be called under torch.func transforms of u (which cannot run the nested geometry)
        cache = self.__dict__.setdefault("_inv_sqrt_cache", {})
        key = theta.tobytes()
        if key not in cache:
            if len(cache) > 256:
                cache.clear()
            cache[key] = immersion_geometry(self.phi, theta, with_curvature=False).inv_sqrt_metric[0]
        th = torch.as_tensor(theta[0], dtype=torch.float64)
        S = torch.as_tensor(cache[key], dtype=torch.float64)
        return vmap(self.phi)(th + u @ S.T)


class Helix(ParametrizedManifold):
    """The helix ``(a cos θ, a sin θ, b θ)`` in R^3; curvature ``a/(a²+b²)``, constant.

    Sampling: θ uniform on [0, 2π·turns). No closed-form projection.
    """

    name = "helix"

    def __init__(self, a: float = 1.0, b: float = 0.5, turns: float = 2.0, **kwargs):
        self.a = _require_positive(self.name, a, "radius a")
        self.b = _require_positive(self.name, b, "pitch b")
        self.turns = _require_positive(self.name, turns, "turns")
        super().__init__(**kwargs)

    dim = 1  # type: ignore[assignment]
    native_dim = 3  # type: ignore[assignment]

    def phi(self, theta):
        """See :meth:`ParametrizedManifold.phi`."""
        import torch

        t = theta[0]
        return torch.stack([self.a * torch.cos(t), self.a * torch.sin(t), self.b * t])

    def params(self, xn):
        """See :meth:`ParametrizedManifold.params`."""
        return xn[:, 2:3] / self.b

    def _sample_params(self, n, rng):
        return rng.uniform(0.0, 2 * np.pi * self.turns, size=(n, 1))


class FlatTorus(ParametrizedManifold):
    """The flat (Clifford-type) torus ``(r1 cos θ1, r1 sin θ1, r2 cos θ2, r2 sin θ2)`` in R^4.

    Intrinsically flat (curvature 0) but extrinsically curved: ‖II‖² = 1/r1² + 1/r2².
    Sampling: uniform in (θ1, θ2), which is uniform in area. Projection: closed form.
    """

    name = "flat-torus"

    def __init__(self, r1: float = 1.0, r2: float = 1.0, **kwargs):
        self.r1 = _require_positive(self.name, r1, "r1")
        self.r2 = _require_positive(self.name, r2, "r2")
        super().__init__(**kwargs)

    dim = 2  # type: ignore[assignment]
    native_dim = 4  # type: ignore[assignment]

    def phi(self, theta):
        """See :meth:`ParametrizedManifold.phi`."""
        import torch

        return torch.stack([
            self.r1 * torch.cos(theta[0]), self.r1 * torch.sin(theta[0]),
            self.r2 * torch.cos(theta[1]), self.r2 * torch.sin(theta[1]),
        ])

    def params(self, xn):
        """See :meth:`ParametrizedManifold.params`."""
        return np.stack([np.arctan2(xn[:, 1], xn[:, 0]), np.arctan2(xn[:, 3], xn[:, 2])], axis=1)

    def _sample_params(self, n, rng):
        return rng.uniform(-np.pi, np.pi, size=(n, 2))

    def _native_project(self, yn):
        a = yn[:, :2] / np.linalg.norm(yn[:, :2], axis=1, keepdims=True)
        b = yn[:, 2:] / np.linalg.norm(yn[:, 2:], axis=1, keepdims=True)
        return np.concatenate([self.r1 * a, self.r2 * b], axis=1)


class TorusOfRevolution(ParametrizedManifold):
    """The torus of revolution ``((R + r cos v) cos u, (R + r cos v) sin u, r sin v)`` in R^3.

    Gauss curvature ``cos v / (r (R + r cos v))``: positive outside, negative inside.
    Sampling: uniform in (u, v) (not uniform in area; stated). Projection: closed form.
    """

    name = "torus"

    def __init__(self, R: float = 2.0, r: float = 1.0, **kwargs):
        self.R = _require_positive(self.name, R, "major radius R")
        self.r = _require_positive(self.name, r, "minor radius r")
        if self.r >= self.R:
            raise ValidationError(f"torus: need r < R for an embedded torus; got r={r}, R={R}")
        super().__init__(**kwargs)

    dim = 2  # type: ignore[assignment]
    native_dim = 3  # type: ignore[assignment]

    def phi(self, theta):
        """See :meth:`ParametrizedManifold.phi`."""
        import torch

        u, v = theta[0], theta[1]
        rho = self.R + self.r * torch.cos(v)
        return torch.stack([rho * torch.cos(u), rho * torch.sin(u), self.r * torch.sin(v)])

    def params(self, xn):
        """See :meth:`ParametrizedManifold.params`."""
        u = np.arctan2(xn[:, 1], xn[:, 0])
        rho = np.hypot(xn[:, 0], xn[:, 1]) - self.R
        return np.stack([u, np.arctan2(xn[:, 2], rho)], axis=1)

    def _sample_params(self, n, rng):
        return rng.uniform(-np.pi, np.pi, size=(n, 2))

    def _native_project(self, yn):
        u = np.arctan2(yn[:, 1], yn[:, 0])
        centre = np.stack([self.R * np.cos(u), self.R * np.sin(u), np.zeros_like(u)], axis=1)
        d = yn - centre
        norm = np.linalg.norm(d, axis=1, keepdims=True)
        if np.any(norm == 0):
            raise ValidationError("torus: a point on the core circle has no unique nearest point")
        return centre + self.r * d / norm


class HyperbolicPlane(ParametrizedManifold):
    """The hyperbolic plane H² (curvature -1): intrinsic model plus a local isometric embedding.

    *Intrinsic*: points are described in the upper half-plane ``(x, y)``, ``y > 0``, metric
    ``(dx² + dy²)/y²``; :meth:`to_poincare` maps them to the Poincaré disk, where geomstats'
    ``PoincareBall`` gives distances (:meth:`distance`).

    *Extrinsic*: H² has no isometric embedding in R³ (Hilbert), but the horodisk ``y > 1``,
    taken modulo ``x -> x + 2π``, embeds isometrically as the pseudosphere (tractricoid):
    ``(cos x / y, sin x / y, arcosh y - sqrt(1 - 1/y²))``, parametrized by ``(x, s = ln y)``
    (metric ``e^{-2s} dx² + ds²``). Tangent, normal and II are those of this
    surface, a *local* isometric embedding. Points must keep ``y >= y_min > 1`` (the rim ``y = 1``
    is a cusp edge). Sampling: uniform in hyperbolic area on ``x ∈ [-π, π)``,
    ``y ∈ [y_min, y_max]`` (density ∝ 1/y²).
    """

    name = "hyperbolic"

    def __init__(self, y_min: float = 1.5, y_max: float = 4.0, **kwargs):
        self.y_min = float(y_min)
        self.y_max = float(y_max)
        if not (1.0 < self.y_min < self.y_max and math.isfinite(self.y_max)):
            raise ValidationError(
                f"hyperbolic: need 1 < y_min < y_max < inf; got y_min={y_min}, y_max={y_max}"
            )
        super().__init__(**kwargs)

    dim = 2  # type: ignore[assignment]
    native_dim = 3  # type: ignore[assignment]

    def phi(self, theta):
        """See :meth:`ParametrizedManifold.phi`."""
        import torch

        # parameters (x, s) with y = exp(s): the chart stays inside y > 0 for any step in s
        x, sp = theta[0], theta[1]
        y = torch.exp(sp)
        return torch.stack([
            torch.cos(x) / y, torch.sin(x) / y,
            torch.acosh(y) - torch.sqrt(1.0 - 1.0 / y**2),
        ])

    def params(self, xn):
        """See :meth:`ParametrizedManifold.params`."""
        rho = np.hypot(xn[:, 0], xn[:, 1])
        return np.stack([np.arctan2(xn[:, 1], xn[:, 0]), -np.log(rho)], axis=1)

    def _sample_params(self, n, rng):
        x = rng.uniform(-np.pi, np.pi, size=n)
        # area density ∝ 1/y² on [y_min, y_max]: invert the CDF of 1/y
        w = rng.uniform(size=n)
        y = 1.0 / (1.0 / self.y_min - w * (1.0 / self.y_min - 1.0 / self.y_max))
        return np.stack([x, np.log(y)], axis=1)

    def halfplane(self, points) -> np.ndarray:
        """Upper half-plane coordinates (x, y) of ambient points, shape (n, 2), x in [-π, π)."""
        th = self.params(self.to_native(points))
        return np.stack([th[:, 0], np.exp(th[:, 1])], axis=1)

    @staticmethod
    def to_poincare(xy: np.ndarray) -> np.ndarray:
        """Cayley map from the half-plane (n, 2) to the Poincaré disk (n, 2)."""
        z = np.asarray(xy, dtype=np.float64)
        w = z[:, 0] + 1j * z[:, 1]
        d = (w - 1j) / (w + 1j)
        return np.stack([d.real, d.imag], axis=1)

    def distance(self, a, b) -> np.ndarray:
        """Intrinsic distance of the half-plane coordinates of a and b (geomstats PoincareBall).

        Note: this is the distance in H², on the universal cover of the pseudosphere patch.
        """
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from geomstats.geometry.poincare_ball import PoincareBall
        ball = PoincareBall(dim=2)
        pa = self.to_poincare(self.halfplane(a))
        pb = self.to_poincare(self.halfplane(b))
        return np.asarray(ball.metric.dist(pa, pb), dtype=np.float64).reshape(-1)


class RandomImmersion(ParametrizedManifold):
    """A random smooth immersion: the graph of a small fixed random MLP, ``R^m -> R^D0``.

    ``phi(θ) = (θ, scale · W2 tanh(W1 θ + b1))`` with ``W1`` (hidden, m), ``W2`` (D0 - m, hidden)
    Gaussian with variance 1/fan-in, ``b1`` standard normal; all from ``seed``. Being a graph, it
    is an embedding (never singular, never self-intersecting), and its inverse is the first m
    coordinates. Its metric, Christoffel symbols, Riemann tensor and II all come from nested
    ``torch.func`` jacobians. Sampling: θ uniform on [-box, box]^m.
    """

    name = "immersion"

    def __init__(self, m: int = 2, native_dim: int = 6, hidden: int = 16, scale: float = 1.0,
                 box: float = 1.0, seed: int = 0, **kwargs):
        import torch

        if int(m) < 1:
            raise ValidationError(f"immersion: m must be >= 1; got {m}")
        if int(native_dim) <= int(m):
            raise RankError(
                f"immersion: manifold dimension m={m} must be below the ambient dimension "
                f"D={native_dim}"
            )
        self._m = int(m)
        self._D0 = int(native_dim)
        self.hidden = int(hidden)
        if self.hidden < 1:
            raise ValidationError(f"immersion: hidden must be >= 1; got {hidden}")
        self.scale = float(scale)
        self.box = _require_positive(self.name, box, "box")
        self.seed = int(seed)
        gen = torch.Generator().manual_seed(self.seed)
        self.W1 = torch.randn(self.hidden, self._m, generator=gen, dtype=torch.float64) / math.sqrt(self._m)
        self.b1 = torch.randn(self.hidden, generator=gen, dtype=torch.float64)
        self.W2 = torch.randn(self._D0 - self._m, self.hidden, generator=gen,
                              dtype=torch.float64) / math.sqrt(self.hidden)
        super().__init__(**kwargs)

    @property
    def dim(self) -> int:
        """The intrinsic dimension m (the sum of the factors')."""
        return self._m

    @property
    def native_dim(self) -> int:
        """The native embedding dimension (the sum of the factors')."""
        return self._D0

    def phi(self, theta):
        """See :meth:`ParametrizedManifold.phi` (the factors' charts side by side)."""
        import torch

        return torch.cat([theta, self.scale * (self.W2 @ torch.tanh(self.W1 @ theta + self.b1))])

    def params(self, xn):
        """See :meth:`ParametrizedManifold.params` (the factors' parameters side by side)."""
        return np.array(xn[:, : self._m], dtype=np.float64)

    def _sample_params(self, n, rng):
        return rng.uniform(-self.box, self.box, size=(n, self._m))


# ---------------------------------------------------------------------------------------------
# Products
# ---------------------------------------------------------------------------------------------
class ProductManifold(Manifold):
    """The product M1 × M2 in R^{D01 + D02} (factors in their native coordinates).

    Tangent and normal frames are block diagonal; a normal of M1 has shape matrix
    ``diag(A1, 0)``; the Riemann tensor is block diagonal, so mixed planes have curvature 0.
    Sampling: independent per factor. Projection: per factor, where both have one.
    """

    name = "product"

    def __init__(self, first: Manifold, second: Manifold, **kwargs):
        for f in (first, second):
            if not isinstance(f, Manifold):
                raise ValidationError("product: factors must be Manifold instances")
        self.first, self.second = first, second
        super().__init__(**kwargs)

    @property
    def dim(self) -> int:
        """The intrinsic dimension m."""
        return self.first.dim + self.second.dim

    @property
    def native_dim(self) -> int:
        """The native embedding dimension D0."""
        return self.first.native_dim + self.second.native_dim

    def _split(self, xn):
        return xn[:, : self.first.native_dim], xn[:, self.first.native_dim:]

    def _native_sample(self, n, rng):
        a = self.first._native_sample(n, rng)
        b = self.second._native_sample(n, rng)
        return np.concatenate([a, b], axis=1)

    def _native_frame(self, xn):
        a, b = self._split(xn)
        fa, fb = self.first._native_frame(a), self.second._native_frame(b)
        n = xn.shape[0]
        m1, m2 = self.first.dim, self.second.dim
        d1, d2 = self.first.native_dim, self.second.native_dim
        k1, k2 = d1 - m1, d2 - m2
        T = np.zeros((n, d1 + d2, m1 + m2))
        T[:, :d1, :m1] = fa.tangent
        T[:, d1:, m1:] = fb.tangent
        N = np.zeros((n, d1 + d2, k1 + k2))
        N[:, :d1, :k1] = fa.normal
        N[:, d1:, k1:] = fb.normal
        A = np.zeros((n, k1 + k2, m1 + m2, m1 + m2))
        A[:, :k1, :m1, :m1] = fa.ii
        A[:, k1:, m1:, m1:] = fb.ii
        return LocalFrame(tangent=T, normal=N, ii=A)

    def _native_riemann(self, xn):
        a, b = self._split(xn)
        m1, m = self.first.dim, self.dim
        R = np.zeros((xn.shape[0], m, m, m, m))
        R[:, :m1, :m1, :m1, :m1] = self.first._native_riemann(a)
        R[:, m1:, m1:, m1:, m1:] = self.second._native_riemann(b)
        return R

    def _native_chart(self, xn, u):
        a, b = self._split(xn)
        m1 = self.first.dim
        return np.concatenate([self.first._native_chart(a, u[:, :m1]),
                               self.second._native_chart(b, u[:, m1:])], axis=1)

    def _native_project(self, yn):
        a, b = self._split(yn)
        return np.concatenate([self.first._native_project(a), self.second._native_project(b)], axis=1)


#: Registry of manifold names to classes, for configs.
MANIFOLDS: dict[str, type[Manifold]] = {
    "circle": Circle,
    "helix": Helix,
    "sphere": Sphere,
    "flat-torus": FlatTorus,
    "torus": TorusOfRevolution,
    "hyperbolic": HyperbolicPlane,
    "immersion": RandomImmersion,
}


def make_manifold(name: str, **params) -> Manifold:
    """Build a manifold by name (see :data:`MANIFOLDS`), e.g. ``make_manifold("sphere", m=2)``.

    ``"product:A*B"`` builds the product of two registered manifolds with default parameters,
    e.g. ``"product:circle*circle"``. Unknown names and parameters are errors.
    """
    if name.startswith("product:"):
        parts = name[len("product:"):].split("*")
        if len(parts) != 2:
            raise UnknownNameError(f"product name {name!r} must look like 'product:circle*sphere'")
        return ProductManifold(make_manifold(parts[0]), make_manifold(parts[1]), **params)
    if name not in MANIFOLDS:
        raise UnknownNameError(
            f"unknown manifold {name!r}; known: {', '.join(sorted(MANIFOLDS))}, product:A*B"
        )
    try:
        return MANIFOLDS[name](**params)
    except TypeError as exc:
        raise ValidationError(f"bad parameters for manifold {name!r}: {exc}") from None

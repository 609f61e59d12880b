"""Differential geometry of a parametrized immersion with ``torch.func`` (metric to Riemann, II).

Given an immersion ``phi: R^m -> R^D`` written in torch (one point in, one point out), this
module computes, vmapped over a batch of parameter points ``theta`` of shape (n, m):

- the Jacobian ``J`` (n, D, m) and the metric ``g = JᵀJ`` (n, m, m);
- an orthonormal tangent frame ``E = J g^{-1/2}`` (n, D, m) (the symmetric square root, so the
  frame is a smooth function of the point) and a normal frame (n, D, D - m) completing it;
- the Christoffel symbols ``Γ^l_ij`` (n, m, m, m) **from the metric and its derivatives only**
  (intrinsic), and the Riemann tensor from ``Γ`` and its derivatives (intrinsic);
- the second fundamental form from the Hessian of ``phi`` (extrinsic), as shape matrices
  ``A[n, a, i, j] = <n_a, ∂²x/∂e_i∂e_j>`` in the orthonormal tangent frame.

Conventions: ``R(X, Y)Z = ∇_X∇_Y Z - ∇_Y∇_X Z - ∇_[X,Y] Z``. The returned Riemann tensor is in
the orthonormal frame, ``riemann[n, d, c, a, b] = <R(e_a, e_b) e_c, e_d>``, so the sectional
curvature of the plane (e_a, e_b) is ``riemann[n, a, b, a, b]`` (+1/R² on a sphere of radius R).
The Gauss equation then reads ``riemann[d, c, a, b] = Σ_k A_k[b,c] A_k[a,d] - A_k[a,c] A_k[b,d]``.

Because the intrinsic path never looks at the Hessian of ``phi``, the Gauss equation is a real
cross-check between the two paths (tests/synthetic/test_manifolds.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["ImmersionGeometry", "immersion_geometry", "gauss_equation_riemann", "sectional_from_riemann"]


@dataclass(frozen=True)
class ImmersionGeometry:
    """Geometry of an immersion at n parameter points (all float64 numpy arrays).

    Attributes:
        points: shape (n, D), ``phi(theta)``.
        jacobian: shape (n, D, m).
        metric: shape (n, m, m), ``JᵀJ``.
        inv_sqrt_metric: shape (n, m, m), ``g^{-1/2}`` (maps orthonormal to chart coordinates).
        tangent: shape (n, D, m), orthonormal.
        normal: shape (n, D, D - m), orthonormal, orthogonal to ``tangent``.
        christoffel: shape (n, m, m, m), ``Γ^l_ij`` indexed ``[n, l, i, j]`` (chart coordinates).
        riemann: shape (n, m, m, m, m), orthonormal frame, ``[n, d, c, a, b] = <R(e_a,e_b)e_c,e_d>``.
        ii: shape (n, D - m, m, m), shape matrices in the normal frame, orthonormal tangent frame.
    """

    points: np.ndarray
    jacobian: np.ndarray
    metric: np.ndarray
    inv_sqrt_metric: np.ndarray
    tangent: np.ndarray
    normal: np.ndarray
    christoffel: np.ndarray
    riemann: np.ndarray
    ii: np.ndarray


def immersion_geometry(
    phi: Callable, theta, *, with_curvature: bool = True
) -> ImmersionGeometry:
    """Metric, frames, Christoffel symbols, Riemann tensor and II of ``phi`` at ``theta``.

    Args:
        phi: torch function mapping one parameter point, shape (m,), to shape (D,), float64.
            It must be built from torch operations that ``torch.func`` can differentiate three
            times (forward mode).
        theta: shape (n, m) parameter points.
        with_curvature: if false, skip the Christoffel/Riemann computation (third derivatives);
            ``christoffel`` and ``riemann`` are then arrays of NaN.

    Returns:
        :class:`ImmersionGeometry`.
    """
    import torch
    from torch.func import jacfwd, vmap

    th = torch.as_tensor(np.asarray(theta, dtype=np.float64), dtype=torch.float64)
    if th.ndim != 2:
        raise ValueError(f"theta must have shape (n, m); got {tuple(th.shape)}")
    n, m = th.shape
    jac = jacfwd(phi)

    def metric(t):
        j = jac(t)
        return j.T @ j

    def christoffel(t):
        g = metric(t)
        dg = jacfwd(metric)(t)  # dg[a, b, c] = ∂_c g_ab
        first = 0.5 * (
            torch.einsum("jki->kij", dg) + torch.einsum("ikj->kij", dg) - torch.einsum("ijk->kij", dg)
        )  # Γ_kij (first kind)
        return torch.einsum("lk,kij->lij", torch.linalg.inv(g), first)

    with torch.no_grad():
        x = vmap(phi)(th)
        J = vmap(jac)(th)
        H = vmap(jacfwd(jac))(th)  # (n, D, m, m)
        g = J.transpose(1, 2) @ J
        evals, evecs = torch.linalg.eigh(g)
        if bool((evals <= 1e-14 * evals.amax(dim=-1, keepdim=True).clamp_min(1e-300)).any()):
            raise ValueError("the immersion is singular (rank-deficient Jacobian) at some points")
        S = evecs @ torch.diag_embed(evals.rsqrt()) @ evecs.transpose(1, 2)
        E = J @ S
        Q, _ = torch.linalg.qr(E, mode="complete")
        N = Q[:, :, m:]
        A = torch.einsum("nda,ndij,nib,njc->nabc", N, H, S, S)
        if with_curvature:
            gam = vmap(christoffel)(th)
            dgam = vmap(jacfwd(christoffel))(th)  # [n, l, i, j, q] = ∂_q Γ^l_ij
            R = (
                torch.einsum("nljki->nlkij", dgam)
                - torch.einsum("nlikj->nlkij", dgam)
                + torch.einsum("nlip,npjk->nlkij", gam, gam)
                - torch.einsum("nljp,npik->nlkij", gam, gam)
            )
            Rl = torch.einsum("ndl,nlkij->ndkij", g, R)
            Ro = torch.einsum("ndkij,nda,nkb,nic,nje->nabce", Rl, S, S, S, S)
        else:
            gam = torch.full((n, m, m, m), float("nan"), dtype=torch.float64)
            Ro = torch.full((n, m, m, m, m), float("nan"), dtype=torch.float64)
    return ImmersionGeometry(
        points=x.numpy(), jacobian=J.numpy(), metric=g.numpy(), inv_sqrt_metric=S.numpy(),
        tangent=E.numpy(), normal=N.numpy(), christoffel=gam.numpy(), riemann=Ro.numpy(),
        ii=A.numpy(),
    )


def gauss_equation_riemann(ii: np.ndarray) -> np.ndarray:
    """The Riemann tensor the Gauss equation gives from shape matrices.

    Args:
        ii: shape (n, k, m, m), shape matrices in an orthonormal normal frame.

    Returns:
        shape (n, m, m, m, m), ``[n, d, c, a, b] = Σ_k A_k[b,c] A_k[a,d] - A_k[a,c] A_k[b,d]``.
    """
    ii = np.asarray(ii, dtype=np.float64)
    return np.einsum("nkbc,nkad->ndcab", ii, ii) - np.einsum("nkac,nkbd->ndcab", ii, ii)


def sectional_from_riemann(riemann: np.ndarray) -> np.ndarray:
    """Sectional curvatures ``K[n, a, b]`` of the planes (e_a, e_b); the diagonal is 0.

    Args:
        riemann: shape (n, m, m, m, m) in an orthonormal frame (module convention).
    """
    riemann = np.asarray(riemann, dtype=np.float64)
    m = riemann.shape[1]
    idx = np.arange(m)
    K = riemann[:, idx[:, None], idx[None, :], idx[:, None], idx[None, :]]
    K = K.copy()
    K[:, idx, idx] = 0.0
    return K

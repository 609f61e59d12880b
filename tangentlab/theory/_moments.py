"""Moments of the two chart-coordinate laws, derived by sympy (cached; private helper).

- Gaussian: u ~ N(0, t^2 I_m). One-dimensional moments E[u^k] are the chi moments at m = 1 (below),
  by symmetry; the coordinates are independent, so a monomial's expectation is the product.
- Uniform ball of radius t in R^m: u = t R xi with R, xi independent, R^m ~ U(0, 1) (radial density
  m r^(m-1)) and xi uniform on the unit sphere. Sphere moments come from the Gaussian ones by the
  polar split of z ~ N(0, I_m): E[z^k] = E[|z|^|k|] E[xi^k], with the chi moment E[|z|^|k|] and
  the radial moment both derived by ``integrate`` (for symbolic or concrete m).
"""

from __future__ import annotations

from functools import cache

import sympy as sp

__all__ = [
    "T",
    "M",
    "gaussian_moment_1d",
    "chi_moment",
    "ball_radial_moment",
    "monomial_expectation",
    "expectation",
]

#: The scale t (> 0) and the manifold dimension m (positive integer) used by every derivation.
T = sp.Symbol("t", positive=True)
M = sp.Symbol("m", positive=True, integer=True)

_z = sp.Symbol("z", real=True)
_r = sp.Symbol("r", positive=True)


_k = sp.Symbol("k", positive=True)
_mp = sp.Symbol("m", positive=True)


@cache
def _chi_general() -> sp.Expr:
    """E[|z|^k] for z ~ N(0, I_m), symbolic k and m, by integrating r^(m-1) exp(-r^2/2)."""
    num = sp.integrate(_r ** (_mp + _k - 1) * sp.exp(-(_r**2) / 2), (_r, 0, sp.oo), meijerg=True)
    den = num.subs(_k, 0)
    return num / den


@cache
def _radial_general() -> sp.Expr:
    """E[R^k] for the radius of a uniform point in the unit m-ball (density m r^(m-1))."""
    return sp.integrate(_mp * _r ** (_mp + _k - 1), (_r, 0, 1), conds="none")


@cache
def gaussian_moment_1d(k: int, t: sp.Expr = T) -> sp.Expr:
    """E[z^k] for z ~ N(0, t^2): 0 for odd k, else t^k E|z|^k with the chi moment at m = 1."""
    if k % 2:
        return sp.Integer(0)
    return sp.factor(sp.gammasimp(_chi_general().subs({_k: k, _mp: 1}))) * t**k


@cache
def chi_moment(k: int, m: sp.Expr = M) -> sp.Expr:
    """E[|z|^k] for z ~ N(0, I_m) (the integral is done once for symbolic k, m)."""
    return sp.factor(sp.gammasimp(_chi_general().subs({_k: k, _mp: m})))


@cache
def ball_radial_moment(k: int, m: sp.Expr = M, t: sp.Expr = T) -> sp.Expr:
    """E[R^k] for the radius R of a uniform point in the m-ball of radius t."""
    return sp.factor(_radial_general().subs({_k: k, _mp: m}) * t**k)


@cache
def monomial_expectation(
    exponents: tuple[int, ...], sampling: str, m: sp.Expr | None = None, t: sp.Expr = T
) -> sp.Expr:
    """E[prod_i u_i^k_i] for u in R^m (m = len(exponents) unless given) under ``sampling``."""
    if m is None:
        m = len(exponents)
    if any(k % 2 for k in exponents):
        gauss = sp.Integer(0)
    else:
        gauss = sp.Integer(1)
        for k in exponents:
            gauss *= gaussian_moment_1d(k, sp.Integer(1))
    if sampling == "gaussian":
        return sp.simplify(gauss * t ** sum(exponents))
    if sampling == "ball":
        total = sum(exponents)
        if gauss == 0:
            return sp.Integer(0)
        sphere = gauss / chi_moment(total, m)
        return sp.factor(sp.simplify(sphere * ball_radial_moment(total, m, t)))
    raise ValueError(f"unknown sampling {sampling!r}")


def expectation(expr: sp.Expr, u: tuple[sp.Symbol, ...], sampling: str, t: sp.Expr = T) -> sp.Expr:
    """E[expr] for a polynomial ``expr`` in the chart coordinates ``u`` (len(u) = m)."""
    poly = sp.Poly(sp.expand(expr), *u)
    total = sp.Integer(0)
    for monom, coeff in poly.terms():
        total += coeff * monomial_expectation(tuple(int(k) for k in monom), sampling, None, t)
    return sp.expand(total)

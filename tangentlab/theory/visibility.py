"""Derivation ``curvature-visibility``: how visible curvature is in a local sample.

Model: the local chart x(u) = p + J u + 1/2 sum_a n_a u^T A_a u of an m-dimensional manifold, with J
an orthonormal tangent basis (D x m), n_a an orthonormal normal frame and symmetric shape matrices
A_a (m x m). Chart coordinates are either Gaussian, u ~ N(0, t^2 I_m), or uniform on the ball of
radius t. Invariants: ``ii_norm_sq`` = ||II||_F^2 = sum_a tr(A_a^2); ``trace_sq_sum`` =
sum_a tr(A_a)^2; ``trace_norm`` = sqrt(trace_sq_sum) (the norm of the mean-curvature vector
sum_a tr(A_a) n_a).

Predictions (``get("curvature-visibility").predict(quantity, **params)``, or the functions below),
all numpy-vectorised over array arguments; ``sampling`` is ``"gaussian"`` (default) or ``"ball"``:

- ``visibility(t, ii_norm_sq, m, sampling="gaussian", trace_sq_sum=None)``: normal variance over
  tangent variance. Gaussian: t^2 ||II||^2 / (2m) (``trace_sq_sum`` is not needed and has no
  effect). Ball: t^2 (||II||^2 - trace_sq_sum/(m+2)) / (2 m (m+4)); ``trace_sq_sum`` is required.
- ``centroid_shift(t, trace_norm, m, sampling="gaussian")``: norm of the centroid's normal shift,
  1/2 c_2 trace_norm with c_2 = t^2 (Gaussian) or t^2/(m+2) (ball).
- ``tangent_variance(t, m, sampling="gaussian")``: total tangent variance m c_2.
- ``normal_variance(t, ii_norm_sq, m, sampling="gaussian", trace_sq_sum=None)``: total normal
  variance (same ``trace_sq_sum`` rule as ``visibility``).
- ``visibility_curve_next_order(t, kappa, a3, b3, b4)``: visibility of a curve chart
  x(u) = (u + a3 u^3, kappa u^2/2 + b3 u^3 + b4 u^4) to order t^4 (Gaussian u).

Bad parameters (t <= 0, m not an integer >= 1, negative invariants, trace_sq_sum > m ii_norm_sq)
raise :class:`~tangentlab.errors.ValidationError`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp
from sympy.simplify.fu import TR8

from tangentlab.errors import ValidationError
from tangentlab.theory._moments import M, T, expectation, monomial_expectation
from tangentlab.theory.derivation import (
    CheckSpec,
    Derivation,
    Param,
    Prediction,
    get,
    relative_error,
    symbolic_residual,
)

__all__ = [
    "CurvatureVisibility",
    "visibility",
    "centroid_shift",
    "tangent_variance",
    "normal_variance",
    "visibility_curve_next_order",
    "sample_chart_coordinates",
]

SAMPLINGS = ("gaussian", "ball")

# Symbols shared by steps and predictions.
II2 = sp.Symbol(r"\|II\|_F^2", nonnegative=True)  # sum_a tr(A_a^2)
S = sp.Symbol(r"S_{tr}", nonnegative=True)  # sum_a tr(A_a)^2
TRN = sp.Symbol(r"\|\bar H\|", nonnegative=True)  # sqrt(sum_a tr(A_a)^2)
C2 = sp.Symbol("c_2", positive=True)  # E[u_1^2]
C22 = sp.Symbol("c_{22}", positive=True)  # E[u_1^2 u_2^2]
C4 = sp.Symbol("c_4", positive=True)  # E[u_1^4]
TRA, TRB, TRAB = sp.symbols(r"\operatorname{tr}A \operatorname{tr}B \operatorname{tr}(AB)", real=True)
Q = sp.Symbol(r"u^{\top} A_a u", real=True)
QA = sp.Symbol("q_a", real=True)
KAPPA = sp.Symbol("kappa", positive=True)
A3, B3, B4 = sp.symbols("a_3 b_3 b_4", real=True)
U1 = sp.Symbol("u", real=True)


def _sym_matrix(name: str, m: int) -> sp.Matrix:
    return sp.Matrix(m, m, lambda i, j: sp.Symbol(f"{name}_{min(i, j) + 1}{max(i, j) + 1}", real=True))


@lru_cache(maxsize=64)
def _explicit(chart_rhs: sp.Expr, m: int, sampling: str) -> dict[str, Any]:
    """Explicit moments for fully symbolic symmetric A, B (m x m) under ``sampling``.

    Memoised per (chart expression, m, law): a mutated chart gives a new key. Do not mutate the
    returned dict.
    """
    u = sp.symbols(f"u_1:{m + 1}", real=True)
    uv = sp.Matrix(u)
    A, B = _sym_matrix("a", m), _sym_matrix("b", m)
    qa = chart_rhs.subs(Q, (uv.T * A * uv)[0])
    qb = chart_rhs.subs(Q, (uv.T * B * uv)[0])
    E = lambda e: expectation(e, u, sampling)  # noqa: E731
    mean_u = sp.Matrix([E(ui) for ui in u])
    tan_cov = sp.Matrix(m, m, lambda i, j: E(u[i] * u[j]))
    cross = sp.Matrix([[E(ui * qa) - E(ui) * E(qa), E(ui * qb) - E(ui) * E(qb)] for ui in u])
    mean_qa = E(qa)
    cov_ab = sp.expand(E(qa * qb) - E(qa) * E(qb))
    return {
        "u": u, "A": A, "B": B, "mean_u": mean_u, "tangent_cov": tan_cov, "cross_cov": cross,
        "mean_qa": mean_qa, "cov_ab": cov_ab,
        "trA": A.trace(), "trB": B.trace(), "trAB": (A * B).trace(),
    }


def _fit(target: sp.Expr, basis: list[sp.Expr], entries: list[sp.Symbol]) -> list[sp.Expr]:
    """Coefficients x with target == sum x_i basis_i identically in ``entries`` (or raise)."""
    xs = sp.symbols(f"x0:{len(basis)}")
    resid = sp.expand(target - sum(x * b for x, b in zip(xs, basis)))
    eqs = sp.Poly(resid, *entries).coeffs()
    sol = sp.solve(eqs, xs, dict=True)
    if not sol:
        raise ValueError("no fit")
    return [sp.factor(sol[0].get(x, x)) for x in xs]


@lru_cache(maxsize=1)
def _next_order_series() -> sp.Expr:
    """Series of N/T to O(t^4) for the quartic curve chart (memoised: no step feeds into it)."""
    x_tan = U1 + A3 * U1**3
    x_nor = KAPPA * U1**2 / 2 + B3 * U1**3 + B4 * U1**4
    Eg = lambda e: expectation(e, (U1,), "gaussian")  # noqa: E731
    tan_var = sp.expand(Eg(x_tan**2) - Eg(x_tan) ** 2)
    nor_var = sp.expand(Eg(x_nor**2) - Eg(x_nor) ** 2)
    return sp.collect(sp.expand(sp.series(nor_var / tan_var, T, 0, 5).removeO()), T)


@lru_cache(maxsize=1)
def _circle_exact() -> sp.Expr:
    """Exact visibility of the circle of curvature kappa in arc length (memoised)."""
    z = sp.Symbol("z", real=True)
    w = sp.Symbol("w", positive=True)
    dens = sp.exp(-(z**2) / (2 * T**2)) / (sp.sqrt(2 * sp.pi) * T)
    charf = sp.integrate(sp.cos(w * z) * dens, (z, -sp.oo, sp.oo), meijerg=True)  # E[cos(w z)]

    def Ez(e):  # expectation of a trigonometric polynomial in z: product-to-sum, then charf
        lin = TR8(sp.expand(e))
        lin = lin.replace(sp.sin, lambda a: sp.Integer(0))  # odd
        return sp.simplify(lin.replace(sp.cos, lambda a: charf.subs(w, sp.Abs(a / z))))

    R = 1 / KAPPA
    xs, xn = R * sp.sin(z / R), R * (1 - sp.cos(z / R))
    tan_c = sp.simplify(Ez(xs**2) - Ez(xs) ** 2)
    nor_c = sp.simplify(Ez(sp.expand(xn**2)) - Ez(xn) ** 2)
    return sp.simplify(nor_c / tan_c)


class CurvatureVisibility(Derivation):
    """Curvature visibility under isotropic chart sampling (see the module docstring)."""
    name = "curvature-visibility"
    title = "Curvature visibility in a local sample"
    summary = (
        "Exact tangent, normal and cross covariances and the centroid shift of a local sample of "
        "the quadratic chart x(u) = p + Ju + 1/2 sum_a n_a u^T A_a u, for Gaussian and uniform-ball "
        "chart coordinates; hence the visibility V(t) = normal variance / tangent variance."
    )
    model_assumptions = (
        "The manifold is the quadratic chart x(u) = p + J u + 1/2 sum_a n_a u^T A_a u exactly "
        "(higher chart terms are treated in the next-order step); J (D x m) and the normal frame "
        "n_a are orthonormal, so variances are read in (u, q) coordinates with q_a = 1/2 u^T A_a u.",
        "Gaussian sampling: u ~ N(0, t^2 I_m). Ball sampling: u uniform on the ball of radius t "
        "in R^m.",
        "Both laws are rotation invariant, hence E[u_i u_j u_k u_l] = c_22 (d_ij d_kl + d_ik d_jl "
        "+ d_il d_jk) with c_4 = 3 c_22; the general-m formulas use only c_2 and c_22 (their "
        "coefficients are fitted from the fully symbolic m = 2, 3 cases and checked at m = 1, 2, 3).",
        "Visibility is the ratio of total variances (traces of the covariance blocks), which is "
        "invariant to rotations of the tangent and normal frames.",
    )
    gaps = (
        "For uniform-ball sampling the visibility is not a function of ||II||_F alone: it also "
        "depends on sum_a tr(A_a)^2 (parameter trace_sq_sum).",
        "The visibility t^2 ||II||^2/(2m) is leading order only: the cubic chart terms change the "
        "tangent variance at order t^4, so V = t^2 ||II||^2/(2m) (1 + O(t^2)); the t^4 term is "
        "derived below for a curve.",
    )

    def _build(self, step):
        chart = step(
            "chart",
            "Chart: tangent coordinates are u; the normal coordinate along n_a is q_a "
            "(x = p + J u + sum_a n_a q_a).",
            sp.Eq(QA, sp.Rational(1, 2) * Q),
        )
        # Moments of each law, derived by integration (see _moments).
        u1, u2 = sp.symbols("u_1 u_2", real=True)
        g = step(
            "moments_gaussian",
            "Gaussian moments (integrated): c_2 = E[u_1^2], c_22 = E[u_1^2 u_2^2], c_4 = E[u_1^4].",
            sp.Tuple(
                sp.Eq(C2, monomial_expectation((2,), "gaussian")),
                sp.Eq(C22, monomial_expectation((2, 2), "gaussian")),
                sp.Eq(C4, monomial_expectation((4,), "gaussian")),
            ),
        )
        b = step(
            "moments_ball",
            "Uniform-ball moments for general m: sphere moments from the Gaussian polar split "
            "(E[z^k] = E|z|^|k| E[xi^k], chi moments integrated) times the radial moment "
            "E[R^k] = m t^k/(m+k) (integrated).",
            sp.Tuple(
                sp.Eq(C2, monomial_expectation((2, 0), "ball", M)),
                sp.Eq(C22, monomial_expectation((2, 2), "ball", M)),
                sp.Eq(C4, monomial_expectation((4, 0), "ball", M)),
            ),
        )
        gsub = {e.lhs: e.rhs for e in g}
        bsub = {e.lhs: e.rhs for e in b}

        # Fully symbolic m = 2, 3 ball cases -> coefficients of the general-m pattern.
        fits = {}
        for m in (2, 3):
            ex = _explicit(chart.rhs, m, "ball")
            entries = sorted(ex["A"].free_symbols | ex["B"].free_symbols, key=str)
            alpha, beta = _fit(ex["cov_ab"], [ex["trA"] * ex["trB"], ex["trAB"]], entries)
            (gamma,) = _fit(ex["mean_qa"], [ex["trA"]], entries)
            fits[m] = (alpha, beta, gamma)
        step(
            "explicit_fit",
            "Fully symbolic A, B at m = 2 and m = 3 (ball law): Cov(q_A, q_B) = alpha tr(A)tr(B) + "
            "beta tr(AB) and E[q_A] = gamma tr(A); the fitted (alpha, beta, gamma) per m.",
            sp.Tuple(*(sp.Tuple(m, *fits[m]) for m in (2, 3))),
        )
        # Express alpha, beta, gamma as linear combinations of c_22 and c_2^2 (resp. c_2): two
        # values of m give a linear system; its solution is the general-m pattern.
        k1, k2, k3, k4, k5 = sp.symbols("k1:6")
        eqs = []
        for m in (2, 3):
            c2m, c22m = bsub[C2].subs(M, m), bsub[C22].subs(M, m)
            alpha, beta, gamma = fits[m]
            eqs += [
                sp.Eq(alpha, k1 * c22m + k2 * c2m**2),
                sp.Eq(beta, k3 * c22m + k4 * c2m**2),
                sp.Eq(gamma, k5 * c2m),
            ]
        sol = sp.solve(eqs, [k1, k2, k3, k4, k5], dict=True)[0]
        cov_general = step(
            "normal_cov",
            "General-m normal covariance (pattern solved from m = 2, 3; it is the contraction of "
            "the isotropic fourth-moment tensor): Cov(q_A, q_B).",
            sp.Eq(
                sp.Symbol(r"\operatorname{Cov}(q_A, q_B)"),
                sp.expand((sol[k1] * C22 + sol[k2] * C2**2) * TRA * TRB
                          + (sol[k3] * C22 + sol[k4] * C2**2) * TRAB),
            ),
        )
        centroid_general = step(
            "centroid",
            "Centroid shift into the normal space: E[q_a] (its norm over a uses sum_a tr(A_a)^2).",
            sp.Eq(sp.Symbol(r"E[q_{a}]"), sol[k5] * C2 * sp.Symbol(r"\operatorname{tr}A_a")),
        )
        step(
            "cross_cov",
            "Tangent-normal cross-covariance Cov(u_i, q_a): every term is an odd moment (m = 3, "
            "fully symbolic, ball law; the Gaussian case is checked too).",
            _explicit(chart.rhs, 3, "ball")["cross_cov"],
        )
        tan_total = step(
            "tangent_variance",
            "Tangent covariance E[u u^T] = c_2 I_m (odd moments vanish), so the total tangent "
            "variance is its trace.",
            sp.Eq(sp.Symbol("T(t)"), sp.Sum(C2, (sp.Symbol("i"), 1, M)).doit()),
        ).rhs
        normal_total = step(
            "normal_variance",
            "Total normal variance: sum over a of Cov(q_a, q_a) with A = B = A_a; sum_a tr(A_a)^2 "
            "= S_tr and sum_a tr(A_a^2) = ||II||_F^2.",
            sp.Eq(
                sp.Symbol("N(t)"),
                sp.expand(cov_general.rhs.subs({TRA * TRB: S, TRAB: II2})),
            ),
        ).rhs
        vis = sp.simplify(normal_total / tan_total)
        step("visibility", "Visibility V = N / T for any rotation-invariant law.",
             sp.Eq(sp.Symbol("V(t)"), vis))
        shift_norm = sp.factor(centroid_general.rhs.subs(sp.Symbol(r"\operatorname{tr}A_a"), TRN))
        for law, sub in (("gaussian", gsub), ("ball", bsub)):
            word = "Gaussian" if law == "gaussian" else "uniform-ball"
            step(f"tangent_variance_{law}", f"{word}: total tangent variance.",
                 sp.Eq(sp.Symbol("T(t)"), sp.factor(tan_total.subs(sub))))
            step(f"normal_variance_{law}", f"{word}: total normal variance.",
                 sp.Eq(sp.Symbol("N(t)"), sp.factor(normal_total.subs(sub))))
            step(f"visibility_{law}", f"{word}: visibility.",
                 sp.Eq(sp.Symbol("V(t)"), sp.factor(sp.simplify(vis.subs(sub)))))
            step(f"centroid_shift_{law}", f"{word}: norm of the centroid's normal shift.",
                 sp.Eq(sp.Symbol(r"\|E[q]\|"), sp.factor(shift_norm.subs(sub))))
        vg = sp.factor(sp.simplify(vis.subs(gsub)))
        step(
            "curve",
            "A curve (m = 1) of curvature kappa: ||II||^2 = kappa^2.",
            sp.Eq(sp.Symbol("V(t)"), sp.factor(vg.subs({M: 1, II2: KAPPA**2}))),
        )
        # Next order for a curve, general quartic chart (Gaussian u ~ N(0, t^2)).
        step(
            "next_order_curve",
            "Next order: for the curve chart x(u) = (u + a_3 u^3, kappa u^2/2 + b_3 u^3 + b_4 u^4) "
            "with u ~ N(0, t^2), the series of N/T to order t^4 (the t^4 term depends on the "
            "cubic and quartic jets, so V = kappa^2 t^2/2 (1 + O(t^2))).",
            sp.Eq(sp.Symbol("V(t)"), _next_order_series()),
        )
        step(
            "circle_exact",
            "Circle of curvature kappa, arc-length chart, u ~ N(0, t^2): exact visibility "
            "(Gaussian integrals of sin and cos).",
            sp.Eq(sp.Symbol("V(t)"), _circle_exact()),
        )
        symbols = {"t": T, "m": M, "ii_norm_sq": II2, "trace_sq_sum": S, "trace_norm": TRN,
                   "kappa": KAPPA, "c_2": C2, "c_22": C22}
        return "visibility_gaussian", symbols

    # -- predictions ----------------------------------------------------------------------

    def _predictions(self):
        t = Param("t", "positive", "chart scale: std of each Gaussian coordinate, or ball radius")
        m = Param("m", "int>=1", "manifold dimension")
        ii = Param("ii_norm_sq", "nonneg", "||II||_F^2 = sum_a tr(A_a^2)")
        samp = Param("sampling", "choice", "law of the chart coordinates", "gaussian",
                     SAMPLINGS, required=False)
        tss = Param("trace_sq_sum", "nonneg",
                    "sum_a tr(A_a)^2; required for sampling='ball', no effect for 'gaussian'",
                    None, required=False)
        trn = Param("trace_norm", "nonneg", "sqrt(sum_a tr(A_a)^2), norm of the mean-curvature "
                    "vector sum_a tr(A_a) n_a")
        return (
            Prediction("visibility", "normal variance / tangent variance",
                       (t, ii, m, samp, tss), _pred_vis("visibility")),
            Prediction("centroid_shift", "norm of the centroid's shift into the normal space",
                       (t, trn, m, samp), _pred_centroid),
            Prediction("tangent_variance", "total tangent variance (trace of the tangent block)",
                       (t, m, samp), _pred_tangent),
            Prediction("normal_variance", "total normal variance (trace of the normal block)",
                       (t, ii, m, samp, tss), _pred_vis("normal_variance")),
            Prediction(
                "visibility_curve_next_order",
                "curve chart (u + a3 u^3, kappa u^2/2 + b3 u^3 + b4 u^4), Gaussian u: V to O(t^4)",
                (t, Param("kappa", "positive", "curvature"), Param("a3", "real", "cubic tangent jet"),
                 Param("b3", "real", "cubic normal jet"), Param("b4", "real", "quartic normal jet")),
                _pred_next_order,
            ),
        )

    def _check_specs(self):
        specs = [
            CheckSpec("gaussian visibility equals t^2 ||II||^2/(2m)", "symbolic",
                      "The derived Gaussian visibility against the stated formula.",
                      _check_stated_gaussian),
            CheckSpec("curve visibility equals kappa^2 t^2/2", "symbolic",
                      "The m = 1 specialisation against the stated curve formula.",
                      _check_curve),
        ]
        for m in (1, 2, 3):
            for law in SAMPLINGS:
                specs.append(CheckSpec(
                    f"explicit m={m} {law}: general formulas", "symbolic",
                    f"Fully symbolic A, B at m = {m} ({law}): mean, tangent covariance, cross "
                    "covariance, centroid and normal covariance equal the general-m formulas.",
                    _check_explicit(m, law)))
        specs += [
            CheckSpec("next order: circle series", "symbolic",
                      "The exact circle visibility's series equals the jet formula at a_3 = "
                      "-kappa^2/6, b_3 = 0, b_4 = -kappa^3/24.", _check_circle),
            CheckSpec("quadrature m=2 (gaussian, ball)", "numeric",
                      "Tensor Gauss-Hermite (Gaussian) and polar Gauss-Legendre (ball) "
                      "quadrature of the normal and tangent variances at random A_a, t.",
                      _check_quadrature),
            CheckSpec("monte-carlo visibility and centroid", "monte-carlo",
                      "Sample the chart in R^D with a random orthonormal frame (Gaussian and "
                      "ball, m = 2, two normal directions); compare visibility, tangent and "
                      "normal variances and the centroid shift with the predictions "
                      "(tolerance 5 batch standard errors).", _check_mc),
        ]
        return tuple(specs)


# -- prediction functions ---------------------------------------------------------------------


def _ball_needs(quantity: str, trace_sq_sum, ii_norm_sq, m):
    if trace_sq_sum is None:
        raise ValidationError(
            f"curvature-visibility/{quantity}: sampling='ball' needs trace_sq_sum = "
            "sum_a tr(A_a)^2 (the ball visibility is not a function of ||II||_F alone)"
        )
    if np.any(np.asarray(trace_sq_sum) > np.asarray(m) * np.asarray(ii_norm_sq) * (1 + 1e-9)
              + 1e-12):
        raise ValidationError(
            f"curvature-visibility/{quantity}: trace_sq_sum must be <= m * ii_norm_sq "
            "((tr A)^2 <= m tr(A^2)); were the arguments swapped?"
        )


def _pred_vis(key: str):
    def fn(d: Derivation, t, ii_norm_sq, m, sampling="gaussian", trace_sq_sum=None):
        if sampling == "ball":
            _ball_needs(key, trace_sq_sum, ii_norm_sq, m)
        s = 0.0 if trace_sq_sum is None else trace_sq_sum
        f = d.lambdified(f"{key}_{sampling}", (T, M, II2, S))
        return f(t, m, ii_norm_sq, s) + 0.0 * np.asarray(s)
    return fn


def _pred_centroid(d: Derivation, t, trace_norm, m, sampling="gaussian"):
    f = d.lambdified(f"centroid_shift_{sampling}", (T, M, TRN))
    return f(t, m, trace_norm) + 0.0 * np.asarray(m)


def _pred_tangent(d: Derivation, t, m, sampling="gaussian"):
    f = d.lambdified(f"tangent_variance_{sampling}", (T, M))
    return f(t, m) + 0.0 * np.asarray(t)


def _pred_next_order(d: Derivation, t, kappa, a3, b3, b4):
    f = d.lambdified("next_order_curve", (T, KAPPA, A3, B3, B4))
    return f(t, kappa, a3, b3, b4)


def visibility(t, ii_norm_sq, m, sampling="gaussian", trace_sq_sum=None):
    """Normal variance / tangent variance; see the module docstring. Vectorised."""
    return get("curvature-visibility").predict(
        "visibility", t=t, ii_norm_sq=ii_norm_sq, m=m, sampling=sampling, trace_sq_sum=trace_sq_sum)


def centroid_shift(t, trace_norm, m, sampling="gaussian"):
    """Norm of the centroid's normal shift, 1/2 c_2 sqrt(sum_a tr(A_a)^2). Vectorised."""
    return get("curvature-visibility").predict(
        "centroid_shift", t=t, trace_norm=trace_norm, m=m, sampling=sampling)


def tangent_variance(t, m, sampling="gaussian"):
    """Total tangent variance m c_2. Vectorised."""
    return get("curvature-visibility").predict("tangent_variance", t=t, m=m, sampling=sampling)


def normal_variance(t, ii_norm_sq, m, sampling="gaussian", trace_sq_sum=None):
    """Total normal variance. Vectorised."""
    return get("curvature-visibility").predict(
        "normal_variance", t=t, ii_norm_sq=ii_norm_sq, m=m, sampling=sampling,
        trace_sq_sum=trace_sq_sum)


def visibility_curve_next_order(t, kappa, a3, b3, b4):
    """Visibility of the quartic curve chart to order t^4 (Gaussian u). Vectorised."""
    return get("curvature-visibility").predict(
        "visibility_curve_next_order", t=t, kappa=kappa, a3=a3, b3=b3, b4=b4)


def sample_chart_coordinates(rng: np.random.Generator, n: int, m: int, t: float,
                             sampling: str) -> np.ndarray:
    """N chart coordinates, shape (n, m): N(0, t^2 I_m) or uniform in the ball of radius t."""
    z = rng.standard_normal((n, m))
    if sampling == "gaussian":
        return t * z
    if sampling == "ball":
        r = rng.random(n) ** (1.0 / m)
        return t * z / np.linalg.norm(z, axis=1, keepdims=True) * r[:, None]
    raise ValidationError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")


# -- checks -----------------------------------------------------------------------------------


def _check_stated_gaussian(d, rng):
    r = symbolic_residual(d.expr("visibility_gaussian").rhs - T**2 * II2 / (2 * M))
    return r, 0.0, "V_gauss - t^2 ||II||^2/(2m)"


def _check_curve(d, rng):
    r = symbolic_residual(d.expr("curve").rhs - KAPPA**2 * T**2 / 2)
    return r, 0.0, "V_curve - kappa^2 t^2/2"


def _check_explicit(m: int, law: str):
    def fn(d, rng):
        ex = _explicit(d.expr("chart").rhs, m, law)
        mom = {e.lhs: e.rhs for e in d.expr(f"moments_{law}")}
        sub = {**mom, M: m}
        c2 = mom[C2].subs(M, m)
        res = [
            symbolic_residual(ex["mean_u"]),
            symbolic_residual(ex["tangent_cov"] - c2 * sp.eye(m)),
            symbolic_residual(ex["cross_cov"]),
            symbolic_residual(
                ex["mean_qa"]
                - d.expr("centroid").rhs.subs(sp.Symbol(r"\operatorname{tr}A_a"), ex["trA"])
                .subs(sub)),
            symbolic_residual(
                ex["cov_ab"]
                - d.expr("normal_cov").rhs.subs({TRA: ex["trA"], TRB: ex["trB"],
                                                  TRAB: ex["trAB"]}).subs(sub)),
            symbolic_residual(
                sp.Trace(ex["tangent_cov"]).doit()
                - d.expr(f"tangent_variance_{law}").rhs.subs(M, m)),
        ]
        return max(res), 0.0, "mean_u, tangent cov, cross cov, centroid, normal cov, trace"
    return fn


def _check_circle(d, rng):
    exact = d.expr("circle_exact").rhs
    ser = sp.series(exact, T, 0, 5).removeO()
    jet = d.expr("next_order_curve").rhs.subs({A3: -KAPPA**2 / 6, B3: 0, B4: -KAPPA**3 / 24})
    return symbolic_residual(ser - jet), 0.0, "series(V_circle, t, 5) - jet formula"


def _random_shapes(rng, m, codim):
    A = rng.standard_normal((codim, m, m))
    return (A + A.transpose(0, 2, 1)) / 2


def _invariants(A):
    tr = np.trace(A, axis1=1, axis2=2)
    return float(np.sum(A * A)), float(np.sum(tr**2))


def _check_quadrature(d, rng):
    m, errs = 2, []
    A = _random_shapes(rng, m, 2)
    t = float(rng.uniform(0.2, 1.5))
    ii2, s = _invariants(A)
    # Gaussian: probabilists' Gauss-Hermite nodes (exact for polynomials of degree <= 2n-1).
    x, w = np.polynomial.hermite_e.hermegauss(8)
    w = w / w.sum()
    U = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2) * t
    W = np.outer(w, w).ravel()
    # Ball: polar coordinates, Gauss-Legendre in r (weight r dr) and uniform in theta.
    xr, wr = np.polynomial.legendre.leggauss(8)
    rr = (xr + 1) / 2 * t
    wrr = wr * rr
    th = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    Ub = np.stack([np.outer(rr, np.cos(th)).ravel(), np.outer(rr, np.sin(th)).ravel()], -1)
    Wb = np.outer(wrr, np.ones_like(th)).ravel()
    Wb = Wb / Wb.sum()
    for law, UU, WW in (("gaussian", U, W), ("ball", Ub, Wb)):
        q = 0.5 * np.einsum("ni,aij,nj->na", UU, A, UU)
        tv = np.sum(WW[:, None] * UU**2)
        qm = WW @ q
        nv = np.sum(WW[:, None] * (q - qm) ** 2)
        errs.append(relative_error(tv, d.predict("tangent_variance", t=t, m=m, sampling=law)))
        errs.append(relative_error(nv, d.predict("normal_variance", t=t, ii_norm_sq=ii2, m=m,
                                                 sampling=law, trace_sq_sum=s)))
        errs.append(relative_error(np.linalg.norm(qm), d.predict(
            "centroid_shift", t=t, trace_norm=np.sqrt(s), m=m, sampling=law)))
    return max(errs), 1e-9, "max relative error of quadrature vs prediction"


def _check_mc(d, rng):
    m, codim, D, n, nb = 2, 2, 6, 200_000, 20
    worst = 0.0
    for law in SAMPLINGS:
        A = _random_shapes(rng, m, codim)
        ii2, s = _invariants(A)
        t = 0.5
        frame, _ = np.linalg.qr(rng.standard_normal((D, m + codim)))
        J, N = frame[:, :m], frame[:, m:]
        u = sample_chart_coordinates(rng, n, m, t, law)
        q = 0.5 * np.einsum("ni,aij,nj->na", u, A, u)
        p = rng.standard_normal(D)  # a random base point
        x = p + u @ J.T + q @ N.T
        def stats(xb, J=J, N=N, p=p):
            xc = xb - xb.mean(0)
            tv = np.sum((xc @ J) ** 2) / (len(xb) - 1)
            nv = np.sum((xc @ N) ** 2) / (len(xb) - 1)
            return nv / tv, np.linalg.norm((xb.mean(0) - p) @ N)

        full = stats(x)  # full-sample estimates; batches only give the standard errors
        batches = np.array([stats(xb) for xb in np.array_split(x, nb)])
        pv = d.predict("visibility", t=t, ii_norm_sq=ii2, m=m, sampling=law, trace_sq_sum=s)
        ps = d.predict("centroid_shift", t=t, trace_norm=np.sqrt(s), m=m, sampling=law)
        for j, pred in enumerate((pv, ps)):
            se = np.std(batches[:, j], ddof=1) / np.sqrt(nb)
            worst = max(worst, abs(full[j] - pred) / se)
    return worst, 5.0, "max |MC - prediction| in batch standard errors"

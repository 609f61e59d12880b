"""Derivation ``tangent-amplification``: training moves representations mostly along the tangent.

Model: parameters move chart coordinates, du = -eta J^T g (to first order), on the quadratic chart
x(u) = p + J u + 1/2 II(u, u). Then dx = J du + II(u, du) + 1/2 II(du, du) exactly: the tangent
displacement is ||du|| <= eta G, the normal one <= eta G kappa ||u|| + 1/2 eta^2 G^2 kappa.

Quadratic toy (closed form): n representations with chart coordinates u_i(0) = 0 are trained on
l_i = lam/2 ||u_i - u_i*||^2, u_i* ~ N(0, tau^2 I_m), by gradient descent in chart coordinates,
u_i(k+1) = u_i(k) - eta lam (u_i(k) - u_i*); so u_i(k) = s_k u_i*, s_k = 1 - (1 - eta lam)^k.
Each representation also carries fixed isotropic ambient noise nu_i ~ N(0, sigma^2 I_dim) (not
trained). With Gamma_ab = tr(A_a A_b): ||II||^2 = tr Gamma and ``ii_gram_sq`` = tr(Gamma^2)
(default ||II||^4: one curved normal direction).

Predictions (``get("tangent-amplification").predict(quantity, **params)`` or the functions below;
numpy-vectorised):

- ``tangent_share(step, eta, lam=1.0, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1)``: tangent
  variance / total variance of the toy after ``step`` steps.
- ``isotropy_score(step, eta, lam=1.0, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1,
  ii_gram_sq=None)``: normalised participation ratio (tr C)^2 / (dim tr C^2) of the toy's
  covariance C, in [1/dim, 1] (1 = isotropic). IsoScore itself has no closed form here.
- ``normal_to_tangent_displacement(kappa, t, eta, grad_norm)``: the bound kappa t + 1/2 kappa eta G
  on ||normal displacement|| / ||tangent displacement|| of one step at chart radius ||u|| = t.
- ``tangent_displacement_bound(eta, grad_norm)``: eta G.
- ``normal_displacement_bound(kappa, t, eta, grad_norm)``: eta G kappa t + 1/2 eta^2 G^2 kappa.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from tangentlab.errors import ValidationError
from tangentlab.theory._moments import M
from tangentlab.theory.derivation import (
    CheckSpec,
    Derivation,
    Param,
    Prediction,
    get,
    relative_error,
    symbolic_residual,
)
from tangentlab.theory.visibility import TRAB

__all__ = [
    "TangentAmplification",
    "tangent_share",
    "isotropy_score",
    "normal_to_tangent_displacement",
    "tangent_displacement_bound",
    "normal_displacement_bound",
    "simulate_toy",
]

ETA = sp.Symbol("eta", positive=True)
LAM = sp.Symbol("lambda", positive=True)
TAU = sp.Symbol("tau", positive=True)
SIG = sp.Symbol("sigma", nonnegative=True)
KK = sp.Symbol("k", integer=True, nonnegative=True)
DIM = sp.Symbol("D", positive=True, integer=True)
II2 = sp.Symbol(r"\|II\|_F^2", nonnegative=True)
GSQ = sp.Symbol(r"\operatorname{tr}\Gamma^2", nonnegative=True)
KAPPA = sp.Symbol("kappa", positive=True)
TT = sp.Symbol("t", positive=True)
GN = sp.Symbol("G", positive=True)
H = sp.Symbol("h_II", positive=True)
SK = sp.Symbol("s_k", positive=True)
_BIL = sp.Symbol(r"II(u,\Delta{}u)", real=True)
_QUAD = sp.Symbol(r"II(\Delta{}u,\Delta{}u)", real=True)


class TangentAmplification(Derivation):
    """Tangent amplification dynamics under gradient steps (see the module docstring)."""
    name = "tangent-amplification"
    title = "Tangent amplification under training dynamics"
    summary = (
        "One step du = -eta J^T g moves x by J du + II(u, du) + 1/2 II(du, du): tangent O(eta G), "
        "normal O(eta G kappa t) + O(eta^2 G^2 kappa). On a quadratic toy the tangent share of "
        "variance and an isotropy score have closed forms in the step count."
    )
    model_assumptions = (
        "Quadratic chart x(u) = p + J u + h_II II(u, u), h_II = 1/2, J orthonormal.",
        "Parameters move chart coordinates: du = -eta J^T g (first order), ||g|| <= G.",
        "Toy: u_i(0) = 0, targets u_i* ~ N(0, tau^2 I_m), loss lam/2 ||u - u*||^2 per point, "
        "gradient descent in chart coordinates; fixed isotropic noise N(0, sigma^2 I_D) added to "
        "every representation; population (n -> infinity) moments.",
    )
    gaps = (
        "The tangent share need not end above where it starts: the normal variance grows like "
        "s_k^4 tau^4 ||II||^2/2 and the tangent one like m s_k^2 tau^2. The share's limit exceeds "
        "its initial value m/D iff tau^2 ||II||^2 < 2 (D - m) (step share_rises_iff): "
        "amplification of tangent variance holds only while curvature times target spread is "
        "small.",
    )

    def _build(self, step):
        chart = step("chart", "Chart coefficient of the second fundamental form.",
                     sp.Eq(H, sp.Rational(1, 2)))
        h = chart.rhs
        # Exact displacement on an explicit m = 2 chart with symbolic entries.
        u = sp.Matrix(sp.symbols("u_1 u_2", real=True))
        du = sp.Matrix(sp.symbols(r"\Delta{}u_1 \Delta{}u_2", real=True))
        A = sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"a_{min(i, j) + 1}{max(i, j) + 1}", real=True))
        q = lambda v: h * (v.T * A * v)[0]  # noqa: E731
        dq = sp.expand(q(u + du) - q(u))
        Bil, Quad = _BIL, _QUAD
        bil, quad = (u.T * A * du)[0], (du.T * A * du)[0]
        x0, x1 = sp.symbols("x0 x1")
        sol = sp.solve(sp.Poly(sp.expand(dq - x0 * bil - x1 * quad), *u, *du, *A.free_symbols)
                       .coeffs(), [x0, x1], dict=True)[0]
        disp = step("displacement",
                    "Normal displacement of one step, x(u + du) - x(u) projected on n_a "
                    "(explicit m = 2, symbolic A; the tangent displacement is J du exactly).",
                    sp.Eq(sp.Symbol(r"\Delta q"), sol[x0] * Bil + sol[x1] * Quad))
        cb, cq = disp.rhs.coeff(Bil), disp.rhs.coeff(Quad)
        nb = step("normal_bound",
                  "||II(u, du)|| <= kappa ||u|| ||du||, ||du|| = eta ||J^T g|| <= eta G, ||u|| = t.",
                  sp.Le(sp.Symbol(r"\|\Delta x_{N}\|"),
                        sp.expand(cb * KAPPA * TT * ETA * GN + cq * KAPPA * (ETA * GN) ** 2)))
        tb = step("tangent_bound", "Tangent displacement ||J du|| = ||du|| <= eta G.",
                  sp.Le(sp.Symbol(r"\|\Delta x_{T}\|"), ETA * GN))
        step("ratio_bound", "Normal/tangent displacement of one step (both scale with ||du||).",
             sp.Le(sp.Symbol(r"\|\Delta x_{N}\| / \|\Delta x_{T}\|"),
                   sp.expand(nb.rhs / tb.rhs)))
        step("over_T_steps", "Over T steps (triangle inequality, ||u|| <= t throughout): "
             "tangent path length <= T eta G, normal <= T times the one-step bound.",
             sp.Tuple(sp.Symbol("T") * tb.rhs, sp.Symbol("T") * nb.rhs))
        # Toy dynamics.
        uk = sp.Function("u")
        ustar = sp.Symbol("u^*", real=True)
        rec = uk(KK + 1) - (uk(KK) - ETA * LAM * (uk(KK) - ustar))
        sol_u = sp.rsolve(rec, uk(KK), {uk(0): 0})
        s_k = step("toy_solution", "Toy: gradient descent in chart coordinates from u(0) = 0 "
                   "(rsolve), u(k) = s_k u*.", sp.Eq(SK, sp.factor(sp.simplify(sol_u / ustar))))
        vis = get("curvature-visibility")
        tvar = vis.expr("tangent_variance_gaussian").rhs
        nvar = vis.expr("normal_variance_gaussian").rhs
        ncov = vis.expr("normal_cov").rhs
        gm = {e.lhs: e.rhs for e in vis.expr("moments_gaussian")}
        t_sym = sp.Symbol("t", positive=True)
        tan_k = sp.expand(tvar.subs(t_sym, SK * TAU) + M * SIG**2)
        nor_k = sp.expand(nvar.subs(t_sym, SK * TAU) + (DIM - M) * SIG**2)
        step("toy_variances", "Tangent and normal variance at step k (curvature-visibility with "
             "t = s_k tau, plus the noise in m and D - m directions).",
             sp.Tuple(sp.Eq(sp.Symbol("T_k"), tan_k), sp.Eq(sp.Symbol("N_k"), nor_k)))
        share = step("tangent_share", "Tangent share of variance T_k / (T_k + N_k).",
                     sp.Eq(sp.Symbol(r"\rho_k"), sp.simplify(tan_k / (tan_k + nor_k))))
        # Normal block: Cov(q_a, q_b) = coefficient * tr(A_a A_b) (Gaussian), + sigma^2 I.
        gam_coef = sp.simplify(ncov.subs(gm).subs(t_sym, SK * TAU).coeff(TRAB))
        trC = tan_k + nor_k
        trC2 = sp.expand(M * (tan_k / M) ** 2 + gam_coef**2 * GSQ + 2 * gam_coef * SIG**2 * II2
                         + (DIM - M) * SIG**4)
        step("isotropy", "Normalised participation ratio (tr C)^2 / (D tr C^2); the tangent block "
             "is (s_k^2 tau^2 + sigma^2) I_m, the normal block c Gamma + sigma^2 I with "
             "Gamma_ab = tr(A_a A_b), the cross block 0.",
             sp.Eq(sp.Symbol(r"\mathrm{PR}_k / D"), trC**2 / (DIM * trC2)))
        step("tangent_share_limit", "k -> infinity (0 < eta lam < 2, so s_k -> 1).",
             sp.Eq(sp.Symbol(r"\rho_\infty"), sp.simplify(share.rhs.subs(SK, 1))))
        lim = sp.simplify(share.rhs.subs(SK, 1))
        start = sp.simplify(share.rhs.subs(SK, 0))
        num, den = sp.fraction(sp.factor(sp.simplify(lim - start)))
        step("share_rises_iff", "Limit minus start, rho_inf - rho_0 (rho_0 = m/D): its sign is "
             "the sign of the numerator, since the denominator is positive.",
             sp.Eq(sp.Symbol(r"\rho_{\infty} - \rho_{0}"), num / den))
        step("tangent_share_k", "Tangent share as a function of k.",
             sp.Eq(sp.Symbol(r"\rho_k"), share.rhs.subs(SK, s_k.rhs)))
        symbols = {"eta": ETA, "lam": LAM, "tau": TAU, "sigma": SIG, "k": KK, "dim": DIM, "m": M,
                   "ii_norm_sq": II2, "ii_gram_sq": GSQ, "kappa": KAPPA, "t": TT, "G": GN}
        return "tangent_share_k", symbols

    def _predictions(self):
        stp = Param("step", "int>=0", "number of gradient steps k")
        eta = Param("eta", "positive", "learning rate")
        opt = lambda n, k, desc, dflt: Param(n, k, desc, dflt, required=False)  # noqa: E731
        toy = (
            stp, eta,
            opt("lam", "positive", "curvature of the toy loss", 1.0),
            opt("tau", "positive", "spread of the targets u*", 1.0),
            opt("ii_norm_sq", "nonneg", "||II||_F^2", 1.0),
            opt("m", "int>=1", "manifold dimension", 2),
            opt("dim", "int>=2", "ambient dimension D (> m)", 8),
            opt("sigma", "nonneg", "ambient noise std", 0.1),
        )
        kap = Param("kappa", "positive", "largest normal curvature")
        t = Param("t", "positive", "chart radius ||u|| of the point")
        gn = Param("grad_norm", "positive", "G, bound on ||J^T g||")
        return (
            Prediction("tangent_share", "tangent variance share of the toy after k steps", toy,
                       _pred_share),
            Prediction("isotropy_score", "normalised participation ratio of the toy covariance",
                       toy + (opt("ii_gram_sq", "nonneg",
                                  "tr(Gamma^2); default ii_norm_sq^2 (one curved normal)", None),),
                       _pred_iso),
            Prediction("normal_to_tangent_displacement",
                       "bound on normal/tangent displacement of one step", (kap, t, eta, gn),
                       _pred_ratio),
            Prediction("tangent_displacement_bound", "eta G", (eta, gn), _pred_tb),
            Prediction("normal_displacement_bound", "eta G kappa t + 1/2 eta^2 G^2 kappa",
                       (kap, t, eta, gn), _pred_nb),
        )

    def _check_specs(self):
        return (
            CheckSpec("displacement is II(u,du) + 1/2 II(du,du)", "symbolic",
                      "The derived normal displacement equals the stated form.", _check_disp),
            CheckSpec("toy solution solves the recurrence", "symbolic",
                      "s_k = 1 - (1 - eta lam)^k satisfies s_0 = 0 and the update.", _check_rec),
            CheckSpec("displacement bound on random steps", "numeric",
                      "||normal displacement|| <= bound for random u, du, A (m = 2).",
                      _check_bound),
            CheckSpec("closed forms vs iterated covariance", "numeric",
                      "Tangent share and PR from the closed form vs an explicit covariance "
                      "matrix (random A, m = 2, two normals) after iterating the update.",
                      _check_iterate),
            CheckSpec("monte-carlo toy training", "monte-carlo",
                      "Simulate the toy with 40 000 points, compare tangent share and isotropy "
                      "score at several steps (5 batch standard errors).", _check_mc),
        )


# -- predictions ------------------------------------------------------------------------------

_TOY_ARGS = (KK, ETA, LAM, TAU, II2, M, DIM, SIG)


def _check_dim(m, dim):
    if np.any(np.asarray(dim) <= np.asarray(m)):
        raise ValidationError(f"tangent-amplification: dim must exceed m, got dim={dim!r}, m={m!r}")


def _pred_share(d, step, eta, lam=1.0, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1):
    _check_dim(m, dim)
    f = d.lambdified("tangent_share_k", _TOY_ARGS)
    return f(step, eta, lam, tau, ii_norm_sq, m, dim, sigma)


def _pred_iso(d, step, eta, lam=1.0, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1,
              ii_gram_sq=None):
    _check_dim(m, dim)
    if ii_gram_sq is None:
        ii_gram_sq = np.asarray(ii_norm_sq) ** 2
    elif np.any(np.asarray(ii_gram_sq) > np.asarray(ii_norm_sq) ** 2 * (1 + 1e-9)):
        raise ValidationError("ii_gram_sq = tr(Gamma^2) must be <= ii_norm_sq^2")
    s = d.lambdified("toy_solution", (KK, ETA, LAM))(step, eta, lam)
    f = d.lambdified("isotropy", (SK, TAU, II2, M, DIM, SIG, GSQ))
    return f(s, tau, ii_norm_sq, m, dim, sigma, ii_gram_sq)


def _pred_ratio(d, kappa, t, eta, grad_norm):
    return d.lambdified("ratio_bound", (KAPPA, TT, ETA, GN))(kappa, t, eta, grad_norm)


def _pred_tb(d, eta, grad_norm):
    return d.lambdified("tangent_bound", (ETA, GN))(eta, grad_norm)


def _pred_nb(d, kappa, t, eta, grad_norm):
    return d.lambdified("normal_bound", (KAPPA, TT, ETA, GN))(kappa, t, eta, grad_norm)


def tangent_share(step, eta, lam=1.0, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1):
    """Tangent share of variance of the quadratic toy after ``step`` steps. Vectorised."""
    return get("tangent-amplification").predict(
        "tangent_share", step=step, eta=eta, lam=lam, tau=tau, ii_norm_sq=ii_norm_sq, m=m,
        dim=dim, sigma=sigma)


def isotropy_score(step, eta, lam=1.0, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1,
                   ii_gram_sq=None):
    """Normalised participation ratio (tr C)^2/(D tr C^2) of the toy. Vectorised."""
    return get("tangent-amplification").predict(
        "isotropy_score", step=step, eta=eta, lam=lam, tau=tau, ii_norm_sq=ii_norm_sq, m=m,
        dim=dim, sigma=sigma, ii_gram_sq=ii_gram_sq)


def normal_to_tangent_displacement(kappa, t, eta, grad_norm):
    """Bound kappa t + 1/2 kappa eta G on normal/tangent displacement of one step."""
    return get("tangent-amplification").predict(
        "normal_to_tangent_displacement", kappa=kappa, t=t, eta=eta, grad_norm=grad_norm)


def tangent_displacement_bound(eta, grad_norm):
    """Eta G."""
    return get("tangent-amplification").predict("tangent_displacement_bound", eta=eta,
                                                grad_norm=grad_norm)


def normal_displacement_bound(kappa, t, eta, grad_norm):
    """Eta G kappa t + 1/2 eta^2 G^2 kappa."""
    return get("tangent-amplification").predict(
        "normal_displacement_bound", kappa=kappa, t=t, eta=eta, grad_norm=grad_norm)


def simulate_toy(rng: np.random.Generator, n: int, steps, eta: float, lam: float, tau: float,
                 A: np.ndarray, dim: int, sigma: float) -> list[np.ndarray]:
    """Run the toy; returns the representations (n, dim) after each k in ``steps``.

    A: shape matrices, shape (codim, m, m) with m + codim <= dim; frame is the standard basis
    (tangent = first m coordinates, normals = the next codim).
    """
    codim, m, _ = A.shape
    ustar = tau * rng.standard_normal((n, m))
    noise = sigma * rng.standard_normal((n, dim))
    u = np.zeros((n, m))
    out, k = [], 0
    for target in sorted(steps):
        while k < target:
            u = u - eta * lam * (u - ustar)
            k += 1
        x = noise.copy()
        x[:, :m] += u
        x[:, m:m + codim] += 0.5 * np.einsum("ni,aij,nj->na", u, A, u)
        out.append(x)
    return out


# -- checks -----------------------------------------------------------------------------------


def _check_disp(d, rng):
    Bil, Quad = _BIL, _QUAD
    return symbolic_residual(d.expr("displacement").rhs - (Bil + Quad / 2)), 0.0, \
        "derived - (II(u,du) + 1/2 II(du,du))"


def _check_rec(d, rng):
    s = d.expr("toy_solution").rhs
    r1 = symbolic_residual(s.subs(KK, 0))
    r2 = symbolic_residual(s.subs(KK, KK + 1) - (s - ETA * LAM * (s - 1)))
    return max(r1, r2), 0.0, "s_0 and s_{k+1} - update(s_k)"


def _check_bound(d, rng):
    worst = 0.0
    for _ in range(50):
        A = rng.standard_normal((2, 2, 2))
        A = (A + A.transpose(0, 2, 1)) / 2
        th = np.linspace(0, np.pi, 2001)
        v = np.stack([np.cos(th), np.sin(th)], 1)
        kappa = np.max(np.linalg.norm(np.einsum("ni,aij,nj->na", v, A, v), axis=1))
        u, du = rng.standard_normal(2), rng.standard_normal(2) * rng.uniform(0.01, 1)
        q = lambda w, A=A: 0.5 * np.einsum("i,aij,j->a", w, A, w)  # noqa: E731
        nd = np.linalg.norm(q(u + du) - q(u))
        G, eta = np.linalg.norm(du), 1.0
        bound = d.predict("normal_displacement_bound", kappa=kappa * (1 + 1e-9),
                          t=np.linalg.norm(u), eta=eta, grad_norm=G)
        worst = max(worst, nd - bound)
    return max(worst, 0.0), 1e-12, "max violation"


def _iterate_s(k, eta, lam):
    u = 0.0
    for _ in range(k):
        u = u - eta * lam * (u - 1.0)
    return u


def _check_iterate(d, rng):
    errs = []
    for _ in range(5):
        A = rng.standard_normal((2, 2, 2))
        A = (A + A.transpose(0, 2, 1)) / 2
        k, eta, lam = int(rng.integers(0, 30)), rng.uniform(0.01, 0.5), rng.uniform(0.5, 2)
        tau, dim, sigma = rng.uniform(0.3, 1.5), int(rng.integers(5, 10)), rng.uniform(0.05, 0.5)
        s = _iterate_s(k, eta, lam)
        C = sigma**2 * np.eye(dim)
        C[:2, :2] += (s * tau) ** 2 * np.eye(2)
        gram = np.einsum("aij,bji->ab", A, A)
        C[2:4, 2:4] += 0.5 * (s * tau) ** 4 * gram
        share = np.trace(C[:2, :2]) / np.trace(C)
        pr = np.trace(C) ** 2 / (dim * np.trace(C @ C))
        kw = dict(step=k, eta=eta, lam=lam, tau=tau, ii_norm_sq=np.trace(gram), m=2, dim=dim,
                  sigma=sigma)
        errs.append(relative_error(d.predict("tangent_share", **kw), share))
        errs.append(relative_error(d.predict("isotropy_score", ii_gram_sq=np.sum(gram**2), **kw),
                                   pr))
    return max(errs), 1e-9, "max relative error"


def _check_mc(d, rng):
    A = rng.standard_normal((2, 2, 2))
    A = (A + A.transpose(0, 2, 1)) / 2
    gram = np.einsum("aij,bji->ab", A, A)
    eta, lam, tau, dim, sigma, n, nb = 0.1, 1.0, 0.8, 6, 0.2, 40_000, 20
    steps = (0, 3, 10, 60)
    xs = simulate_toy(rng, n, steps, eta, lam, tau, A, dim, sigma)
    worst = 0.0
    def stats(xx):
        C = np.cov(xx, rowvar=False)
        return np.trace(C[:2, :2]) / np.trace(C), np.trace(C) ** 2 / (dim * np.trace(C @ C))

    for k, x in zip(steps, xs):
        full = stats(x)  # full-sample estimate (batch estimates of ratios are biased)
        batches = np.array([stats(xb) for xb in np.array_split(x, nb)])
        kw = dict(step=k, eta=eta, lam=lam, tau=tau, ii_norm_sq=np.trace(gram), m=2, dim=dim,
                  sigma=sigma)
        preds = (d.predict("tangent_share", **kw),
                 d.predict("isotropy_score", ii_gram_sq=np.sum(gram**2), **kw))
        for j, pred in enumerate(preds):
            se = np.std(batches[:, j], ddof=1) / np.sqrt(nb)
            worst = max(worst, abs(full[j] - pred) / se)
    return worst, 5.0, "max |MC - prediction| in batch standard errors"

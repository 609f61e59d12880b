"""Derivation ``river-valley``: gradient descent against Muon (sign descent) on a quadratic valley.

Model: L = lam_r x^2 / 2 + sum_j lam_h y_j^2 / 2 with lam_h >> lam_r (x: the flat "river", y: the
steep "hills"). Gradient descent contracts each coordinate by (1 - eta lam) per step. Muon without
momentum takes the orthogonalized step -eta U V^T of the gradient matrix; for diagonal parameters
diag(x, y) that is sign descent, z <- z - eta sign(z), in every coordinate.

Hitting time = first step k with |z_k| <= eps for one coordinate (the river is the bottleneck).

Predictions (``get("river-valley").predict(quantity, **params)`` or the functions below;
numpy-vectorised; exact discrete step counts, ``inf`` when never reached):

- ``hitting_time(method, x0, lam, eta, eps, eta_sign=None, switch_step=None)``: method ``"gd"``
  (step eta), ``"sign"`` (step ``eta_sign``, default eta; ``lam`` unused) or ``"two-stage"``
  (``switch_step`` sign steps of size ``eta_sign``, then gradient descent with step eta; default
  ``switch_step`` = :func:`switch_point`).
- ``oscillation_band(eta, x0=None)``: amplitude max(r, eta - r), r = |x0| mod eta, of sign
  descent's final 2-cycle; without x0 its supremum eta (the band is [eta/2, eta)).
- ``switch_point(x0, lam, eta, eps, eta_sign=None)``: number of sign steps before switching to
  gradient descent that minimises the two-stage hitting time (exact, by enumeration; the
  derivation shows the continuous relaxation is concave, so the optimum is at an end: 0 or the
  sign step of closest approach, K = floor(|x0|/eta_s) or K + 1, whichever of r and eta_s - r
  is smaller).
- ``sign_faster(x0, lam, eta, eps, eta_sign=None)``: 1.0 where the continuous criterion
  (|x0| - eps)/eta_sign < ln(|x0|/eps)/gamma (gamma = -ln|1 - eta lam|) says sign descent
  reaches eps first, else 0.0 (valid for eps >= eta_sign/2).
- ``gd_stable_eta(lam_h)``: 2/lam_h, the largest stable gradient-descent step on the hills.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from tangentlab.errors import ValidationError
from tangentlab.theory.derivation import (
    CheckSpec,
    Derivation,
    Param,
    Prediction,
    get,
    symbolic_residual,
)

__all__ = [
    "RiverValley",
    "hitting_time",
    "oscillation_band",
    "switch_point",
    "sign_faster",
    "simulate",
]

X, Y = sp.symbols("x y", real=True)
LR = sp.Symbol("lambda_r", positive=True)
LH = sp.Symbol("lambda_h", positive=True)
ETA = sp.Symbol("eta", positive=True)
ETAS = sp.Symbol("eta_s", positive=True)
EPS = sp.Symbol("epsilon", positive=True)
X0 = sp.Symbol("x_0", positive=True)
KK = sp.Symbol("k", nonnegative=True)
K1 = sp.Symbol("k_1", nonnegative=True)
GAM = sp.Symbol("gamma", positive=True)
RHO = sp.Symbol("rho", positive=True)
METHODS = ("gd", "sign", "two-stage")


class RiverValley(Derivation):
    """Gradient descent against sign (Muon) steps on a quadratic river valley (see the module docstring)."""
    name = "river-valley"
    title = "River valley: gradient descent against Muon (sign descent)"
    summary = (
        "Hitting times of an eps-neighbourhood for gradient descent (geometric) and sign descent "
        "(linear, then a 2-cycle band of width ~eta), and the switch point of a two-stage "
        "schedule (sign, then gradient descent)."
    )
    model_assumptions = (
        "Quadratic valley L = lam_r x^2/2 + lam_h y^2/2 (one hill shown; hills are independent).",
        "Muon without momentum on diagonal parameters = orthogonalized gradient = sign descent.",
        "Hitting time: first step with |z_k| <= eps for the coordinate (river) considered; "
        "gradient descent with 0 < eta lam < 1 (monotone contraction) in the continuous forms.",
        "Two-stage schedule: k_1 sign steps (size eta_s), then gradient descent (size eta).",
    )
    gaps = (
        "The stationary point of the continuous two-stage time (switch when gradient descent's "
        "per-step progress gamma d equals the sign step eta_s) is a MAXIMUM, not a minimum: the "
        "relaxed time is concave in k_1, so the best schedule switches at an end point: either "
        "never use sign steps, or take them up to the closest approach min(r, eta_s - r) "
        "(K or K + 1 steps) and switch there.",
        "Sign descent never reaches eps < eta/2 unless the lattice |x0| - k eta happens to land "
        "within eps; the hitting time is then infinite.",
    )

    def _build(self, step):
        L = step("loss", "Quadratic valley.", sp.Eq(sp.Symbol("L"), LR * X**2 / 2 + LH * Y**2 / 2))
        gx = sp.diff(L.rhs, X)
        gstep = step("gd_step", "Gradient descent step on the river: x - eta dL/dx.",
                     sp.Eq(sp.Symbol("x_{k+1}"), sp.factor(X - ETA * gx)))
        xk = sp.Function("x")
        sol = sp.rsolve(xk(KK + 1) - gstep.rhs.subs(X, xk(KK)), xk(KK), {xk(0): X0})
        gd = step("gd_solution", "Solved recurrence (rsolve).", sp.Eq(sp.Symbol("x_k"), sol))
        rho_expr = sp.simplify(gd.rhs / X0).subs(KK, 1)
        step("gd_rate", "Per-step factor rho = 1 - eta lam_r and rate gamma = -ln|rho|.",
             sp.Tuple(sp.Eq(RHO, rho_expr), sp.Eq(GAM, -sp.log(sp.Abs(rho_expr)))))
        kk = sp.solve(sp.Eq(X0 * RHO**KK, EPS), KK)[0]
        gd_time = step("gd_hitting", "Hitting time: solve x0 rho^k = eps for k; the discrete "
                       "time is its ceiling.",
                       sp.Eq(sp.Symbol("k_{GD}"), sp.simplify(kk.subs(sp.log(RHO), -GAM))))
        hill_rate = -sp.log(sp.Abs(rho_expr.subs(LR, LH)))
        step("stability", "Stability on the hills needs |1 - eta lam_h| < 1, i.e. eta < 2/lam_h; "
             "then the river rate is gamma <= -ln(1 - 2 lam_r/lam_h) ~ 2 lam_r/lam_h.",
             sp.Tuple(sp.Eq(sp.Symbol(r"\eta_{max}"), sp.solve(sp.Eq(rho_expr.subs(LR, LH), -1),
                                                                ETA)[0]),
                      sp.Eq(sp.Symbol(r"\gamma_h"), hill_rate)))
        # Muon = orthogonalized gradient = sign for a diagonal gradient matrix.
        a, b = sp.symbols("a b", real=True, nonzero=True)
        Gm = sp.diag(LR * a, LH * b)
        orth = sp.simplify(Gm * (Gm.T * Gm) ** sp.Rational(-1, 2))
        step("muon_step", "Orthogonalized gradient G (G^T G)^(-1/2) of diag(lam_r x, lam_h y) at "
             "x = a, y = b (U V^T): the sign of each entry.", orth)
        zk = sp.Function("z")
        sol_s = sp.rsolve(zk(KK + 1) - (zk(KK) - ETAS), zk(KK), {zk(0): X0})
        step("sign_solution", "Sign descent from x0 > 0 while z > 0: z_k = x0 - k eta_s "
             "(rsolve), for k <= K = floor(x0/eta_s).", sp.Eq(sp.Symbol("z_k"), sol_s))
        ks = sp.solve(sp.Eq(sol_s, EPS), KK)[0]
        sign_time = step("sign_hitting", "Hitting time: x0 - k eta_s = eps; discrete time "
                         "ceil((x0 - eps)/eta_s), reached iff |x0 - k eta_s| <= eps there "
                         "(always when eps >= eta_s/2).", sp.Eq(sp.Symbol("k_{sign}"), ks))
        r = sp.Symbol("r", positive=True)
        z1 = r - ETAS  # one step from 0 < r < eta_s
        z2 = z1 + ETAS  # sign(z1) = -1
        step("band", "Band: from 0 < r < eta_s the iterates alternate r, r - eta_s, r (2-cycle); "
             "amplitude max(r, eta_s - r) in [eta_s/2, eta_s).",
             sp.Tuple(sp.Eq(sp.Symbol("z_{K+1}"), z1), sp.Eq(sp.Symbol("z_{K+2}"), z2),
                      sp.Eq(sp.Symbol(r"\text{amplitude}"), sp.Max(r, -z1))))
        T2 = step("two_stage", "Two-stage time (continuous): k_1 sign steps, then gradient "
                  "descent from d_1 = x0 - k_1 eta_s.",
                  sp.Eq(sp.Symbol("T(k_{1})"), K1 + gd_time.rhs.subs(X0, X0 - K1 * ETAS)))
        dT = sp.simplify(sp.diff(T2.rhs, K1))
        d2T = sp.simplify(sp.diff(T2.rhs, K1, 2))
        step("two_stage_derivatives", "First and second derivative in k_1: the second is < 0, "
             "so T is concave and its minimum over [0, K] is at an end point.",
             sp.Tuple(sp.Eq(sp.Symbol("T'"), dT), sp.Eq(sp.Symbol("T''"), d2T)))
        crit = sp.solve(sp.Eq(dT, 0), K1)[0]
        step("stationary_point", "The stationary point (where gamma d_1 = eta_s) is a maximum of "
             "T: the switch distance there,", sp.Eq(sp.Symbol("d_1^*"),
                                                    sp.simplify(X0 - crit * ETAS)))
        step("ordering", "Sign descent reaches eps first iff its time is below gradient "
             "descent's (continuous forms).",
             sp.Lt(sign_time.rhs, gd_time.rhs))
        symbols = {"x0": X0, "lam": LR, "lam_h": LH, "eta": ETA, "eta_sign": ETAS, "eps": EPS,
                   "k": KK, "k1": K1, "gamma": GAM, "rho": RHO}
        return "two_stage_derivatives", symbols

    def _predictions(self):
        meth = Param("method", "choice", "optimizer", None, METHODS)
        x0 = Param("x0", "positive", "initial distance |x0| along the river")
        lam = Param("lam", "positive", "river eigenvalue lam_r")
        eta = Param("eta", "positive", "gradient-descent step")
        eps = Param("eps", "positive", "radius of the target neighbourhood")
        etas = Param("eta_sign", "positive", "sign (Muon) step; default eta", None, required=False)
        sw = Param("switch_step", "int>=0", "sign steps before switching (two-stage)", None,
                   required=False)
        return (
            Prediction("hitting_time", "first step with |x_k| <= eps (inf if never)",
                       (meth, x0, lam, eta, eps, etas, sw), _pred_hitting),
            Prediction("oscillation_band", "amplitude of sign descent's 2-cycle",
                       (Param("eta", "positive", "sign step"),
                        Param("x0", "positive", "initial distance (None: supremum eta)", None,
                              required=False)), _pred_band),
            Prediction("switch_point", "optimal number of sign steps of the two-stage schedule",
                       (x0, lam, eta, eps, etas), _pred_switch),
            Prediction("sign_faster", "1.0 if sign descent is faster (continuous criterion)",
                       (x0, lam, eta, eps, etas), _pred_sign_faster),
            Prediction("gd_stable_eta", "largest stable gradient-descent step on the hills",
                       (Param("lam_h", "positive", "hill eigenvalue"),), _pred_stable),
        )

    def _check_specs(self):
        return (
            CheckSpec("gradient descent contracts by (1 - eta lam)", "symbolic",
                      "The derived GD solution equals x0 (1 - eta lam)^k.", _check_gd),
            CheckSpec("Muon step on a diagonal problem is sign descent", "symbolic",
                      "The orthogonalized gradient equals diag(sign a, sign b).", _check_muon),
            CheckSpec("two-stage time is concave", "symbolic",
                      "T''(k_1) = -eta_s^2/(gamma (x0 - k_1 eta_s)^2) < 0.", _check_concave),
            CheckSpec("simulated hitting times and band", "monte-carlo",
                      "Random valleys: iterate GD, sign descent (numpy) and Muon (SVD "
                      "orthogonalization of diag(grad)), compare hitting times, band amplitude "
                      "and the two-stage optimum with the predictions (exact equality).",
                      _check_simulation),
            CheckSpec("ordering criterion vs simulation", "numeric",
                      "Where the continuous criterion's margin exceeds 2 steps, the simulated "
                      "faster method agrees with sign_faster.", _check_ordering),
        )


# -- exact discrete hitting times -------------------------------------------------------------

_TOL = 1e-9


def _gd_time(x0, rho, eps):
    """First k with |x0| rho^k <= eps (rho: the derived per-step factor)."""
    x0 = abs(x0)
    if x0 <= eps:
        return 0.0
    rho = abs(rho)
    if rho == 0.0:
        return 1.0
    if rho >= 1.0:
        return math.inf
    k = math.ceil(math.log(eps / x0) / math.log(rho) - _TOL)
    while k > 0 and x0 * rho ** (k - 1) <= eps:  # guard float rounding
        k -= 1
    while x0 * rho**k > eps:
        k += 1
    return float(k)


def _sign_time(x0, eta_s, eps):
    x0 = abs(x0)
    if x0 <= eps:
        return 0.0
    k = max(0, math.ceil((x0 - eps) / eta_s - _TOL))
    while k > 0 and abs(x0 - (k - 1) * eta_s) <= eps:
        k -= 1
    if abs(x0 - k * eta_s) <= eps + _TOL * eta_s:
        return float(k)
    if abs(x0 - (k + 1) * eta_s) <= eps:  # rounding guard
        return float(k + 1)
    return math.inf


def _two_stage_time(x0, rho, eps, eta_s, k1):
    x0 = abs(x0)
    ks = _sign_time(x0, eta_s, eps)
    if ks <= k1:
        return ks
    kmax = math.floor(x0 / eta_s)
    if k1 > kmax:  # sign phase would overshoot into the band: iterate the 2-cycle exactly
        z = x0
        for _ in range(int(k1)):
            z = z - eta_s * math.copysign(1.0, z)
        return k1 + _gd_time(z, rho, eps)
    return k1 + _gd_time(x0 - k1 * eta_s, rho, eps)


def _switch(x0, rho, eps, eta_s):
    kmax = math.floor(abs(x0) / eta_s)
    if kmax > 2_000_000:
        cands = [0, kmax, kmax + 1]
    else:
        cands = range(0, kmax + 2)  # kmax + 1: one step into the band (|z| = eta_s - r)
    best, best_t = 0, math.inf
    for k1 in cands:
        t = _two_stage_time(x0, rho, eps, eta_s, k1)
        if t < best_t:
            best, best_t = k1, t
    return float(best)


def _rho(d, eta, lam):
    """The derived per-step contraction factor of gradient descent (step gd_rate)."""
    e = d.expr("gd_rate")[0].rhs
    return np.asarray(sp.lambdify([ETA, LR], e, "numpy")(eta, lam), dtype=float) + 0.0 * (
        np.asarray(eta) * np.asarray(lam))


def _sign_progress(d, eta_s):
    """Distance covered per sign step, from the derived solution z_k (step sign_solution)."""
    z = d.expr("sign_solution").rhs
    e = sp.simplify(z.subs(KK, 0) - z.subs(KK, 1))
    return np.asarray(sp.lambdify([ETAS, X0], e, "numpy")(eta_s, 1.0), dtype=float) + 0.0 * \
        np.asarray(eta_s)


def _pred_hitting(d, method, x0, lam, eta, eps, eta_sign=None, switch_step=None):
    es = _sign_progress(d, eta if eta_sign is None else eta_sign)
    rho = _rho(d, eta, lam)
    if method == "gd":
        fn = np.vectorize(_gd_time, otypes=[float])
        return fn(x0, rho, eps)
    if method == "sign":
        fn = np.vectorize(lambda a, c, e: _sign_time(a, c, e), otypes=[float])
        return fn(x0, es, eps) + 0.0 * np.asarray(lam)
    if switch_step is None:
        switch_step = np.vectorize(_switch, otypes=[float])(x0, rho, eps, es)
    fn = np.vectorize(lambda a, r, e, s, k: _two_stage_time(a, r, e, s, int(k)), otypes=[float])
    return fn(x0, rho, eps, es, switch_step)


def _pred_band(d, eta, x0=None):
    eta = _sign_progress(d, eta)
    if x0 is None:
        return np.asarray(eta, dtype=float)
    r = np.mod(np.asarray(x0, dtype=float), eta)
    return np.maximum(r, eta - r)


def _pred_switch(d, x0, lam, eta, eps, eta_sign=None):
    es = _sign_progress(d, eta if eta_sign is None else eta_sign)
    return np.vectorize(_switch, otypes=[float])(x0, _rho(d, eta, lam), eps, es)


def _pred_sign_faster(d, x0, lam, eta, eps, eta_sign=None):
    es = eta if eta_sign is None else eta_sign
    x0 = np.asarray(x0, dtype=float)
    if np.any(np.asarray(eta) * np.asarray(lam) >= 1):
        raise ValidationError("sign_faster: the continuous criterion needs 0 < eta * lam < 1")
    if np.any(x0 <= eps):
        raise ValidationError("sign_faster: needs x0 > eps")
    f_sign = d.lambdified("sign_hitting", (X0, ETAS, EPS))
    f_gd = d.lambdified("gd_hitting", (X0, GAM, EPS))
    gam = -np.log(np.abs(_rho(d, eta, lam)))
    return (f_sign(x0, es, eps) < f_gd(x0, gam, eps)).astype(float)


def _pred_stable(d, lam_h):
    e = d.expr("stability")[0].rhs
    return sp.lambdify([LH], e, "numpy")(lam_h)


def hitting_time(method, x0, lam, eta, eps, eta_sign=None, switch_step=None):
    """Exact first step with |x_k| <= eps (inf if never); see the module docstring."""
    return get("river-valley").predict("hitting_time", method=method, x0=x0, lam=lam, eta=eta,
                                       eps=eps, eta_sign=eta_sign, switch_step=switch_step)


def oscillation_band(eta, x0=None):
    """Amplitude of sign descent's final 2-cycle (supremum eta when x0 is None)."""
    return get("river-valley").predict("oscillation_band", eta=eta, x0=x0)


def switch_point(x0, lam, eta, eps, eta_sign=None):
    """Optimal number of sign steps before switching to gradient descent."""
    return get("river-valley").predict("switch_point", x0=x0, lam=lam, eta=eta, eps=eps,
                                       eta_sign=eta_sign)


def sign_faster(x0, lam, eta, eps, eta_sign=None):
    """1.0 where the continuous criterion says sign descent hits eps first."""
    return get("river-valley").predict("sign_faster", x0=x0, lam=lam, eta=eta, eps=eps,
                                       eta_sign=eta_sign)


def simulate(method: str, x0: float, lam: float, eta: float, eps: float, eta_sign=None,
             switch_step: int = 0, max_steps: int = 100_000) -> float:
    """Iterate one coordinate numerically; first k with |x_k| <= eps, or inf after max_steps."""
    es = eta if eta_sign is None else eta_sign
    x = float(x0)
    for k in range(max_steps + 1):
        if abs(x) <= eps:
            return float(k)
        use_sign = method == "sign" or (method == "two-stage" and k < switch_step)
        x = x - es * np.sign(x) if use_sign else x - eta * lam * x
    return math.inf


# -- checks -----------------------------------------------------------------------------------


def _check_gd(d, rng):
    return symbolic_residual(d.expr("gd_solution").rhs - X0 * (1 - ETA * LR) ** KK), 0.0, \
        "x_k - x0 (1 - eta lam)^k"


def _check_muon(d, rng):
    a, b = sp.symbols("a b", real=True, nonzero=True)
    target = sp.diag(sp.sign(a), sp.sign(b))
    diff = d.expr("muon_step") - target
    res = max(symbolic_residual(diff.subs({a: av, b: bv}))
              for av in (-2, sp.Rational(1, 3)) for bv in (-5, 7))
    return res, 0.0, "U V^T - diag(sign) at sign patterns"


def _check_concave(d, rng):
    d2 = d.expr("two_stage_derivatives")[1].rhs
    target = -ETAS**2 / (GAM * (X0 - K1 * ETAS) ** 2)
    return symbolic_residual(d2 - target), 0.0, "T'' - (-eta_s^2/(gamma d_1^2))"


def _check_simulation(d, rng):
    mismatches = 0
    total = 0
    for _ in range(30):
        x0 = float(rng.uniform(0.5, 5))
        lam = float(rng.uniform(0.01, 0.3))
        eta = float(rng.uniform(0.1, 1.0))
        eta_s = float(rng.uniform(0.02, 0.4))
        eps = float(rng.uniform(eta_s / 2, 1.5 * eta_s))
        for method in ("gd", "sign"):
            total += 1
            mismatches += simulate(method, x0, lam, eta, eps, eta_s) != d.predict(
                "hitting_time", method=method, x0=x0, lam=lam, eta=eta, eps=eps, eta_sign=eta_s)
        k1 = int(d.predict("switch_point", x0=x0, lam=lam, eta=eta, eps=eps, eta_sign=eta_s))
        best_sim = min(simulate("two-stage", x0, lam, eta, eps, eta_s, k)
                       for k in range(0, int(x0 / eta_s) + 2))
        total += 1
        mismatches += simulate("two-stage", x0, lam, eta, eps, eta_s, k1) != best_sim
        # band, and Muon via SVD on diag(grad) equals sign descent for 40 steps
        z = np.array([x0, float(rng.uniform(-3, 3))])
        lams = np.array([lam, 50.0])
        zs = z.copy()
        for _ in range(int(x0 / eta_s) + 6):
            Gm = np.diag(lams * z)
            U, _, Vt = np.linalg.svd(Gm)
            z = z - eta_s * np.diag(U @ Vt)
            zs = zs - eta_s * np.sign(zs)
        total += 2
        mismatches += not np.allclose(z, zs, atol=1e-9)
        amp = max(abs(z[0]), abs(z[0] - eta_s * np.sign(z[0])))
        mismatches += not math.isclose(amp, d.predict("oscillation_band", eta=eta_s, x0=x0),
                                       rel_tol=1e-7)
    return float(mismatches), 0.0, f"{mismatches} mismatches out of {total} comparisons"


def _check_ordering(d, rng):
    disagree = 0
    n = 0
    for _ in range(80):
        x0 = float(rng.uniform(0.5, 20))
        lam = float(rng.uniform(0.02, 0.5))
        eta = float(rng.uniform(0.1, 1.0))
        if eta * lam >= 1:
            continue
        eta_s = float(rng.uniform(0.01, 0.5))
        eps = float(rng.uniform(eta_s / 2, 2 * eta_s))
        if x0 <= eps:
            continue
        gam = -math.log(1 - eta * lam)
        margin = (x0 - eps) / eta_s - math.log(x0 / eps) / gam
        if abs(margin) < 2:
            continue
        n += 1
        sim = simulate("sign", x0, lam, eta, eps, eta_s) < simulate("gd", x0, lam, eta, eps)
        pred = bool(d.predict("sign_faster", x0=x0, lam=lam, eta=eta, eps=eps, eta_sign=eta_s))
        disagree += sim != pred
    return float(disagree), 0.0, f"{disagree} disagreements in {n} clear cases"

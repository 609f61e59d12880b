"""Derivation ``frequency-attenuation``: frequency-biased sampling attenuates curvature visibility.

Model: V token types with Zipf frequencies f_r = r^(-s) / H(V, s) (rank r = 1..V) and the pinning
law t_r = t0 (f_r / f_1)^(-alpha) = t0 r^(s alpha): each occurrence of token r has chart
coordinates u ~ N(0, t_r^2 I_m) around the same point of the quadratic chart (see
``curvature-visibility``). H(V, p) = sum_{r<=V} r^(-p) is sympy's ``harmonic(V, p)``; beta = s alpha.

Pooled visibility = pooled normal variance / pooled tangent variance (never a mean of per-token
ratios). *Occurrence* pooling weights token r by f_r, *type* pooling weights each token 1/V.

Predictions (``get("frequency-attenuation").predict(quantity, **params)`` or the functions below;
numpy-vectorised; n_types is an integer >= 2):

- ``attenuation(s, alpha, n_types)``: occurrence visibility / type visibility
  = [H(V, s-4b) H(V, -2b)] / [H(V, s-2b) H(V, -4b)], b = s alpha; < 1 for s, alpha > 0.
  It does not depend on t0, ||II||, m (with ``trace_sq_sum = 0``, see below).
- ``attenuation_limit(s, alpha)``: its limit as n_types -> infinity:
  (1 - s + 2b)(1 + 4b) / ((1 - s + 4b)(1 + 2b)) if s - 2b < 1, else 0.
- ``visibility_by_rank(rank, s, alpha, t0, ii_norm_sq, m, n_types)``: per-token visibility
  t_r^2 ||II||^2 / (2m) with t_r = t0 rank^(s alpha) (rank in 1..n_types).
- ``spread_by_rank(rank, s, alpha, t0)``: t_r.
- ``occurrence_visibility(s, alpha, t0, ii_norm_sq, m, n_types, trace_sq_sum=0.0)`` and
  ``type_visibility(...)`` (same parameters): pooled visibilities. ``trace_sq_sum`` =
  sum_a tr(A_a)^2 adds the between-token spread of the token centroids (each token's centroid is
  shifted by t_r^2 tr(A_a)/2); ``0`` gives the within-token (per-token centred) visibility.

``alpha = 0`` (no pinning) is allowed: every token has spread t0 and the attenuation is exactly 1.

Bad parameters (s <= 0, alpha < 0, t0 <= 0, n_types < 2, rank outside 1..n_types) raise
:class:`~tangentlab.errors.ValidationError`.
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

__all__ = [
    "FrequencyAttenuation",
    "attenuation",
    "attenuation_limit",
    "visibility_by_rank",
    "spread_by_rank",
    "occurrence_visibility",
    "type_visibility",
    "harmonic_numbers",
]

R = sp.Symbol("r", positive=True, integer=True)
NV = sp.Symbol("V", positive=True, integer=True)
SS = sp.Symbol("s", positive=True)
AL = sp.Symbol("alpha", positive=True)
BETA = sp.Symbol("beta", positive=True)
T0 = sp.Symbol("t_0", positive=True)
TR = sp.Symbol("t_r", positive=True)
FR = sp.Symbol("f_r", positive=True)


def _to_harmonic(expr: sp.Expr) -> sp.Expr:
    """Replace every Sum_{r=1}^{V} c r^q by c H(V, -q) (the definition of ``harmonic``)."""

    def conv(s: sp.Sum) -> sp.Expr:
        (var, lo, hi), = s.limits
        body = sp.powsimp(sp.expand_power_base(s.function, force=True), force=True)
        coeff, rest = body.as_independent(var, as_Add=False)
        if rest == 1:
            return coeff * hi
        base, ex = rest.as_base_exp()
        if base != var or lo != 1:
            raise ValueError(f"cannot convert {s}")
        return coeff * sp.harmonic(hi, sp.expand(-ex))

    return expr.replace(lambda e: isinstance(e, sp.Sum), conv)


def harmonic_numbers(n, p) -> np.ndarray:
    """H(n, p) = sum_{r=1}^{n} r^(-p), float64, vectorised over n (integers) and p."""
    n_arr, p_arr = np.broadcast_arrays(np.asarray(n, dtype=np.float64),
                                       np.asarray(p, dtype=np.float64))
    out = np.empty(n_arr.shape, dtype=np.float64)
    flat_n, flat_p, flat_o = n_arr.ravel(), p_arr.ravel(), out.ravel()
    for i in range(flat_n.size):
        r = np.arange(1, int(flat_n[i]) + 1, dtype=np.float64)
        with np.errstate(over="ignore"):
            flat_o[i] = np.sum(np.exp(-flat_p[i] * np.log(r)))
    if not np.all(np.isfinite(out)):
        raise ValidationError(
            "harmonic number overflows float64 (n_types^(4 s alpha) too large); use smaller "
            "s*alpha or n_types"
        )
    return out.reshape(n_arr.shape) if out.ndim else out[()]


_MODULES = [{"harmonic": harmonic_numbers}, "numpy"]


class FrequencyAttenuation(Derivation):
    name = "frequency-attenuation"
    title = "Frequency-biased sampling attenuates curvature visibility"
    summary = (
        "Zipf frequencies and the pinning law t_r = t0 (f_r/f_1)^(-alpha) give pooled visibilities "
        "in closed form with generalized harmonic numbers; the occurrence-weighted visibility is "
        "below the type-weighted one for every s, alpha > 0."
    )
    model_assumptions = (
        "Zipf law f_r = r^(-s)/H(V, s), r = 1..V, s > 0.",
        "Pinning law t_r = t0 (f_r/f_1)^(-alpha), alpha >= 0: frequent tokens have small spread "
        "(alpha = 0: no pinning, A = 1 exactly).",
        "Every token's occurrences are Gaussian in chart coordinates, u ~ N(0, t_r^2 I_m), around "
        "the same point of one quadratic chart (the curvature-visibility model).",
        "The pooled sample's visibility is its pooled normal variance over its pooled tangent "
        "variance. Unless trace_sq_sum is given, the between-token spread of centroids is left "
        "out (per-token centred pooling, or trace-free shape matrices).",
    )
    gaps = (
        "Averaging per-token visibility ratios (instead of pooling variances) gives a different "
        "number; the attenuation here is the ratio of pooled visibilities.",
        "Pooling uncentred occurrences adds the between-token centroid spread "
        "(1/4) sum_a tr(A_a)^2 Var_w(t_r^2), which the pure-II formula omits.",
    )

    def _build(self, step):
        vis = get("curvature-visibility")
        tan_tok = vis.expr("tangent_variance_gaussian").rhs.subs(sp.Symbol("t", positive=True), TR)
        nor_tok = vis.expr("normal_variance_gaussian").rhs.subs(sp.Symbol("t", positive=True), TR)
        shift_tok = vis.expr("centroid_shift_gaussian").rhs.subs(sp.Symbol("t", positive=True), TR)
        II2 = sp.Symbol(r"\|II\|_F^2", nonnegative=True)
        S = sp.Symbol(r"S_{tr}", nonnegative=True)
        TRN = sp.Symbol(r"\|\bar H\|", nonnegative=True)

        zsum = step("zipf_norm", "Zipf normalisation: sum_{r=1}^{V} r^(-s), a generalized "
                    "harmonic number.", sp.Eq(sp.Symbol("Z"), _to_harmonic(
                        sp.Sum(R ** (-SS), (R, 1, NV)))))
        f_r = step("zipf", "Zipf frequencies.", sp.Eq(FR, R ** (-SS) / zsum.rhs))
        f_1 = f_r.rhs.subs(R, 1)
        t_r = step("pinning", "Pinning law t_r = t0 (f_r/f_1)^(-alpha), simplified.",
                   sp.Eq(TR, sp.powsimp(sp.simplify(T0 * (f_r.rhs / f_1) ** (-AL)), force=True)))
        tr_expr = t_r.rhs.subs(SS * AL, BETA)
        step("per_token", "Per-token tangent variance, normal variance and centroid shift "
             "(curvature-visibility, Gaussian), with t = t_r.",
             sp.Tuple(tan_tok.subs(TR, tr_expr), nor_tok.subs(TR, tr_expr),
                      shift_tok.subs(TR, tr_expr)))
        weights = {"occurrence": f_r.rhs, "type": 1 / NV}
        vis_keys = {}
        for pool, w in weights.items():
            def E(e, w=w):
                return sp.simplify(_to_harmonic(sp.Sum(sp.expand(w * e), (R, 1, NV))))
            tan = E(tan_tok.subs(TR, tr_expr))
            within = E(nor_tok.subs(TR, tr_expr))
            # between-token variance of the centroid shifts, summed over normal directions
            m1 = E(tr_expr**2)
            m2 = E(tr_expr**4)
            between = sp.Rational(1, 4) * S * (m2 - m1**2)
            nor = step(f"normal_{pool}", f"{pool.capitalize()}-weighted pooled normal variance "
                       "(within-token + between-token centroid spread).",
                       sp.Eq(sp.Symbol(f"N_{{{pool}}}"), within + between)).rhs
            tan = step(f"tangent_{pool}", f"{pool.capitalize()}-weighted pooled tangent variance.",
                       sp.Eq(sp.Symbol(f"T_{{{pool}}}"), tan)).rhs
            vis_keys[pool] = step(f"visibility_{pool}",
                                  f"{pool.capitalize()}-weighted pooled visibility N/T.",
                                  sp.Eq(sp.Symbol(f"V_{{{pool}}}"), sp.simplify(nor / tan))).rhs
        att = step(
            "attenuation",
            "Attenuation factor: occurrence over type visibility (trace_sq_sum = 0).",
            sp.Eq(sp.Symbol("A"), sp.simplify(
                (vis_keys["occurrence"] / vis_keys["type"]).subs(S, 0))),
        ).rhs
        # Proof that A < 1: A = E_nu[a b] / (E_nu[a] E_nu[b]) with nu_r ~ r^(2 beta), a = r^(2 beta)
        # (increasing), b = r^(-s) (decreasing); Chebyshev's sum inequality gives Cov_nu(a, b) < 0.
        nu = R ** (2 * BETA) / _to_harmonic(sp.Sum(R ** (2 * BETA), (R, 1, NV)))
        Enu = lambda e: _to_harmonic(sp.Sum(sp.expand(nu * e), (R, 1, NV)))  # noqa: E731
        a, b = R ** (2 * BETA), R ** (-SS)
        step("chebyshev_form",
             "A as a normalized covariance: A = E_nu[a b] / (E_nu[a] E_nu[b]) with nu_r ~ "
             "r^(2 beta), a_r = r^(2 beta) increasing and b_r = r^(-s) decreasing; Chebyshev's "
             "sum inequality (Cov_nu(a, b) = 1/2 sum_ij nu_i nu_j (a_i - a_j)(b_i - b_j) < 0 for "
             "V >= 2, beta > 0, s > 0) gives A < 1.",
             sp.Eq(sp.Symbol("A"), sp.simplify(Enu(a * b) / (Enu(a) * Enu(b)))))
        # Limits V -> oo from the leading asymptotics of H(V, p).
        att_lead = att.replace(  # H(V, p) ~ V^(1-p)/(1-p), valid for p < 1
            lambda e: isinstance(e, sp.harmonic),
            lambda e: e.args[0] ** (1 - e.args[1]) / (1 - e.args[1]))
        lim = sp.factor(sp.limit(sp.simplify(att_lead), NV, sp.oo))
        step("limit_divergent",
             "V -> oo when s - 2 beta < 1 (all four harmonic numbers diverge; H(V, p) ~ "
             "V^(1-p)/(1-p) for p < 1): a finite limit. When s - 2 beta >= 1 the occurrence "
             "ratio grows slower than V^(2 beta) and A -> 0.",
             sp.Eq(sp.Symbol(r"A_{\infty}"), lim))
        symbols = {"s": SS, "alpha": AL, "beta": BETA, "V": NV, "r": R, "t0": T0, "m": M,
                   "ii_norm_sq": II2, "trace_sq_sum": S, "trace_norm": TRN}
        return "attenuation", symbols

    def _predictions(self):
        s = Param("s", "positive", "Zipf exponent")
        al = Param("alpha", "nonneg", "pinning exponent (0 = no pinning: attenuation 1)")
        n = Param("n_types", "int>=2", "number of token types V")
        t0 = Param("t0", "positive", "spread of the most frequent token")
        ii = Param("ii_norm_sq", "nonneg", "||II||_F^2")
        m = Param("m", "int>=1", "manifold dimension")
        tss = Param("trace_sq_sum", "nonneg", "sum_a tr(A_a)^2 (0: per-token centred pooling)",
                    0.0, required=False)
        rank = Param("rank", "int>=1", "token rank (1 = most frequent)")
        return (
            Prediction("attenuation", "occurrence-weighted / type-weighted visibility",
                       (s, al, n), _pred_att),
            Prediction("attenuation_limit", "limit of the attenuation as n_types -> infinity",
                       (s, al), _pred_limit),
            Prediction("visibility_by_rank", "per-token visibility t_r^2 ||II||^2/(2m)",
                       (rank, s, al, t0, ii, m, n), _pred_rank),
            Prediction("spread_by_rank", "per-token spread t_r = t0 r^(s alpha)",
                       (rank, s, al, t0), _pred_spread),
            Prediction("occurrence_visibility", "visibility of the occurrence-pooled sample",
                       (s, al, t0, ii, m, n, tss), _pred_pool("occurrence")),
            Prediction("type_visibility", "visibility of the type-pooled sample",
                       (s, al, t0, ii, m, n, tss), _pred_pool("type")),
        )

    def _check_specs(self):
        return (
            CheckSpec("attenuation is the normalized covariance form", "symbolic",
                      "The derived attenuation equals E_nu[ab]/(E_nu[a]E_nu[b]).",
                      _check_cheb_form),
            CheckSpec("Chebyshev covariance identity (V = 4)", "symbolic",
                      "sum nu a b sum nu - sum nu a sum nu b = 1/2 sum_ij nu_i nu_j (a_i - a_j)"
                      "(b_i - b_j) for generic symbols, V = 4.", _check_cheb_identity),
            CheckSpec("harmonic closed forms vs direct sums", "numeric",
                      "Pooled visibilities (with trace term) from the closed forms against direct "
                      "sums over ranks at random s, alpha, t0, V.", _check_direct_sums),
            CheckSpec("no pinning: attenuation exactly 1", "symbolic",
                      "At beta = s alpha = 0 the derived attenuation simplifies to 1, and the "
                      "prediction returns exactly 1 at alpha = 0.", _check_no_pinning),
            CheckSpec("attenuation < 1 on a grid", "numeric",
                      "A(s, alpha, V) < 1 on a grid of s in [0.1, 2], alpha in [0.05, 1.5], "
                      "V in {2, 10, 1000}.", _check_below_one),
            CheckSpec("limit V -> infinity", "numeric",
                      "A at V = 2e5 approaches the derived limit (s - 2 beta < 1 cases) and "
                      "decreases towards 0 otherwise.", _check_limit),
            CheckSpec("monte-carlo pooled visibility", "monte-carlo",
                      "Sample Zipf tokens and Gaussian occurrences on a chart with traceful "
                      "shape matrices; pooled visibility (uncentred and per-token centred) "
                      "vs the predictions, tolerance 5 batch standard errors.", _check_mc),
        )


# -- prediction functions ---------------------------------------------------------------------


def _pred_att(d, s, alpha, n_types):
    f = d.lambdified("attenuation", (SS, BETA, NV), modules=_MODULES)
    out = np.vectorize(lambda a, b, c: f(a, b, int(c)), otypes=[float])(
        s, np.asarray(s) * np.asarray(alpha), n_types)
    # alpha = 0 (no pinning): every token has spread t0, so both pools have the same visibility
    # and A = 1 exactly (the "no pinning" check proves it symbolically); avoid rounding there.
    out = np.where(np.asarray(alpha) == 0, 1.0, out)
    return out if out.ndim else float(out)


def _pred_limit(d, s, alpha):
    f = d.lambdified("limit_divergent", (SS, BETA))
    beta = np.asarray(s) * np.asarray(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        val = f(s, beta)
    out = np.where(np.asarray(s) - 2 * beta < 1, val, 0.0)
    out = np.where(np.asarray(alpha) == 0, 1.0, out)  # no pinning: A = 1 for every V
    return out if out.ndim else float(out)


def _check_rank(rank, n_types):
    if np.any(np.asarray(rank) > np.asarray(n_types)):
        raise ValidationError(f"rank must be in 1..n_types, got rank={rank!r}, "
                              f"n_types={n_types!r}")


def _pred_spread(d, rank, s, alpha, t0):
    f = d.lambdified("pinning", (R, SS, AL, T0))
    return f(rank, s, alpha, t0)


def _pred_rank(d, rank, s, alpha, t0, ii_norm_sq, m, n_types):
    _check_rank(rank, n_types)
    t_r = _pred_spread(d, rank, s, alpha, t0)
    return get("curvature-visibility").predict("visibility", t=t_r, ii_norm_sq=ii_norm_sq, m=m)


def _pred_pool(pool):
    def fn(d, s, alpha, t0, ii_norm_sq, m, n_types, trace_sq_sum=0.0):
        syms = d.symbols
        f = d.lambdified(f"visibility_{pool}", (SS, BETA, T0, syms["ii_norm_sq"], M, NV,
                                               syms["trace_sq_sum"]), modules=_MODULES)
        return np.vectorize(lambda *a: f(*a[:5], int(a[5]), a[6]), otypes=[float])(
            s, np.asarray(s) * np.asarray(alpha), t0, ii_norm_sq, m, n_types, trace_sq_sum)
    return fn


def attenuation(s, alpha, n_types):
    """Occurrence-weighted / type-weighted visibility (< 1 for s, alpha > 0). Vectorised."""
    return get("frequency-attenuation").predict("attenuation", s=s, alpha=alpha, n_types=n_types)


def attenuation_limit(s, alpha):
    """The attenuation's limit as n_types -> infinity. Vectorised."""
    return get("frequency-attenuation").predict("attenuation_limit", s=s, alpha=alpha)


def visibility_by_rank(rank, s, alpha, t0, ii_norm_sq, m, n_types):
    """Per-token visibility t_r^2 ||II||^2/(2m), t_r = t0 rank^(s alpha). Vectorised."""
    return get("frequency-attenuation").predict(
        "visibility_by_rank", rank=rank, s=s, alpha=alpha, t0=t0, ii_norm_sq=ii_norm_sq, m=m,
        n_types=n_types)


def spread_by_rank(rank, s, alpha, t0):
    """Per-token spread t_r = t0 rank^(s alpha). Vectorised."""
    return get("frequency-attenuation").predict("spread_by_rank", rank=rank, s=s, alpha=alpha,
                                                t0=t0)


def occurrence_visibility(s, alpha, t0, ii_norm_sq, m, n_types, trace_sq_sum=0.0):
    """Visibility of the occurrence-pooled sample. Vectorised."""
    return get("frequency-attenuation").predict(
        "occurrence_visibility", s=s, alpha=alpha, t0=t0, ii_norm_sq=ii_norm_sq, m=m,
        n_types=n_types, trace_sq_sum=trace_sq_sum)


def type_visibility(s, alpha, t0, ii_norm_sq, m, n_types, trace_sq_sum=0.0):
    """Visibility of the type-pooled sample. Vectorised."""
    return get("frequency-attenuation").predict(
        "type_visibility", s=s, alpha=alpha, t0=t0, ii_norm_sq=ii_norm_sq, m=m,
        n_types=n_types, trace_sq_sum=trace_sq_sum)


# -- checks -----------------------------------------------------------------------------------


def _check_cheb_form(d, rng):
    return symbolic_residual(d.expr("attenuation").rhs - d.expr("chebyshev_form").rhs), 0.0, \
        "A - E_nu[ab]/(E_nu[a]E_nu[b])"


def _check_cheb_identity(d, rng):
    V = 4
    nu = sp.symbols(f"nu1:{V + 1}", positive=True)
    a = sp.symbols(f"a1:{V + 1}", real=True)
    b = sp.symbols(f"b1:{V + 1}", real=True)
    lhs = (sum(n * x * y for n, x, y in zip(nu, a, b)) * sum(nu)
           - sum(n * x for n, x in zip(nu, a)) * sum(n * y for n, y in zip(nu, b)))
    rhs = sp.Rational(1, 2) * sum(nu[i] * nu[j] * (a[i] - a[j]) * (b[i] - b[j])
                                  for i in range(V) for j in range(V))
    return symbolic_residual(lhs - rhs), 0.0, "covariance double-sum identity"


def _check_direct_sums(d, rng):
    errs = []
    for _ in range(5):
        s, al = rng.uniform(0.3, 1.8), rng.uniform(0.05, 1.0)
        t0, ii2, m, V = rng.uniform(0.05, 0.5), rng.uniform(0.5, 3), 3, int(rng.integers(2, 300))
        S = rng.uniform(0, m * ii2)
        r = np.arange(1, V + 1, dtype=float)
        t = t0 * r ** (s * al)
        for pool, w in (("occurrence", r**-s / np.sum(r**-s)), ("type", np.full(V, 1 / V))):
            tan = np.sum(w * m * t**2)
            nor = np.sum(w * 0.5 * t**4 * ii2) + 0.25 * S * (np.sum(w * t**4) - np.sum(w * t**2) ** 2)
            pred = d.predict(f"{pool}_visibility", s=s, alpha=al, t0=t0, ii_norm_sq=ii2, m=m,
                             n_types=V, trace_sq_sum=S)
            errs.append(relative_error(pred, nor / tan))
    return max(errs), 1e-9, "max relative error closed form vs direct sum"


def _check_no_pinning(d, rng):
    sym = symbolic_residual(d.expr("attenuation").rhs.subs(BETA, 0) - 1)
    num = max(abs(float(d.predict("attenuation", s=s, alpha=0.0, n_types=V)) - 1.0)
              for s in (0.5, 1.0, 2.0) for V in (2, 50))
    return max(sym, num), 0.0, "A(beta = 0) - 1, symbolic and predicted"


def _check_below_one(d, rng):
    s = np.linspace(0.1, 2.0, 8)[:, None, None]
    al = np.linspace(0.05, 1.5, 8)[None, :, None]
    V = np.array([2, 10, 1000])[None, None, :]
    A = d.predict("attenuation", s=s, alpha=al, n_types=V)
    return max(0.0, float(np.max(A) - 1 + 1e-12)), 0.0, \
        f"residual max(0, max A - 1 + 1e-12); max A = {float(np.max(A)):.6g}"


def _check_limit(d, rng):
    errs = []
    for s, al in ((0.8, 0.2), (1.1, 0.3), (0.5, 0.5)):  # s - 2 s alpha < 1 cases
        lim = d.predict("attenuation_limit", s=s, alpha=al)
        a_big = d.predict("attenuation", s=s, alpha=al, n_types=200_000)
        errs.append(abs(a_big - lim) / lim)
    # s - 2 beta > 1: A decreases towards 0 as V grows
    a1, a2 = (d.predict("attenuation", s=2.0, alpha=0.1, n_types=V) for V in (1000, 100_000))
    if not a2 < a1:
        errs.append(1.0)
    return max(errs), 0.05, "max relative distance of A(V=2e5) to the limit"


def _check_mc(d, rng):
    V, s, al, t0, m, codim, n, nb = 30, 1.1, 0.3, 0.05, 2, 2, 200_000, 20
    A = rng.standard_normal((codim, m, m))
    A = (A + A.transpose(0, 2, 1)) / 2
    ii2 = float(np.sum(A * A))
    S = float(np.sum(np.trace(A, axis1=1, axis2=2) ** 2))
    r = np.arange(1, V + 1)
    f = r ** -s / np.sum(r ** -s)
    tok = rng.choice(V, size=n, p=f)
    t = t0 * (tok + 1.0) ** (s * al)
    u = rng.standard_normal((n, m)) * t[:, None]
    q = 0.5 * np.einsum("ni,aij,nj->na", u, A, u)
    worst = 0.0
    counts = np.maximum(np.bincount(tok, minlength=V), 1)

    def centre(a):  # subtract each token's own centroid
        means = np.stack([np.bincount(tok, a[:, j], V) / counts for j in range(a.shape[1])], 1)
        return a - means[tok]

    for centred in (False, True):
        uu, qq = (centre(u), centre(q)) if centred else (u, q)
        full = np.sum(np.var(qq, axis=0)) / np.sum(np.var(uu, axis=0))
        est = [np.sum(np.var(qq[i], axis=0)) / np.sum(np.var(uu[i], axis=0))
               for i in np.array_split(np.arange(n), nb)]
        pred = d.predict("occurrence_visibility", s=s, alpha=al, t0=t0, ii_norm_sq=ii2, m=m,
                         n_types=V, trace_sq_sum=0.0 if centred else S)
        se = np.std(est, ddof=1) / np.sqrt(nb)
        worst = max(worst, abs(full - pred) / se)
    return worst, 5.0, "max |MC - prediction| in batch standard errors (uncentred, centred)"

"""Local curvature with standard errors: dimension m, ‖II‖² and visibility (issue 20, item 3).

One local quadratic fit of a neighbourhood Y ``(k, d)`` (the model of
:func:`~tangentlab.measure.fit_second_fundamental_form`, written for noisy high-dimensional data):

- frame: the top-m right singular vectors J of the centred Y (local PCA);
- tangent coordinates ``u = J^T (y - p)``, normal parts ``v = (I - J J^T)(y - p)`` (in ambient
  coordinates, so no ``(d, d - m)`` normal basis is built);
- least squares ``v ~ c + B u + sum_{i<=j} q_ij u_i u_j``, design G ``(k, n_par)``,
  ``n_par = 1 + m + m(m+1)/2``; ``II(e_i, e_i) = 2 q_ii``, ``II(e_i, e_j) = q_ij``.

**Noise correction.** Isotropic-or-not noise in the normal directions inflates every squared
coefficient: ``E‖q̂_j‖² = ‖q_j‖² + [(GᵀG)⁻¹]_jj · Σ_a σ_a²``, and ``Σ_a σ_a²`` is estimated without
bias by ``RSS / (k - n_par)``. So

- ``‖II‖² = sum_j w_j ‖q̂_j‖² - tr(W C) RSS/(k - n_par)`` (w = 4 on the diagonal, 2 off it,
  C the quadratic block of ``(GᵀG)⁻¹``);
- normal variance = ``tr(M Q̂ Q̂ᵀ) - tr(M C) RSS/(k - n_par)`` with M the covariance of the
  quadratic monomials over the neighbourhood (the variance the quadratic part explains);
- tangent variance = the top-m eigenvalues minus ``m σ̄²`` (``σ̄²`` = the residual variance per
  normal dimension, assumed isotropic);
- visibility = normal variance / tangent variance (leading order ``t² ‖II‖² / (2m)``).

**Standard errors** (delta method for a quadratic form of Gaussian coefficients, with the residual
covariance S in place of the noise): ``Var = 4 tr(W C W Q̂ S Q̂ᵀ) + 2 tr(S²) tr((W C)²)``, and M
in place of W for the normal variance. The visibility's interval adds the sampling of the chart
coordinates: a delta method for the ratio of the per-point means of the fitted quadratic part's
and the tangent part's squared norms. The frame's own uncertainty is *not* in the interval: the
calibration experiment ``estimator-calibration`` measures where that matters (``docs/bridge.md``).

**Two scales: extrapolation to radius 0** (issue 36, item 3). A quadratic fit absorbs the chart's
higher-order terms: on a sphere the height is ``|u|²/2R + |u|⁴/8R³ + …``, and the quartic part
leaks into the fitted quadratic coefficients, biasing ‖II‖² up (+4–8% at the calibration's
radius, far beyond the interval). The leak is that of ``|u|⁴`` regressed on the fit's design:
λ = the mean diagonal quadratic coefficient of ``|u|⁴ ~ G``, a number of the sampled chart
coordinates alone. The fit is repeated on the inner ``scale_fraction`` of Y (nearest its mean),
whose smaller radius leaks less (λ_in < λ), and the two are extrapolated to no leak (Richardson):
``‖II‖²₀ = ‖II‖² + b (‖II‖²_in − ‖II‖²)``, ``b = λ / (λ − λ_in)``, with
``se₀² = se² + b² (se_in² − se²)`` (nested fits: the difference's variance is
``se_in² − se²``). It assumes the higher-order term is isotropic in u (exact for a sphere); the
calibration measures the rest. ``extrapolate=False`` keeps the one-scale estimate and instead
marks ‖II‖² "not measurable" where the two scales disagree beyond the noise.

**Neighbourhood-size rule** (:func:`neighbourhood_size`): ``k = max(ceil(4 · n_par), 200)`` (four
points per fitted parameter, at least 200), capped by the points available.

**Local dimension** (:func:`local_dimension`): multiscale local PCA. Between the neighbourhood
and its inner half, a tangent direction's variance scales like the squared radius, a curvature
normal's like its square, noise's not at all; m̂ counts the leading directions of the first kind.
(A largest-eigenvalue-gap rule counted the sphere's curvature normal as a tangent: m̂ = m + 1.)

**Not measurable here.** :func:`local_curvature` returns NaN values with ``measurable=False``
and a reason when (a) the noise correction removes more than ``max_noise_share`` of the raw
‖II‖² (the estimate is then mostly a difference of two large numbers), or (b) the noise in the
tangent coordinates exceeds ``max_tangent_noise`` of the tangent variance (errors in the regressors
attenuate the quadratic coefficients, a bias the correction does not remove).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.curvature_stats import local_curvature
    >>> rng = np.random.default_rng(0)
    >>> u = 0.1 * rng.standard_normal((400, 2))
    >>> Y = np.c_[u, 0.5 * (u ** 2).sum(1)]          # paraboloid z = |u|^2 / 2: ||II||^2 = 2
    >>> fit = local_curvature(Y, m=2, point=np.zeros(3))
    >>> bool(abs(fit.ii_norm_sq - 2) < 0.01)   # the local-PCA frame tilts a little
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ValidationError
from tangentlab.measure._validate import as_points, as_vector, check_positive_int, check_rank
from tangentlab.measure.curvature import nearest_neighbours
from tangentlab.typing import ArrayLike, Seed

__all__ = [
    "n_quadratic_parameters",
    "neighbourhood_size",
    "LocalDimension",
    "local_dimension",
    "LocalCurvature",
    "local_curvature",
    "local_curvature_at",
]

_Z95 = 1.959963984540054


def n_quadratic_parameters(m: int) -> int:
    """Parameters per normal coordinate of the local quadratic fit: ``1 + m + m(m+1)/2``."""
    m = check_positive_int(m, "m")
    return 1 + m + m * (m + 1) // 2


def neighbourhood_size(m: int, n_points: int | None = None, factor: float = 4.0,
                       minimum: int = 200) -> int:
    """The stated neighbourhood-size rule: ``k = max(ceil(factor · (1 + m + m(m+1)/2)), minimum)``.

    Four points per fitted parameter keep the coefficient noise small; the floor of 200 points
    keeps the visibility's small-sample bias (a ratio of sample variances) below ~2% at small m
    (24 points at m = 2 gave -12%, ``docs/bridge.md``). Capped at ``n_points`` when given.
    ``factor`` must be > 1 (more points than parameters).
    """
    if not factor > 1:
        raise ValidationError(f"factor must be > 1 (more points than parameters), got {factor}")
    k = max(int(math.ceil(factor * n_quadratic_parameters(m))), int(minimum))
    return min(k, int(n_points)) if n_points is not None else k


@dataclass(frozen=True)
class LocalDimension:
    """Result of :func:`local_dimension`.

    Attributes:
        m: the estimated dimension; ci_low, ci_high: bootstrap percentile interval (equal to m
            when ``n_boot = 0``).
        exponents: ``(max_dim,)`` each leading direction's variance-scaling exponent (1 tangent,
            2 curvature normal, 0 noise).
        eigenvalues: the centred neighbourhood's eigenvalues, descending.
    """

    m: int
    ci_low: float
    ci_high: float
    exponents: np.ndarray = field(repr=False)
    eigenvalues: np.ndarray = field(repr=False)


def _spectrum(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    Yc = Y - Y.mean(axis=0)
    _, s, vt = np.linalg.svd(Yc, full_matrices=False)
    return s**2 / max(Y.shape[0] - 1, 1), vt


def _scaling_dim(Y: np.ndarray, max_dim: int) -> tuple[int, np.ndarray, np.ndarray]:
    """Dimension by how each principal direction's variance scales with the radius.

    The inner half of Y (nearest to its mean) has squared radius ``rho² < 1`` times the whole's;
    along a tangent direction the variance shrinks like ``rho²`` (exponent 1), along a curvature
    normal like ``rho⁴`` (exponent 2), along pure noise not at all (exponent 0). m̂ counts the
    leading directions whose exponent is in [0.3, 2) (the first outside ends the count).
    """
    lam, vt = _spectrum(Y)
    c = Y - Y.mean(axis=0)
    d2 = np.einsum("kd,kd->k", c, c)
    inner = np.argsort(d2, kind="stable")[: max(Y.shape[0] // 2, 3)]
    ci = Y[inner] - Y[inner].mean(axis=0)
    top = vt[:max_dim]
    lam_in = np.sum((ci @ top.T) ** 2, axis=0) / max(inner.size - 1, 1)
    rho2 = float(d2[inner].mean() / d2.mean())
    with np.errstate(divide="ignore", invalid="ignore"):
        expo = np.log(np.maximum(lam_in, 1e-300) / np.maximum(lam[:max_dim], 1e-300)) / np.log(rho2)
    tangent = (expo >= 0.3) & (expo < 2.0)
    m = int(np.argmin(tangent)) if not tangent.all() else int(tangent.size)
    return max(m, 1), expo, lam


def local_dimension(Y: ArrayLike, *, max_dim: int | None = None, n_boot: int = 0,
                    confidence: float = 0.95, seed: Seed = 0) -> LocalDimension:
    """Local dimension of a neighbourhood Y ``(k, d)`` by multiscale local PCA.

    The leading principal directions whose variance shrinks like the squared radius between the
    whole neighbourhood and its inner half (exponent in [0.3, 2); curvature directions shrink
    like its square, noise not at all). Compare Little, Maggioni & Rosasco (2017).

    Args:
        Y: the neighbourhood, shape ``(k, d)``, k >= 8.
        max_dim: largest dimension considered (default ``min(k, d) // 2``).
        n_boot: bootstrap replicates over the rows of Y for the interval (0: none; the interval
            is then the point estimate).
        confidence: the interval's level.
        seed: seed of the bootstrap.
    """
    Y = as_points(Y, name="Y", min_rows=8)
    k, d = Y.shape
    top = max(1, min(k, d) // 2) if max_dim is None else check_rank(max_dim, min(k, d), "max_dim")
    m, expo, lam = _scaling_dim(Y, top)
    lo = hi = float(m)
    if n_boot:
        rng = np.random.default_rng(seed)
        reps = [_scaling_dim(Y[rng.integers(0, k, k)], top)[0] for _ in range(n_boot)]
        a = (1 - confidence) / 2
        lo, hi = (float(v) for v in np.quantile(reps, [a, 1 - a]))
    return LocalDimension(m=m, ci_low=lo, ci_high=hi, exponents=expo, eigenvalues=lam)


@dataclass(frozen=True)
class LocalCurvature:
    """Result of :func:`local_curvature` (NaN values when ``measurable`` is False).

    Attributes:
        ii_norm_sq, ii_se, ii_ci: noise-corrected ‖II‖²_F, its standard error and interval.
        ii_raw: the uncorrected ``sum_j w_j ‖q̂_j‖²`` (what a plain fit reports).
        normal_var, tangent_var: noise-corrected normal (quadratic part) and tangent variances.
        visibility, visibility_se, visibility_ci: normal over tangent variance and its interval.
        visibility_raw: the plain local-PCA ratio (bottom over top eigenvalues), uncorrected.
        noise_var: residual variance summed over normal dimensions, ``RSS / (k - n_par)``.
        noise_share: the correction's share of the raw ‖II‖²; tangent_noise: ``m σ̄²`` over the
            raw tangent variance (the two "not measurable" criteria).
        k, m: points and dimension; measurable, reason: the marker (all values NaN);
        ii_measurable, ii_reason: the marker of ‖II‖² alone (also the two-scale check).
        ii_one_scale: the one-scale noise-corrected ‖II‖² (before the extrapolation; equal to
            ``ii_norm_sq`` with ``extrapolate=False``; NaN where not measurable).
    """

    ii_norm_sq: float
    ii_se: float
    ii_ci: tuple[float, float]
    ii_raw: float
    normal_var: float
    tangent_var: float
    visibility: float
    visibility_se: float
    visibility_ci: tuple[float, float]
    visibility_raw: float
    noise_var: float
    noise_share: float
    tangent_noise: float
    k: int
    m: int
    measurable: bool = True
    reason: str = ""
    ii_measurable: bool = True
    ii_reason: str = ""
    ii_one_scale: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        """All fields as plain values."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _quad_stat(Wm: np.ndarray, Qh: np.ndarray, C: np.ndarray, noise_tot: float,
               QSQ: np.ndarray, trS2: float) -> tuple[float, float, float]:
    """(raw, corrected, se) of ``sum_a q̂_aᵀ W q̂_a`` for coefficients Q̂ ``(p, d)``."""
    raw = float(np.einsum("ij,id,jd->", Wm, Qh, Qh))
    WC = Wm @ C
    corr = raw - float(np.trace(WC)) * noise_tot
    var = 4.0 * float(np.trace(WC @ Wm @ QSQ)) + 2.0 * trS2 * float(np.sum(WC * WC.T))
    return raw, corr, math.sqrt(max(var, 0.0))


def _leak(Y: np.ndarray, m: int, p: np.ndarray, J: np.ndarray | None = None) -> float:
    """λ: how much ``|u|⁴`` leaks into the diagonal quadratic coefficients of Y's fit design.

    ``J``: Y's local-PCA frame ``(d, m)`` when the caller has it (else computed here).
    """
    U = (Y - p) @ (_spectrum(Y)[1][:m].T if J is None else J)
    iu, ju = np.triu_indices(m)
    G = np.hstack([np.ones((len(U), 1)), U, U[:, iu] * U[:, ju]])
    coef, *_ = np.linalg.lstsq(G, np.einsum("km,km->k", U, U) ** 2, rcond=None)
    return float(coef[1 + m:][iu == ju].mean())


def _two_scales(Y: np.ndarray, m: int, p: np.ndarray, ii: float, ii_se: float, n_par: int, *,
                scale_fraction: float, z_scale: float, extrapolate: bool, J: np.ndarray
                ) -> tuple[float, float, str] | None:
    """(‖II‖², se, reason) from the fit on Y and on its inner part (module docstring).

    None when the inner part is too small or all of Y. ``extrapolate``: the Richardson estimate
    (reason set when the two scales do not separate the leak); else the one-scale estimate and
    the two-scale check's reason.
    """
    k = Y.shape[0]
    n_in = int(math.ceil(scale_fraction * k))
    if not n_par + 3 <= n_in < k:
        return None
    dist = np.einsum("kd,kd->k", Y - Y.mean(axis=0), Y - Y.mean(axis=0))
    inner = np.argsort(dist, kind="stable")[:n_in]
    f_in = local_curvature(Y[inner], m, point=p, max_noise_share=1.0, max_tangent_noise=1.0,
                           scale_check=False)
    if extrapolate:
        lam, lam_in = _leak(Y, m, p, J), _leak(Y[inner], m, p)
        b = lam / (lam - lam_in) if lam > lam_in > 0 else float("nan")
        if not 1.0 < b <= 20.0:
            return ii, ii_se, (f"the two scales ({k} and {n_in} points) do not separate the "
                               f"higher-order leak (lambda {lam:.3g}, inner {lam_in:.3g})")
        var = ii_se**2 + b * b * max(f_in.ii_se**2 - ii_se**2, 0.0)
        return ii + b * (f_in.ii_norm_sq - ii), math.sqrt(var), ""
    sd = math.sqrt(max(f_in.ii_se**2 - ii_se**2, 0.25 * f_in.ii_se**2))
    if abs(f_in.ii_norm_sq - ii) > max(z_scale * sd, 0.01 * abs(ii)):  # 1%: immaterial
        return ii, ii_se, (f"||II||^2 changes with the neighbourhood size ({ii:.4g} on {k} "
                           f"points, {f_in.ii_norm_sq:.4g} on the inner {n_in}): the chart's "
                           "higher-order terms bias it beyond its interval")
    return ii, ii_se, ""


def local_curvature(Y: ArrayLike, m: int, point: ArrayLike | None = None, *,
                    confidence: float = 0.95, max_noise_share: float = 0.9,
                    max_tangent_noise: float = 0.05, scale_check: bool = True,
                    scale_fraction: float = 0.6, z_scale: float = 1.96,
                    extrapolate: bool = True) -> LocalCurvature:
    """Noise-corrected ‖II‖² and visibility of a neighbourhood Y ``(k, d)``, with intervals.

    Args:
        Y: the neighbourhood, shape ``(k, d)``; needs ``k >= n_par + 3`` and ``1 <= m < d``.
        m: the manifold dimension (e.g. from :func:`local_dimension`).
        point: base point ``(d,)`` of the chart (default: the mean of Y; the fit's constant term
            absorbs the offset either way).
        confidence: level of the normal-approximation intervals.
        max_noise_share: "not measurable" when the noise correction removes more than this
            share of the raw ‖II‖².
        max_tangent_noise: "not measurable" when the tangent noise ``m σ̄²`` exceeds this share
            of the tangent variance.
        scale_check: refit ‖II‖² on the inner ``scale_fraction`` of Y (nearest its mean) and
            mark ‖II‖² alone "not measurable" (``ii_measurable=False``) when the two differ by more
            than ``z_scale`` standard deviations of the difference (nested estimates:
            ``sqrt(se_inner² - se²)``) and by more than 1% of ‖II‖².
        scale_fraction: share of Y in the inner fit.
        z_scale: threshold of the two-scale check (``extrapolate=False`` only).
        extrapolate: with ``scale_check``, extrapolate ‖II‖² across the two scales to radius 0
            (module docstring) instead of checking that they agree; ‖II‖² alone is "not
            measurable" where they do not separate the higher-order leak.

    Returns:
        :class:`LocalCurvature`.
    """
    Y = as_points(Y, name="Y", min_rows=2)
    k, d = Y.shape
    m = check_rank(m, d, name="m")
    n_par = n_quadratic_parameters(m)
    if k < n_par + 3:
        raise InsufficientSamplesError(
            f"a quadratic fit in m={m} dimensions has {n_par} parameters per normal coordinate; "
            f"it needs k >= {n_par + 3} points, got {k} (see neighbourhood_size)")
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    p = Y.mean(axis=0) if point is None else as_vector(point, name="point", dim=d)
    lam, vt = _spectrum(Y)
    J = vt[:m].T  # (d, m)
    D = Y - p
    U = D @ J
    Dp = D - U @ J.T  # normal parts, ambient coordinates (k, d)
    iu, ju = np.triu_indices(m)
    G = np.hstack([np.ones((k, 1)), U, U[:, iu] * U[:, ju]])
    Qg, Rg = np.linalg.qr(G)
    if np.min(np.abs(np.diag(Rg))) < 1e-12 * np.max(np.abs(np.diag(Rg))):
        raise InsufficientSamplesError("the quadratic design is singular (points on a lower-"
                                       "dimensional set?); use more or more spread points")
    coef = np.linalg.solve(Rg, Qg.T @ Dp)  # (n_par, d)
    R = Dp - G @ coef
    dof = k - n_par
    rss = float(np.sum(R * R))
    noise_tot = rss / dof
    Rinv = np.linalg.inv(Rg)
    C = (Rinv @ Rinv.T)[1 + m:, 1 + m:]
    Qh = coef[1 + m:]
    RQ = R @ Qh.T  # (k, p)
    QSQ = RQ.T @ RQ / dof
    small = R @ R.T if k <= d else R.T @ R
    trS2 = float(np.sum(small * small)) / dof**2
    w = np.where(iu == ju, 4.0, 2.0)
    ii_raw, ii, ii_se = _quad_stat(np.diag(w), Qh, C, noise_tot, QSQ, trS2)
    Mf = U[:, iu] * U[:, ju]
    Mf = Mf - Mf.mean(axis=0)
    Mcov = Mf.T @ Mf / (k - 1)
    _, nv, nv_se = _quad_stat(Mcov, Qh, C, noise_tot, QSQ, trS2)
    tan_raw = float(lam[:m].sum())
    sig2 = noise_tot / (d - m)
    tv = tan_raw - m * sig2
    vis = nv / tv if tv > 0 else float("nan")
    # sampling of the chart coordinates (delta method for a ratio of means of per-point terms:
    # a_i the fitted quadratic part's squared norm, b_i the tangent one) plus the coefficient noise
    Fq = Mf @ Qh
    a_i = np.einsum("kd,kd->k", Fq, Fq)
    Uc = U - U.mean(axis=0)
    b_i = np.einsum("km,km->k", Uc, Uc)
    samp = float(np.var(a_i - vis * b_i, ddof=1)) / (k * float(np.mean(b_i)) ** 2) \
        if tv > 0 else float("nan")
    vis_se = math.sqrt(samp + (nv_se / tv) ** 2) if tv > 0 else float("inf")
    vis_raw = float(lam[m:].sum()) / tan_raw if tan_raw > 0 else float("nan")
    # two-scale check of ||II||^2: the chart's higher-order terms bias a quadratic fit by
    # O(radius^2); the inner part of the neighbourhood has a smaller radius, so a difference
    # beyond the noise says that the bias is larger than the interval
    share = 1.0 - ii / ii_raw if ii_raw > 0 else 1.0
    ii_one, ii_reason = ii, ""
    two = _two_scales(Y, m, p, ii, ii_se, n_par, scale_fraction=scale_fraction, z_scale=z_scale,
                      extrapolate=extrapolate, J=J) if scale_check else None
    if two is not None:
        ii, ii_se, ii_reason = two
    tnoise = m * sig2 / tan_raw if tan_raw > 0 else float("inf")
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + confidence / 2))
    reason = ""
    if share > max_noise_share:
        reason = (f"noise correction removes {share:.0%} of the raw ||II||^2 (> "
                  f"{max_noise_share:.0%}): curvature is below the noise here")
    elif tnoise > max_tangent_noise:
        reason = (f"tangent noise is {tnoise:.1%} of the tangent variance (> "
                  f"{max_tangent_noise:.0%}): errors in the regressors bias II down")
    ok = not reason
    ii_ok = ok and not ii_reason
    nan = float("nan")
    return LocalCurvature(
        ii_norm_sq=ii if ii_ok else nan, ii_se=ii_se if ii_ok else nan,
        ii_ci=(ii - z * ii_se, ii + z * ii_se) if ii_ok else (nan, nan), ii_raw=ii_raw,
        normal_var=nv if ok else nan, tangent_var=tv,
        visibility=vis if ok else nan, visibility_se=vis_se if ok else nan,
        visibility_ci=(vis - z * vis_se, vis + z * vis_se) if ok else (nan, nan),
        visibility_raw=vis_raw, noise_var=noise_tot, noise_share=share, tangent_noise=tnoise,
        k=k, m=m, measurable=ok, reason=reason, ii_measurable=ii_ok,
        ii_reason=reason or ii_reason, ii_one_scale=ii_one if ok else nan)


def local_curvature_at(X: ArrayLike, point: ArrayLike, m: int, k: int | None = None,
                       **kwargs: Any) -> LocalCurvature:
    """:func:`local_curvature` of the k nearest rows of X ``(n, d)`` to ``point`` ``(d,)``.

    ``k`` defaults to :func:`neighbourhood_size` ``(m, n)``.
    """
    X = as_points(X)
    k = neighbourhood_size(m, X.shape[0]) if k is None else check_positive_int(k, "k")
    idx = nearest_neighbours(X, point, k)
    return local_curvature(X[idx], m, point=point, **kwargs)

"""Experiment ``visibility``.

Curvature visibility from samples against ``curvature-visibility``, then its attenuation under
frequency-biased sampling against ``frequency-attenuation``.

Part 1. For each manifold, base point p and spread t: n chart samples ``x = chart(p, u)``,
``u ~ N(0, t² I_m)``, split into batches. Per batch, the visibility with the exact frame
(``measure.visibility_in_frame``) and with local PCA (``measure.empirical_visibility`` on all the
batch's points) against the prediction ``t² ‖II_p‖² / (2m)``. Intervals: mean ± 1.96 SE over
batches (and points). Check: per manifold, the largest relative error of the measured/predicted
ratio over the spreads stays within ``rel_tolerance``.

Part 2. A :class:`~tangentlab.synthetic.tokens.TokenModel` on one manifold (a unit sphere by
default: constant ‖II‖, as the derivation assumes). The occurrence-weighted visibility (a Zipf
corpus, pooled) and the type-weighted visibility (``per_type`` occurrences of every type,
pooled) are pooled normal variance over pooled tangent variance, each token centred on its own
sample mean with unbiased (n_r - 1) variances, in its exact frame at the centroid. Compared with
``occurrence_visibility``, ``type_visibility`` and ``attenuation`` (``trace_sq_sum = 0``).
Intervals: mean ± 1.96 SE over ``n_reps`` independent corpora.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

import numpy as np

from tangentlab.config import Config, option
from tangentlab.synthetic.experiments._base import (
    AgreementCheck,
    Experiment,
    ExperimentResult,
    figure_png,
)
from tangentlab.synthetic.experiments._common import build_manifold, mean_ci, new_figure, rel_err

__all__ = ["VisibilityConfig", "VisibilityExperiment", "pooled_visibility"]


@dataclass(frozen=True)
class VisibilityConfig(Config):
    """Config of ``visibility`` (all tolerances are relative errors)."""

    seed: int = option(0, ge=0, integer=True)
    manifolds: tuple[str, ...] = option(("circle", "helix", "sphere", "flat-torus", "torus",
                                  "hyperbolic", "immersion", "product:circle*circle"), min_len=1)
    ambient_dim: int = 6
    spreads: tuple[float, ...] = option((0.01, 0.03, 0.1), gt=0, min_len=1)
    n_points: int = option(4, ge=1, integer=True)
    n_samples: int = 4000
    n_batches: int = option(8, ge=2, integer=True)
    rel_tolerance: float = option(0.1, gt=0)
    attenuation_manifold: str = "sphere"
    zipf_s: tuple[float, ...] = option((0.8, 1.2), gt=0)
    pin_alpha: tuple[float, ...] = option((0.25, 0.5), gt=0)
    n_types: int = option(100, ge=2, integer=True)
    t0: float = option(0.01, gt=0)
    n_occurrences: int = 20000
    per_type: int = option(60, ge=2, integer=True)
    n_reps: int = option(6, ge=2, integer=True)
    attenuation_tolerance: float = option(0.1, gt=0)

    @classmethod
    def quick(cls) -> VisibilityConfig:
        """The ``--quick`` settings: fewer manifolds, spreads and samples, the same checks."""
        return cls(
            manifolds=("circle", "sphere", "torus", "immersion"), spreads=(0.02, 0.08),
            n_points=2, n_samples=2000, n_batches=5, zipf_s=(1.0,), pin_alpha=(0.25, 0.5),
            n_types=60, n_occurrences=8000, per_type=40, n_reps=4, rel_tolerance=0.2,
            attenuation_tolerance=0.15,
        )

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        c = self
        return [
            (c.n_samples >= 10 * c.n_batches,
             f'visibility: n_samples must be >= 10 * n_batches; got n_samples={c.n_samples}, n_batches={c.n_batches}'),
        ]


def pooled_visibility(points: np.ndarray, ids: np.ndarray, tangent: np.ndarray,
                      normal: np.ndarray) -> float:
    """Pooled normal variance / pooled tangent variance of a token corpus.

    Args:
        points: shape (N, D), the occurrences.
        ids: shape (N,), token ids in [0, V).
        tangent: shape (V, D, m), per-token tangent frames.
        normal: shape (V, D, D - m), per-token normal frames.

    Each token is centred on its own sample mean; per-token variances use ``n_r - 1`` (tokens
    seen once are dropped); token r is weighted by its count ``n_r`` (occurrence pooling; a
    pool with equal counts gives type pooling).
    """
    V = tangent.shape[0]
    counts = np.bincount(ids, minlength=V).astype(np.float64)
    sums = np.zeros((V, points.shape[1]))
    np.add.at(sums, ids, points)
    means = sums / np.maximum(counts, 1)[:, None]
    d = points - means[ids]
    tan = np.einsum("nd,ndm->nm", d, tangent[ids])
    nor = np.einsum("nd,ndk->nk", d, normal[ids])
    tan_r = np.bincount(ids, weights=np.einsum("nm,nm->n", tan, tan), minlength=V)
    nor_r = np.bincount(ids, weights=np.einsum("nk,nk->n", nor, nor), minlength=V)
    ok = counts >= 2
    w = counts[ok] / (counts[ok] - 1)  # n_r * (sum / (n_r - 1)) / n_r... weight n_r, unbiased var
    return float(np.sum(w * nor_r[ok]) / np.sum(w * tan_r[ok]))


@final
class VisibilityExperiment(Experiment):
    """Curvature visibility from samples against the theory, and its attenuation under frequency bias."""
    name = "visibility"
    description = ("curvature visibility from samples (exact frame and local PCA) against "
                   "t²‖II‖²/(2m); occurrence- vs type-weighted visibility against the attenuation law")
    config_cls = VisibilityConfig

    def validate(self, c: VisibilityConfig) -> None:
        """Every manifold can be built in R^ambient_dim (raises ConfigError, e.g. m >= D)."""
        for name in (*c.manifolds, c.attenuation_manifold):
            build_manifold(name, c.ambient_dim, 0)


    def run(self, c: VisibilityConfig) -> ExperimentResult:
        """Measure visibility per manifold and spread, and the attenuation per Zipf and pinning law."""
        from tangentlab import theory
        from tangentlab.measure import empirical_visibility, visibility_in_frame

        rows: list[dict] = []
        checks: list[AgreementCheck] = []
        plot_pts: dict[str, list] = {}
        for mi, name in enumerate(c.manifolds):
            M = build_manifold(name, c.ambient_dim, c.seed + 101 * (mi + 1))
            base = M.sample(c.n_points, seed=c.seed + 7 * mi)
            frame = M.frame(base)
            ii2 = frame.ii_norm_sq
            worst = 0.0
            worst_emp = 0.0
            for ti, t in enumerate(c.spreads):
                ratios_exact, ratios_emp = [], []
                for pi in range(c.n_points):
                    rng = np.random.default_rng([c.seed, mi, ti, pi])
                    u = rng.standard_normal((c.n_samples, M.dim)) * t
                    X = M.chart(base[pi], u)
                    pred = float(theory.predict("curvature-visibility", "visibility", t=t,
                                                ii_norm_sq=ii2[pi], m=M.dim))
                    ex, em = [], []
                    for Xb in np.array_split(X, c.n_batches):
                        ex.append(visibility_in_frame(Xb, frame.tangent[pi]))
                        em.append(empirical_visibility(Xb, base[pi], k=len(Xb), m=M.dim))
                    for metric, vals, store in (("visibility_exact_frame", ex, ratios_exact),
                                                ("visibility_local_pca", em, ratios_emp)):
                        mu, lo, hi = mean_ci(vals)
                        rows.append(dict(metric=metric, manifold=name, t=t, point=pi, value=mu,
                                         ci_low=lo, ci_high=hi, n=c.n_samples, prediction=pred,
                                         seed=c.seed))
                        store.extend(np.asarray(vals) / pred)
                for metric, ratios in (("visibility_ratio_exact_frame", ratios_exact),
                                       ("visibility_ratio_local_pca", ratios_emp)):
                    mu, lo, hi = mean_ci(ratios)
                    rows.append(dict(metric=metric, manifold=name, t=t, value=mu, ci_low=lo,
                                     ci_high=hi, n=c.n_samples * c.n_points, prediction=1.0,
                                     seed=c.seed))
                    plot_pts.setdefault(f"{name}|{metric}", []).append((t, mu, lo, hi))
                worst = max(worst, rel_err(float(np.mean(ratios_exact)), 1.0))
                worst_emp = max(worst_emp, rel_err(float(np.mean(ratios_emp)), 1.0))
            for label, w, how in (("exact frame", worst, "visibility_in_frame with the true "
                                   "tangent basis"),
                                  ("local PCA", worst_emp, "empirical_visibility (local PCA frame)")):
                checks.append(AgreementCheck(
                    name=f"visibility {label}: {name}",
                    description=(f"{how} on Gaussian chart samples of {name} vs "
                                 "t²‖II‖²/(2m); largest relative error over the spreads "
                                 f"{list(c.spreads)}"),
                    measured=w, predicted=0.0, tolerance=c.rel_tolerance,
                    passed=bool(w <= c.rel_tolerance),
                    detail=f"{c.n_points} points × {c.n_samples} samples; m={M.dim}, "
                           f"mean ‖II‖²={float(np.mean(ii2)):.4g}",
                ))

        att_rows, att_checks, att_plot = self._attenuation(c)
        rows += att_rows
        checks += att_checks
        figures = {"visibility.png": self._figure(c, plot_pts, att_plot)}
        return ExperimentResult(rows=rows, checks=checks, figures=figures)

    def _attenuation(self, c: VisibilityConfig):
        from tangentlab import theory
        from tangentlab.synthetic.tokens import TokenModel

        rows, checks, plot = [], [], []
        M = build_manifold(c.attenuation_manifold, c.ambient_dim, c.seed + 999)
        for si, s in enumerate(c.zipf_s):
            for ai, alpha in enumerate(c.pin_alpha):
                tm = TokenModel(M, n_types=c.n_types, zipf_s=s, pin_alpha=alpha, t0=c.t0,
                                seed=c.seed + 13)
                fr = tm.centroid_frame()
                ii2 = float(np.mean(fr.ii_norm_sq))
                occ, typ, att = [], [], []
                for rep in range(c.n_reps):
                    corpus = tm.sample(c.n_occurrences, seed=[c.seed, si, ai, rep, 1])
                    pool = tm.sample_per_type(c.per_type, seed=[c.seed, si, ai, rep, 2])
                    vo = pooled_visibility(corpus.points, corpus.token_ids, fr.tangent, fr.normal)
                    vt = pooled_visibility(pool.points, pool.token_ids, fr.tangent, fr.normal)
                    occ.append(vo)
                    typ.append(vt)
                    att.append(vo / vt)
                kw = dict(s=s, alpha=alpha, t0=c.t0, ii_norm_sq=ii2, m=M.dim, n_types=c.n_types)
                preds = {
                    "occurrence_visibility": float(theory.predict(
                        "frequency-attenuation", "occurrence_visibility", **kw)),
                    "type_visibility": float(theory.predict(
                        "frequency-attenuation", "type_visibility", **kw)),
                    "attenuation": float(theory.predict(
                        "frequency-attenuation", "attenuation", s=s, alpha=alpha,
                        n_types=c.n_types)),
                }
                for metric, vals in (("occurrence_visibility", occ), ("type_visibility", typ),
                                     ("attenuation", att)):
                    mu, lo, hi = mean_ci(vals)
                    rows.append(dict(metric=metric, manifold=c.attenuation_manifold, s=s,
                                     alpha=alpha, value=mu, ci_low=lo, ci_high=hi,
                                     n=c.n_reps, prediction=preds[metric], seed=c.seed))
                    if metric == "attenuation":
                        plot.append((s, alpha, mu, lo, hi))
                    err = rel_err(mu, preds[metric])
                    checks.append(AgreementCheck(
                        name=f"{metric} s={s} alpha={alpha}",
                        description=(f"measured {metric.replace('_', ' ')} of the token model "
                                     f"on {c.attenuation_manifold} (V={c.n_types}, t0={c.t0}) "
                                     "vs frequency-attenuation; relative error"),
                        measured=mu, predicted=preds[metric], tolerance=c.attenuation_tolerance,
                        passed=bool(err <= c.attenuation_tolerance),
                        detail=f"relative error {err:.4f}; 95% CI [{lo:.4g}, {hi:.4g}] over "
                               f"{c.n_reps} corpora",
                    ))
        return rows, checks, plot

    def _figure(self, c, pts, att):
        from tangentlab import theory

        fig, (ax1, ax2) = new_figure(2)
        tt = np.geomspace(min(c.spreads) / 1.5, max(c.spreads) * 1.5, 50)
        ax1.plot(tt, np.ones_like(tt), "k-", lw=1, label="theory")
        for key, vals in sorted(pts.items()):
            name, metric = key.split("|")
            v = np.array(vals)
            exact = metric.endswith("exact_frame")
            ax1.errorbar(v[:, 0] * (1.0 if exact else 1.06), v[:, 1],
                         yerr=np.vstack([v[:, 1] - v[:, 2], v[:, 3] - v[:, 1]]), fmt="o" if exact else "x",
                         ms=4, capsize=2, label=f"{name}{'' if exact else ' (PCA)'}")
        ax1.set_xscale("log")
        ax1.set_xlabel("spread t")
        ax1.set_ylabel("measured V / (t²‖II‖²/2m)")
        ax1.set_title("curvature visibility")
        ax1.legend(fontsize=5, ncol=2)
        for s in c.zipf_s:
            aa = np.linspace(min(c.pin_alpha) * 0.5, max(c.pin_alpha) * 1.3, 40)
            line = theory.predict("frequency-attenuation", "attenuation", s=s, alpha=aa,
                                  n_types=c.n_types)
            ax2.plot(aa, line, "-", lw=1, label=f"theory s={s}")
            pts_s = np.array([(a, mu, lo, hi) for (ss, a, mu, lo, hi) in att if ss == s])
            ax2.errorbar(pts_s[:, 0], pts_s[:, 1], yerr=np.vstack([pts_s[:, 1] - pts_s[:, 2],
                         pts_s[:, 3] - pts_s[:, 1]]), fmt="o", ms=4, capsize=2,
                         label=f"measured s={s}")
        ax2.set_xlabel("pinning exponent α")
        ax2.set_ylabel("occurrence / type visibility")
        ax2.set_title(f"attenuation (V={c.n_types})")
        ax2.legend(fontsize=6)
        fig.tight_layout()
        return figure_png(fig)

"""Experiment ``gradient-ratio``.

Tangent and normal parts of gradients against ``gradient-components``, including the counterexample
where the ratio bound fails.

At a base point p of each manifold, representations ``x = chart(p, u)`` with antithetic Gaussian
chart coordinates (u and -u, so odd sample moments vanish exactly, as in the derivation's
symmetric-u assumption) are read by a linear map; the weight gradient ``E[g (x-p)ᵀ]`` splits
into a tangent part (columns in T_p) and a normal part (in N_p), measured with
``theory.gradients.gradient_parts`` in the exact frame.

- *aligned* loss: upstream gradient ``g = B u/t + b0 + σ ε`` (B, b0 fixed random, ε noise). Its
  alignment constant c (``alignment_constant``) is bounded away from 0, so the corrected
  proposition applies: ratio ``‖normal‖/‖tangent‖ <= κ t d(m) / (2c)`` (``ratio_bound``), and the
  ratio should grow like t (log-log slope 1, from the constant part b0 meeting the mean
  curvature).
- *counterexample*: a constant upstream gradient ``g = b0`` on a circle (the parabola of the
  theory, to second order): the tangent part vanishes, c = 0, the normal part does not, and the
  ratio exceeds every bound of the form κ t d(m)/(2 c_min): the uncorrected O(t) claim fails.

Intervals: mean ± 1.96 SE over ``n_batches`` batches of pairs.
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
from tangentlab.synthetic.experiments._common import (
    build_manifold,
    max_normal_curvature,
    mean_ci,
    new_figure,
)

__all__ = ["GradientRatioConfig", "GradientRatioExperiment"]


@dataclass(frozen=True)
class GradientRatioConfig(Config):
    """Config of ``gradient-ratio``."""

    seed: int = option(0, ge=0, integer=True)
    manifolds: tuple[str, ...] = option(("circle", "sphere", "torus", "flat-torus", "immersion"), min_len=1)
    ambient_dim: int = 6
    spreads: tuple[float, ...] = option((0.02, 0.05, 0.1, 0.2), gt=0, min_len=2)
    n_samples: int = 4000
    n_batches: int = option(8, ge=2, integer=True)
    out_dim: int = option(4, ge=1, integer=True)
    offset_scale: float = option(1.0, gt=0)
    noise: float = option(0.5, ge=0)
    counterexample_manifold: str = "circle"
    c_min: float = option(0.1, gt=0)
    slope_tolerance: float = 0.15

    @classmethod
    def quick(cls) -> GradientRatioConfig:
        """The ``--quick`` settings: fewer manifolds and samples, the same checks."""
        return cls(manifolds=("circle", "sphere", "immersion"),
                   spreads=(0.03, 0.1, 0.3), n_samples=2000, n_batches=5)

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        c = self
        return [
            (c.n_samples >= 20 * c.n_batches,
             f'gradient-ratio: n_samples must be >= 20 * n_batches; got n_samples={c.n_samples}, n_batches={c.n_batches}'),
        ]


@final
class GradientRatioExperiment(Experiment):
    """The gradient's normal/tangent ratio against the corrected proposition and its counterexample."""
    name = "gradient-ratio"
    description = ("‖normal‖/‖tangent‖ of gradients vs t and the alignment constant c against the "
                   "corrected ratio bound; the constant-gradient counterexample")
    config_cls = GradientRatioConfig

    def validate(self, c: GradientRatioConfig) -> None:
        """Every manifold can be built in R^ambient_dim (raises ConfigError)."""
        for name in (*c.manifolds, c.counterexample_manifold):
            build_manifold(name, c.ambient_dim, 0)


    def _measure(self, M, p, frame_t, frame_n, t, g_fn, rng, n_samples, n_batches):
        from tangentlab import theory
        from tangentlab.theory.gradients import gradient_parts

        half = n_samples // 2
        u0 = rng.standard_normal((half, M.dim)) * t
        u = np.concatenate([u0, -u0])
        x = M.chart(p, u) - p
        g = g_fn(u, rng)
        ratios, tans, nors, cs = [], [], [], []
        idx = np.arange(half)
        for b in np.array_split(idx, n_batches):
            sel = np.concatenate([b, b + half])
            tn, nn = gradient_parts(g[sel], x[sel], frame_t, frame_n)
            tans.append(tn)
            nors.append(nn)
            ratios.append(nn / tn if tn > 0 else np.inf)
            cs.append(float(theory.predict("gradient-components", "alignment_constant",
                                           g=g[sel], u=u[sel])))
        tn, nn = gradient_parts(g, x, frame_t, frame_n)
        c_all = float(theory.predict("gradient-components", "alignment_constant", g=g, u=u))
        return dict(ratio=nn / tn if tn > 0 else np.inf, tangent=tn, normal=nn, c=c_all,
                    ratios=ratios, cs=cs, tans=tans, nors=nors)

    def run(self, c: GradientRatioConfig) -> ExperimentResult:
        """Measure the ratio on every manifold and spread, and the counterexample."""
        from tangentlab import theory

        rows: list[dict] = []
        checks: list[AgreementCheck] = []
        plot: dict[str, dict] = {}
        for mi, name in enumerate(c.manifolds):
            M = build_manifold(name, c.ambient_dim, c.seed + 17 * (mi + 1))
            p = M.sample(1, seed=c.seed + mi)
            fr = M.frame(p)
            kappa = max_normal_curvature(fr.ii[0], seed=c.seed)
            prng = np.random.default_rng([c.seed, mi, 0])
            B = prng.standard_normal((c.out_dim, M.dim))
            b0 = prng.standard_normal(c.out_dim)
            b0 *= c.offset_scale / np.linalg.norm(b0)

            def g_aligned(u, rng, t=None, B=B, b0=b0):
                tt = np.sqrt(np.mean(u**2))
                return u @ B.T / tt + b0 + c.noise * rng.standard_normal((len(u), c.out_dim))

            meas, bounds = [], []
            for ti, t in enumerate(c.spreads):
                rng = np.random.default_rng([c.seed, mi, ti + 1])
                r = self._measure(M, p[0], fr.tangent[0], fr.normal[0], t, g_aligned, rng,
                                  c.n_samples, c.n_batches)
                bound = float(theory.predict("gradient-components", "ratio_bound", kappa=kappa,
                                             t=t, c=r["c"], m=M.dim))
                mu, lo, hi = mean_ci(r["ratios"])
                base = dict(manifold=name, case="aligned", t=t, n=c.n_samples, seed=c.seed)
                rows.append(dict(metric="normal_tangent_ratio", value=r["ratio"], ci_low=lo,
                                 ci_high=hi, prediction=bound, bound="upper", **base))
                rows.append(dict(metric="alignment_constant", value=r["c"], **base))
                rows.append(dict(metric="tangent_part", value=r["tangent"], **base))
                rows.append(dict(metric="normal_part", value=r["normal"], **base))
                rows.append(dict(metric="kappa", value=kappa, **base))
                meas.append((t, r["ratio"], lo, hi, r["c"]))
                bounds.append(bound)
            meas_a = np.array(meas)
            held = bool(np.all(meas_a[:, 1] <= np.array(bounds)) and np.all(meas_a[:, 4] >= c.c_min))
            worst = float(np.max(meas_a[:, 1] / np.array(bounds)))
            checks.append(AgreementCheck(
                name=f"ratio bound holds: {name}",
                description=("aligned loss (c >= c_min): measured ‖normal‖/‖tangent‖ over the "
                             "corrected bound κ t d(m)/(2c), largest over the spreads; must be <= 1"),
                measured=worst, predicted=1.0, tolerance=0.0, passed=held,
                detail=f"κ={kappa:.3g}; c from {meas_a[:, 4].min():.3g} to {meas_a[:, 4].max():.3g}",
            ))
            slope = float(np.polyfit(np.log(meas_a[:, 0]), np.log(meas_a[:, 1]), 1)[0])
            rows.append(dict(metric="ratio_loglog_slope", manifold=name, case="aligned",
                             value=slope, prediction=1.0, n=len(c.spreads), seed=c.seed))
            checks.append(AgreementCheck(
                name=f"ratio grows like t: {name}",
                description="log-log slope of the measured ratio against t (O(t) law: slope 1)",
                measured=slope, predicted=1.0, tolerance=c.slope_tolerance,
                passed=bool(abs(slope - 1.0) <= c.slope_tolerance),
                detail=f"spreads {list(c.spreads)}",
            ))
            plot[name] = dict(meas=meas_a, bounds=np.array(bounds))

        # the counterexample
        M = build_manifold(c.counterexample_manifold, c.ambient_dim, c.seed + 5)
        p = M.sample(1, seed=c.seed + 99)
        fr = M.frame(p)
        kappa = max_normal_curvature(fr.ii[0])
        b0 = np.random.default_rng([c.seed, 99]).standard_normal(c.out_dim)

        def g_const(u, rng, b0=b0):
            return np.repeat(b0[None], len(u), axis=0)

        cex = []
        exceeded, cs = [], []
        for ti, t in enumerate(c.spreads):
            rng = np.random.default_rng([c.seed, 99, ti])
            r = self._measure(M, p[0], fr.tangent[0], fr.normal[0], t, g_const, rng,
                              c.n_samples, c.n_batches)
            naive = float(theory.predict("gradient-components", "ratio_bound", kappa=kappa, t=t,
                                         c=c.c_min, m=M.dim))
            base = dict(manifold=c.counterexample_manifold, case="counterexample", t=t,
                        n=c.n_samples, seed=c.seed)
            rows.append(dict(metric="normal_tangent_ratio", value=r["ratio"], prediction=naive,
                             bound="upper (c = c_min)", **base))
            rows.append(dict(metric="alignment_constant", value=r["c"], prediction=0.0, **base))
            rows.append(dict(metric="tangent_part", value=r["tangent"], prediction=0.0, **base))
            rows.append(dict(metric="normal_part", value=r["normal"], **base))
            exceeded.append(r["ratio"] > naive)
            cs.append(r["c"])
            cex.append((t, r["ratio"], naive))
        checks.append(AgreementCheck(
            name="counterexample: ratio bound fails",
            description=("constant upstream gradient with symmetric u on a circle: the tangent "
                         "part vanishes (c = 0 < c_min) and the ratio exceeds κ t d(m)/(2 c_min) "
                         "at every spread, as the theory says"),
            measured=float(max(cs)), predicted=0.0, tolerance=c.c_min,
            passed=bool(all(exceeded) and max(cs) < c.c_min),
            detail=f"smallest ratio {min(r for _, r, _ in cex):.3g} vs largest bound "
                   f"{max(b for _, _, b in cex):.3g}",
        ))
        fig = self._figure(plot, cex)
        return ExperimentResult(rows=rows, checks=checks, figures={"gradient-ratio.png": fig})

    def _figure(self, plot, cex):
        fig, (ax,) = new_figure(1, width=5.0, height=3.6)
        for i, (name, d) in enumerate(sorted(plot.items())):
            col = f"C{i}"
            m = d["meas"]
            ax.errorbar(m[:, 0], m[:, 1], yerr=np.vstack([np.maximum(m[:, 1] - m[:, 2], 0),
                        np.maximum(m[:, 3] - m[:, 1], 0)]), fmt="o", color=col, ms=4,
                        capsize=2, label=f"{name} measured")
            ax.plot(m[:, 0], d["bounds"], "-", color=col, lw=1, label=f"{name} bound κtd/(2c)")
        cx = np.array(cex)
        ax.plot(cx[:, 0], np.minimum(cx[:, 1], 1e6), "k^", ms=6, label="counterexample (capped 1e6)")
        ax.plot(cx[:, 0], cx[:, 2], "k--", lw=1, label="its bound at c = c_min")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("spread t")
        ax.set_ylabel("‖normal part‖ / ‖tangent part‖")
        ax.legend(fontsize=5)
        fig.tight_layout()
        return figure_png(fig)

"""Experiment ``estimator-calibration``: coverage and bias of the bridge estimators where the truth is known.

Issue 20, item 3. Each estimator's nominal 95% interval is checked for coverage, and its relative
bias is measured, over independent replicates at the sample sizes the estimators use by default:

- **curvature** (:mod:`tangentlab.measure.curvature_stats`): a unit m-sphere (``||II||² = m``,
  one normal direction) in R^d, m in ``dims``, d in ``ambient_dims``. A replicate is one
  neighbourhood of ``k = neighbourhood_size(m)`` chart samples ``u ~ N(0, t² I_m)`` with
  ``t = radius / sqrt(m)`` (a fixed neighbourhood radius, so the chart's higher-order terms have
  the same size for every m) and isotropic Gaussian noise of standard deviation ``noise`` per
  ambient coordinate. Estimators: the noise-corrected ``||II||²`` (truth m), the visibility
  (truth ``t² ||II||² / (2m)``) and the local dimension (truth m; its "interval" is the point
  estimate, so its coverage is P(m̂ = m)). Replicates the estimator marks "not measurable" are
  counted, not scored.
- **Zipf exponent** (:func:`tangentlab.measure.zipf.fit_zipf`, ``rank-mle``): token streams drawn
  from ``f_r ∝ r^(-s)`` over ``zipf_types`` types, documents of equal length.
- **pinning exponent** (:func:`tangentlab.measure.pinning.pinning_exponent`, raw and direction-only):
  the :class:`~tangentlab.synthetic.tokens.TokenModel` on a sphere with a planted alpha
  (truth beta = s·alpha), occurrences spread over ``pin_docs`` documents at random.

Each (estimator, cell) gets a row per metric: ``coverage`` (Wilson 95% interval), ``relative_bias``
(mean estimate / truth - 1, ± 1.96 SE; the absolute bias where the truth is 0, beta = 0 with
alpha = 0), ``measurable_fraction`` and ``trusted`` (1 when at least
half the replicates are measurable, the coverage's Wilson interval meets [0.93, 0.97] and
``|bias| <= max_bias``; else 0: "not measurable here"). Checks: each estimator family is trusted
in at least one cell, and the Zipf and pinning estimators in every cell.
"""

from __future__ import annotations

import math
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
from tangentlab.synthetic.experiments._common import new_figure

__all__ = ["CalibrationConfig", "CalibrationExperiment", "wilson_interval", "cell_status"]


@dataclass(frozen=True)
class CalibrationConfig(Config):
    """Config of ``estimator-calibration``."""

    seed: int = option(0, ge=0, integer=True)
    dims: tuple[int, ...] = option((2, 4, 8, 16, 32), ge=1, integer=True, min_len=1)
    ambient_dims: tuple[int, ...] = option((64, 256, 768), ge=2, integer=True, min_len=1)
    noise: tuple[float, ...] = option((1e-4, 1e-3), ge=0, min_len=1)
    radius: float = option(0.2, gt=0, why="neighbourhood radius t·sqrt(m) on the unit sphere")
    n_reps: int = option(60, ge=5, integer=True)
    n_reps_large: int = option(20, ge=5, integer=True, why="replicates for m >= 16 (costly fits)")
    zipf_s: tuple[float, ...] = option((0.9, 1.2), gt=0, min_len=1)
    zipf_types: int = option(2000, ge=10, integer=True)
    zipf_tokens: int = option(100_000, ge=1000, integer=True)
    zipf_docs: int = option(1000, ge=10, integer=True)
    zipf_reps: int = option(60, ge=5, integer=True)
    pin_s: float = option(1.0, gt=0)
    pin_alpha: tuple[float, ...] = option((0.0, 0.3), ge=0, min_len=1)
    pin_types: int = option(150, ge=10, integer=True)
    pin_occurrences: int = option(30_000, ge=1000, integer=True)
    pin_docs: int = option(2000, ge=10, integer=True)
    pin_k: int = option(8, ge=2, integer=True)
    pin_reps: int = option(40, ge=5, integer=True)
    n_boot: int = option(100, ge=20, integer=True)
    coverage_target: tuple[float, float] = (0.93, 0.97)
    max_bias: float = option(0.10, gt=0)

    @classmethod
    def quick(cls) -> CalibrationConfig:
        """The ``--quick`` settings: two dimensions, two ambient sizes, few replicates."""
        return cls(dims=(2, 4), ambient_dims=(16, 64), noise=(1e-3,), n_reps=12,
                   n_reps_large=5, zipf_s=(1.0,), zipf_types=300,
                   zipf_tokens=20_000, zipf_docs=200, zipf_reps=8, pin_alpha=(0.3,),
                   pin_types=60, pin_occurrences=8000, pin_docs=600, pin_reps=6,
                   n_boot=40)


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``hits / n``."""
    if n == 0:
        return float("nan"), float("nan")
    p = hits / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def cell_status(hits: int, n_scored: int, n_total: int, bias: float,
                target: tuple[float, float] = (0.93, 0.97), max_bias: float = 0.10) -> str:
    """The trust rule of one cell: ``"trusted"`` or the first reason it is not.

    ``"mostly not measurable"`` (under half the replicates scored), ``"undercovers"`` /
    ``"overcovers"`` (Wilson interval of the coverage misses the target band), ``"biased"``
    (``|bias| > max_bias``). A pure function of the counts, so it is unit-tested case by case.
    """
    if n_scored < max(1, n_total / 2):
        return "mostly not measurable"
    lo, hi = wilson_interval(hits, n_scored)
    if hi < target[0]:
        return "undercovers"
    if lo > target[1]:
        return "overcovers"
    if not abs(bias) <= max_bias:
        return "biased"
    return "trusted"


def _rows_for(est: str, cell: dict, hits: int, vals: list[float], truth: float, n_total: int,
              c: CalibrationConfig) -> tuple[list[dict], str]:
    n = len(vals)
    # relative bias; at a truth of 0 (beta = 0) the absolute bias instead
    v = np.asarray(vals, dtype=np.float64)
    v = v / truth - 1 if truth != 0 else v
    bias = float(v.mean()) if n else float("nan")
    se = float(v.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    lo, hi = wilson_interval(hits, n)
    status = cell_status(hits, n, n_total, bias, c.coverage_target, c.max_bias)
    base = dict(estimator=est, **cell, truth=truth, seed=c.seed)
    rows = [
        dict(base, metric="coverage", value=hits / n if n else float("nan"), ci_low=lo,
             ci_high=hi, n=n),
        dict(base, metric="relative_bias", value=bias, ci_low=bias - 1.96 * se,
             ci_high=bias + 1.96 * se, n=n),
        dict(base, metric="measurable_fraction", value=n / n_total, n=n_total),
        dict(base, metric="trusted", value=float(status == "trusted"), n=n_total, status=status),
    ]
    return rows, status


@final
class CalibrationExperiment(Experiment):
    """Coverage and bias of the bridge estimators on data with known answers."""

    name = "estimator-calibration"
    description = ("coverage of the nominal 95% intervals and relative bias of the estimators of "
                   "||II||^2, visibility, local dimension, Zipf s and pinning beta, where the "
                   "truth is known; untrustworthy cells are marked 'not measurable here'")
    config_cls = CalibrationConfig

    def validate(self, c: CalibrationConfig) -> None:
        """Every dimension must be below every ambient dimension."""
        from tangentlab.errors import ConfigError

        if max(c.dims) >= min(c.ambient_dims):
            raise ConfigError(f"estimator-calibration: every m in dims must be < every d in "
                              f"ambient_dims; got max(dims)={max(c.dims)}, "
                              f"min(ambient_dims)={min(c.ambient_dims)}")

    def run(self, c: CalibrationConfig) -> ExperimentResult:
        """Run every cell; rows, trust checks and the coverage figure."""
        rows: list[dict] = []
        status: dict[str, list[tuple[dict, str]]] = {}
        for r, st in self._curvature(c):
            rows += r
            status.setdefault(st[0], []).append((st[1], st[2]))
        for r, st in self._zipf(c) + self._pinning(c):
            rows += r
            status.setdefault(st[0], []).append((st[1], st[2]))
        checks = []
        for est, cells in status.items():
            trusted = [cell for cell, s in cells if s == "trusted"]
            need_all = est.startswith(("zipf", "pinning"))
            ok = len(trusted) == len(cells) if need_all else bool(trusted)
            bad = "; ".join(f"{_label(cell)}: {s}" for cell, s in cells if s != "trusted")
            checks.append(AgreementCheck(
                name=f"calibration: {est}",
                description=(f"{est}: coverage of the nominal 95% interval in "
                             f"{list(c.coverage_target)} (Wilson interval) and |relative bias| <= "
                             f"{c.max_bias} in {'every' if need_all else 'at least one'} cell"),
                measured=float(len(trusted)), predicted=float(len(cells)), tolerance=None,
                passed=bool(ok),
                detail=f"{len(trusted)}/{len(cells)} cells trusted" + (f"; not: {bad}" if bad
                                                                       else "")))
        return ExperimentResult(rows=rows, checks=checks,
                                figures={"calibration.png": self._figure(c, rows)})

    def _curvature(self, c: CalibrationConfig):
        from tangentlab.measure.curvature_stats import (
            local_curvature,
            local_dimension,
            neighbourhood_size,
        )
        from tangentlab.synthetic.manifolds import Sphere

        for mi, m in enumerate(c.dims):
            R = c.n_reps if m < 16 else c.n_reps_large
            k = neighbourhood_size(m)
            t = c.radius / math.sqrt(m)
            for di, d in enumerate(c.ambient_dims):
                M = Sphere(m, ambient_dim=d, rotation_seed=c.seed + 31 * di + mi)
                p = M.sample(1, seed=c.seed)[0]
                ii_true = float(M.frame(p[None]).ii_norm_sq[0])
                vis_true = t * t * ii_true / (2 * m)
                base = np.repeat(p[None], k, axis=0)
                for ni, sig in enumerate(c.noise):
                    hit = {"ii_norm_sq": 0, "visibility": 0, "local_dimension": 0}
                    val: dict[str, list[float]] = {key: [] for key in hit}
                    for rep in range(R):
                        rng = np.random.default_rng([c.seed, mi, di, ni, rep])
                        Y = M.chart(base, rng.standard_normal((k, m)) * t)
                        Y = Y + sig * rng.standard_normal(Y.shape)
                        md = local_dimension(Y)
                        val["local_dimension"].append(md.m)
                        hit["local_dimension"] += int(md.m == m)
                        f = local_curvature(Y, m)
                        for key, ok, est, (lo, hi), truth in (
                                ("ii_norm_sq", f.ii_measurable, f.ii_norm_sq, f.ii_ci, ii_true),
                                ("visibility", f.measurable, f.visibility, f.visibility_ci,
                                 vis_true)):
                            if not ok:  # "not measurable here": counted, not scored
                                continue
                            val[key].append(est)
                            hit[key] += int(lo <= truth <= hi)
                    cell = dict(m=m, d=d, noise=sig, k=k, t=t)
                    for key, truth in (("ii_norm_sq", ii_true), ("visibility", vis_true),
                                       ("local_dimension", float(m))):
                        rws, st = _rows_for(key, cell, hit[key], val[key], truth, R, c)
                        yield rws, (key, cell, st)

    def _zipf(self, c: CalibrationConfig):
        from tangentlab.measure.zipf import fit_zipf
        from tangentlab.synthetic.tokens import zipf_frequencies

        out = []
        for si, s in enumerate(c.zipf_s):
            p = zipf_frequencies(c.zipf_types, s)
            hits, vals = 0, []
            for rep in range(c.zipf_reps):
                rng = np.random.default_rng([c.seed, 7, si, rep])
                tok = rng.choice(c.zipf_types, size=c.zipf_tokens, p=p)
                doc = np.repeat(np.arange(c.zipf_docs), -(-c.zipf_tokens // c.zipf_docs))
                fit = fit_zipf(tok, doc[: tok.size], n_boot=c.n_boot, seed=[c.seed, si, rep])
                vals.append(fit.s)
                hits += int(fit.ci_low <= s <= fit.ci_high)
            cell = dict(s=s, n_types=c.zipf_types, n_tokens=c.zipf_tokens, n_docs=c.zipf_docs)
            rws, st = _rows_for("zipf_s", cell, hits, vals, s, c.zipf_reps, c)
            out.append((rws, ("zipf_s", cell, st)))
        return out

    def _pinning(self, c: CalibrationConfig):
        from tangentlab.measure.pinning import pinning_with_norm_null
        from tangentlab.synthetic.manifolds import Sphere
        from tangentlab.synthetic.tokens import TokenModel

        out = []
        M = Sphere(3, ambient_dim=16, rotation_seed=c.seed + 5)
        ranks = np.arange(1, c.pin_types + 1)
        for ai, alpha in enumerate(c.pin_alpha):
            tm = TokenModel(M, n_types=c.pin_types, zipf_s=c.pin_s, pin_alpha=alpha, t0=0.02,
                            seed=c.seed + 3)
            beta = c.pin_s * alpha
            hits = {"raw": 0, "direction": 0}
            vals: dict[str, list[float]] = {"raw": [], "direction": []}
            for rep in range(c.pin_reps):
                corpus = tm.sample(c.pin_occurrences, seed=[c.seed, 11, ai, rep])
                doc = np.random.default_rng([c.seed, 12, ai, rep]).integers(
                    0, c.pin_docs, size=corpus.token_ids.size)
                fits = pinning_with_norm_null(corpus.points, corpus.token_ids, doc, ranks,
                                              k=c.pin_k, n_boot=c.n_boot, seed=[c.seed, ai, rep])
                for key, f in fits.items():
                    vals[key].append(f.beta)
                    hits[key] += int(f.ci_low <= beta <= f.ci_high)
            for key in ("raw", "direction"):
                cell = dict(alpha=alpha, s=c.pin_s, n_types=c.pin_types, k=c.pin_k)
                rws, st = _rows_for(f"pinning_beta_{key}", cell, hits[key], vals[key], beta,
                                    c.pin_reps, c)
                out.append((rws, (f"pinning_beta_{key}", cell, st)))
        return out

    def _figure(self, c: CalibrationConfig, rows: list[dict]):
        ests = ("ii_norm_sq", "visibility", "local_dimension")
        fig, axes = new_figure(len(ests), width=3.6)
        for ax, est in zip(axes, ests):
            ax.axhspan(*c.coverage_target, color="C2", alpha=0.15)
            for d in c.ambient_dims:
                for sig in c.noise:
                    pts = sorted((r["m"], r["value"]) for r in rows if r["estimator"] == est
                                 and r["metric"] == "coverage" and r["d"] == d
                                 and r["noise"] == sig)
                    if pts:
                        x, y = zip(*pts)
                        ax.plot(x, y, "o-", ms=3, lw=1, label=f"d={d}, σ={sig:g}")
            ax.set_xscale("log", base=2)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("manifold dimension m")
            ax.set_ylabel("coverage of the 95% interval")
            ax.set_title(est, fontsize=8)
        axes[0].legend(fontsize=5)
        fig.tight_layout()
        return figure_png(fig)


def _label(cell: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in cell.items() if k not in ("k", "t"))

"""Experiment ``proxy-recovery``.

How well each tangent-proxy extractor recovers a true tangent space, and what the empirical
protocol's control test reports when the truth is known.

A :class:`~tangentlab.synthetic.tokens.TokenModel` in one chart patch of radius
``patch_radius`` around p (Zipf frequencies, pinned spreads) gives an activation cloud in R^D (plus isotropic noise of
std ``activation_noise``: representations lie near, not exactly on, the manifold).
Every extractor (``measure.make_proxy``: PCA, semi-NMF, ICA, TopK SAE) is fitted on it at each
rank r >= m. Scores against the truth:

- principal angles between the proxy span and the true tangent space T_p (m angles, degrees);
- the share of *planted* gradient energy the proxy captures: gradients ``g_i = T(x_i) ξ_i``,
  ``ξ ~ N(0, I_m)``, truly tangent at each occurrence x_i (``measure.energy_fraction``).

Calibration of the empirical protocol (``measure.control_test`` with matched-rank normal
controls, exactly as the empirical harness runs it) on the PCA proxy at rank m:

- planted case: tangent gradients, so the p-value must sit at its floor 1/(1 + n_controls) and
  the enrichment be large;
- null case: isotropic gradients N(0, I_D), repeated ``n_null`` times with fresh gradients and
  controls: the enrichment must come out about 1 and the p-values spread over (0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

import numpy as np

from tangentlab.config import Config, option
from tangentlab.errors import ConfigError, TangentlabError
from tangentlab.synthetic.experiments._base import (
    AgreementCheck,
    Experiment,
    ExperimentResult,
    figure_png,
)
from tangentlab.synthetic.experiments._common import build_manifold, mean_ci, new_figure

__all__ = ["ProxyRecoveryConfig", "ProxyRecoveryExperiment"]


@dataclass(frozen=True)
class ProxyRecoveryConfig(Config):
    """Config of ``proxy-recovery``."""

    seed: int = option(0, ge=0, integer=True)
    manifolds: tuple[str, ...] = option(("sphere", "immersion"), min_len=1)
    ambient_dim: int = 16
    extractors: tuple[str, ...] = option(("pca", "seminmf", "ica", "sae"), choices=("pca", "seminmf", "ica", "sae"), min_len=1, unique=True)
    ranks: tuple[int, ...] = option((2, 4, 8), ge=1, integer=True, min_len=1)
    n_types: int = option(200, ge=2, integer=True)
    zipf_s: float = 1.0
    pin_alpha: float = 0.5
    t0: float = option(0.02, gt=0)
    patch_radius: float = option(0.1, gt=0)
    activation_noise: float = 0.002
    n_occurrences: int = 3000
    n_controls: int = option(20, ge=1, integer=True)
    n_null: int = option(20, ge=2, integer=True)
    sae_steps: int = 300
    angle_tolerance_deg: float = 10.0
    null_enrichment_tolerance: float = 0.1
    null_p_tolerance: float = 0.2

    @classmethod
    def quick(cls) -> ProxyRecoveryConfig:
        """The ``--quick`` settings: fewer ranks, tokens and SAE steps, the same checks."""
        return cls(manifolds=("sphere",), ranks=(2, 4), n_types=100,
                   n_occurrences=1500, n_null=12, sae_steps=120,
                   null_p_tolerance=0.25)

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        c = self
        return [
            (all(2 * r <= c.ambient_dim for r in c.ranks),
             f'proxy-recovery: every rank r needs 2r <= D={c.ambient_dim} for matched-rank normal controls; got ranks={c.ranks}'),
            (c.n_occurrences >= 4 * max(c.ranks),
             f'proxy-recovery: n_occurrences must be >= 4 * max(ranks); got {c.n_occurrences}'),
        ]


@final
class ProxyRecoveryExperiment(Experiment):
    """Tangent-proxy extractors scored against the true tangent space, with planted and null tests."""
    name = "proxy-recovery"
    description = ("every extractor (PCA, semi-NMF, ICA, TopK SAE) scored against true tangent "
                   "spaces; planted and null calibration of the control test")
    config_cls = ProxyRecoveryConfig

    def validate(self, c: ProxyRecoveryConfig) -> None:
        """Every manifold can be built, and every rank can contain its tangent space."""
        for name in c.manifolds:
            M = build_manifold(name, c.ambient_dim, 0)
            low = [r for r in c.ranks if r < M.dim]
            if low:
                raise ConfigError(f"proxy-recovery: ranks {low} are below the manifold dimension "
                                  f"m={M.dim} of {name}; a proxy must be able to contain the "
                                  "tangent space (use ranks >= m)")


    def run(self, c: ProxyRecoveryConfig) -> ExperimentResult:
        """Fit every extractor at every rank and score it against the truth."""
        from tangentlab.measure import (
            control_test,
            energy_fraction,
            make_proxy,
            principal_angles,
        )
        from tangentlab.synthetic.tokens import TokenModel

        rows: list[dict] = []
        checks: list[AgreementCheck] = []
        angle_plot: dict[str, list] = {}
        energy_plot: dict[str, list] = {}
        null_p: list[float] = []
        planted_summary = None
        floor = 1.0 / (1 + c.n_controls)
        failures: dict[tuple[str, str], str] = {}
        for mi, name in enumerate(c.manifolds):
            M = build_manifold(name, c.ambient_dim, c.seed + 31 * (mi + 1))
            tm = TokenModel(M, n_types=c.n_types, zipf_s=c.zipf_s, pin_alpha=c.pin_alpha,
                            t0=c.t0, seed=c.seed + mi, patch_radius=c.patch_radius)
            corpus = tm.sample(c.n_occurrences, seed=[c.seed, mi, 1])
            X = corpus.points + c.activation_noise * np.random.default_rng(
                [c.seed, mi, 4]).standard_normal(corpus.points.shape)
            Tp = M.tangent_basis(tm.patch_center)[0]
            Tx = M.tangent_basis(corpus.points)
            xi = np.random.default_rng([c.seed, mi, 2]).standard_normal((len(X), M.dim))
            G = np.einsum("ndm,nm->nd", Tx, xi)
            C = G.T @ G / len(G)
            for ext in c.extractors:
                for r in c.ranks:
                    params = {"n_components": r, "random_state": c.seed}
                    if ext == "sae":
                        params["n_steps"] = c.sae_steps
                    try:
                        Q = make_proxy(ext, **params).fit(X).basis()
                    except TangentlabError as exc:  # a failing extractor is a finding
                        rows.append(dict(metric="fit_failed", value=1.0, manifold=name,
                                         extractor=ext, rank=r, n=len(X), seed=c.seed))
                        angle_plot.setdefault(f"{name}|{ext}", []).append((r, float("nan")))
                        energy_plot.setdefault(f"{name}|{ext}", []).append((r, float("nan")))
                        failures[(name, ext)] = f"rank {r}: {exc}"
                        continue
                    ang = np.degrees(principal_angles(Q, Tp))
                    e = energy_fraction(Q, C)
                    base = dict(manifold=name, extractor=ext, rank=r, n=len(X), seed=c.seed)
                    rows.append(dict(metric="mean_principal_angle_deg", value=float(ang.mean()),
                                     prediction=0.0, **base))
                    rows.append(dict(metric="max_principal_angle_deg", value=float(ang.max()),
                                     prediction=0.0, **base))
                    rows.append(dict(metric="tangent_energy_captured", value=e, prediction=1.0,
                                     **base))
                    rows.append(dict(metric="isotropic_baseline", value=r / c.ambient_dim, **base))
                    angle_plot.setdefault(f"{name}|{ext}", []).append((r, float(ang.mean())))
                    energy_plot.setdefault(f"{name}|{ext}", []).append((r, e))
                for r_chk in sorted({min(c.ranks), max(c.ranks)}):
                    ang_r = dict(angle_plot[f"{name}|{ext}"])[r_chk]
                    e_r = dict(energy_plot[f"{name}|{ext}"])[r_chk]
                    ok = bool(np.isfinite(ang_r) and ang_r <= c.angle_tolerance_deg)
                    checks.append(AgreementCheck(
                        name=f"{ext} rank {r_chk} recovers the tangent space of {name}",
                        description=(f"mean principal angle (degrees) between the rank-{r_chk} "
                                     f"{ext} proxy fitted on token-model activations and the true "
                                     f"tangent space at the patch centre (m={M.dim}, "
                                     f"D={c.ambient_dim})"),
                        measured=ang_r, predicted=0.0, tolerance=c.angle_tolerance_deg,
                        passed=ok,
                        detail=(f"tangent energy captured {e_r:.3f}"
                                + (f"; fit failed at {failures[(name, ext)]}"
                                   if (name, ext) in failures else "")),
                    ))

            # calibration: PCA at rank m, planted and null
            Q = make_proxy("pca", n_components=M.dim, random_state=c.seed).fit(X).basis()
            res = control_test(Q, C, n_controls=c.n_controls, seed=c.seed, rows=G)
            base = dict(manifold=name, extractor="pca", rank=M.dim, n=len(G), seed=c.seed)
            rows.append(dict(metric="planted_enrichment", value=res.enrichment,
                             ci_low=res.enrichment_ci_low, ci_high=res.enrichment_ci_high, **base))
            rows.append(dict(metric="planted_p_value", value=res.p_value, prediction=floor, **base))
            rows.append(dict(metric="planted_energy", value=res.energy,
                             ci_low=res.energy_ci_low, ci_high=res.energy_ci_high,
                             prediction=1.0, **base))
            rows.append(dict(metric="planted_oracle", value=res.oracle, **base))
            checks.append(AgreementCheck(
                name=f"planted case at the p floor: {name}",
                description=("control_test of the rank-m PCA proxy on truly tangent gradients: "
                             "p-value at its floor 1/(1+n_controls), enrichment > 1"),
                measured=res.p_value, predicted=floor, tolerance=0.0,
                passed=bool(res.p_value <= floor + 1e-12 and res.enrichment > 1),
                detail=f"enrichment {res.enrichment:.3g} [{res.enrichment_ci_low:.3g}, "
                       f"{res.enrichment_ci_high:.3g}], energy {res.energy:.3f}",
            ))
            planted_summary = planted_summary or (res.p_value, res.enrichment)
            enr, pv = [], []
            for k in range(c.n_null):
                Gn = np.random.default_rng([c.seed, mi, 3, k]).standard_normal(G.shape)
                Cn = Gn.T @ Gn / len(Gn)
                rn = control_test(Q, Cn, n_controls=c.n_controls, seed=c.seed * 1000 + k + 1)
                enr.append(rn.enrichment)
                pv.append(rn.p_value)
            null_p.extend(pv)
            mu, lo, hi = mean_ci(enr)
            rows.append(dict(metric="null_enrichment", value=mu, ci_low=lo, ci_high=hi,
                             prediction=1.0, n=c.n_null, manifold=name, extractor="pca",
                             rank=M.dim, seed=c.seed))
            pm, plo, phi = mean_ci(pv)
            p_expected = float(np.mean(np.arange(1, c.n_controls + 2) / (c.n_controls + 1)))
            rows.append(dict(metric="null_mean_p_value", value=pm, ci_low=plo, ci_high=phi,
                             prediction=p_expected, n=c.n_null, manifold=name, extractor="pca",
                             rank=M.dim, seed=c.seed))
            rows.append(dict(metric="null_fraction_at_floor", value=float(np.mean(np.isclose(pv, floor))),
                             prediction=floor, n=c.n_null, manifold=name, extractor="pca",
                             rank=M.dim, seed=c.seed))
            checks.append(AgreementCheck(
                name=f"null enrichment about 1: {name}",
                description="mean enrichment of the rank-m PCA proxy on isotropic gradients "
                            f"over {c.n_null} draws",
                measured=mu, predicted=1.0, tolerance=c.null_enrichment_tolerance,
                passed=bool(abs(mu - 1.0) <= c.null_enrichment_tolerance),
                detail=f"95% CI [{lo:.3f}, {hi:.3f}]",
            ))
            checks.append(AgreementCheck(
                name=f"null p-values spread out: {name}",
                description="mean p-value on isotropic gradients vs the mean of the uniform law "
                            "on {1, ..., n+1}/(n+1)",
                measured=pm, predicted=p_expected, tolerance=c.null_p_tolerance,
                passed=bool(abs(pm - p_expected) <= c.null_p_tolerance),
                detail=f"fraction at the floor {np.mean(np.isclose(pv, floor)):.2f}; "
                       f"min p {min(pv):.3f}, max p {max(pv):.3f}",
            ))
        fig = self._figure(c, angle_plot, energy_plot, null_p, planted_summary, floor)
        return ExperimentResult(rows=rows, checks=checks, figures={"proxy-recovery.png": fig})

    def _figure(self, c, angles, energies, null_p, planted, floor):
        fig, (a1, a2, a3) = new_figure(3, width=3.6)
        for key in sorted(angles):
            v = np.array(angles[key])
            a1.plot(v[:, 0], v[:, 1], "o-", ms=4, label=key.replace("|", " "))
            e = np.array(energies[key])
            a2.plot(e[:, 0], e[:, 1], "o-", ms=4, label=key.replace("|", " "))
        rr = np.array(sorted(c.ranks), dtype=float)
        a1.axhline(0.0, color="k", lw=1, label="truth")
        a1.set_xlabel("rank r")
        a1.set_ylabel("mean principal angle to T_p (deg)")
        a1.legend(fontsize=5)
        a2.plot(rr, rr / c.ambient_dim, "k--", lw=1, label="isotropic r/D")
        a2.axhline(1.0, color="k", lw=1, label="oracle (all tangent)")
        a2.set_xlabel("rank r")
        a2.set_ylabel("planted tangent energy captured")
        a2.legend(fontsize=5)
        a3.hist(null_p, bins=np.linspace(0, 1, 11), color="0.6", label="null p-values")
        if planted is not None:
            a3.axvline(planted[0], color="r", lw=2, label=f"planted p={planted[0]:.3f}")
        a3.axvline(floor, color="k", ls=":", lw=1, label="p floor")
        a3.set_xlabel("control-test p-value")
        a3.legend(fontsize=6)
        fig.tight_layout()
        return figure_png(fig)

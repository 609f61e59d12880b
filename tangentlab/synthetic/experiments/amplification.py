"""Experiment ``amplification``.

Tangent amplification in trained toy models, against ``tangent-amplification``.

Toy: V tokens with Zipf frequencies; a learnable embedding table ``U`` (V, m) of chart
coordinates (initialised at 0, so every token starts at the base point p); the representation of
token i is ``h_i = chart(p, U_i)`` on the manifold (``Manifold.chart_torch``, differentiable);
a head reads h and is trained to output the token's target chart coordinates
``u_i* ~ N(0, τ² I_m)`` (a smooth function of position on the manifold). The measured cloud is
``x_i = h_i + ν_i`` with fixed isotropic noise ``ν_i ~ N(0, σ² I_D)`` that the task never sees
(the theory's untrained ambient noise). Heads:

- ``chart``: the fixed linear chart readout ``T_pᵀ(h - p)``, loss ``λ/2 ‖readout - u*‖²``. With
  plain gradient descent (``sgd``) and uniform token weights this *is* the derivation's quadratic
  toy up to curvature terms, so the tangent share and the isotropy score (normalised participation
  ratio) are compared with ``tangent_share`` and ``isotropy_score`` at every logged step;
- ``mlp``: a learnable bias-free tanh MLP R^D -> R^m (no closed form; the gradient at h is then
  not tangent by construction).

Every (optimizer, head) pair in ``sgd``, ``adam``, ``muon`` (``torch.optim.Muon``, 2-D
parameters only, no weight decay) is trained with frequency-weighted loss (token i weighted by
``V f_i``), so frequent tokens train faster; the uniform-weight SGD/chart run is the theory
comparison. Every ``log_every`` steps: tangent and normal energy of the gradients ``∂L/∂h_i`` in
the *true* tangent space at h_i; the tangent share of the variance of x (in T_p); IsoScore* and
the mean cosine of ``x - p``; all also per frequency bucket (thirds of the ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

import numpy as np

from tangentlab.config import Config, option
from tangentlab.errors import ConfigError
from tangentlab.synthetic.experiments._base import (
    AgreementCheck,
    Experiment,
    ExperimentResult,
    figure_png,
)
from tangentlab.synthetic.experiments._common import (
    build_manifold,
    max_normal_curvature,
    new_figure,
)

__all__ = ["AmplificationConfig", "AmplificationExperiment", "train_toy", "BUCKETS"]

OPTIMIZERS = ("sgd", "adam", "muon")
HEADS = ("chart", "mlp")
BUCKETS = ("frequent", "middle", "rare")


@dataclass(frozen=True)
class AmplificationConfig(Config):
    """Config of ``amplification``."""

    seed: int = option(0, ge=0, integer=True)
    manifold: str = "sphere"
    ambient_dim: int = 8
    n_types: int = option(256, ge=6, integer=True)
    zipf_s: float = 1.0
    tau: float = option(0.2, gt=0)
    sigma: float = option(0.05, gt=0)
    lam: float = option(1.0, gt=0)
    steps: int = option(300, ge=1, integer=True)
    log_every: int = option(10, ge=1, integer=True)
    optimizers: tuple[str, ...] = option(OPTIMIZERS, choices=OPTIMIZERS, min_len=1, unique=True)
    heads: tuple[str, ...] = option(HEADS, choices=HEADS, min_len=1, unique=True)
    lr_sgd: float = option(0.05, gt=0)
    lr_adam: float = option(0.01, gt=0)
    lr_muon: float = option(0.01, gt=0)
    mlp_hidden: int = 32
    share_tolerance: float = 0.03
    iso_tolerance: float = 0.05
    min_rise: float = 0.2
    #: the displacement bound is derived on the quadratic chart; a real manifold adds relative
    #: O((κ η G)²) terms (tan(x/2) vs x/2 on a sphere), so ratio/bound may exceed 1 by that much
    displacement_tolerance: float = 0.01

    @classmethod
    def quick(cls) -> AmplificationConfig:
        """The ``--quick`` settings: fewer tokens and steps, the same checks."""
        return cls(n_types=256, steps=80, log_every=10, heads=("chart", "mlp"),
                   lr_sgd=0.05, lr_adam=0.01, lr_muon=0.01)

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        c = self
        return [
            (c.log_every <= c.steps,
             f'amplification: log_every must be <= steps; got log_every={c.log_every}, steps={c.steps}'),
        ]


def _bucket_of(n_types: int) -> np.ndarray:
    edges = np.array_split(np.arange(n_types), 3)
    out = np.empty(n_types, dtype=np.int64)
    for b, idx in enumerate(edges):
        out[idx] = b
    return out


def train_toy(c: AmplificationConfig, M, optimizer: str, head: str, weighting: str,
              base: np.ndarray, targets: np.ndarray, noise: np.ndarray, freqs: np.ndarray,
              kappa: float | None = None):
    """Train one toy; returns a list of dicts (one per logged step) of measurements.

    With ``kappa`` (plain SGD only: the step must be ``Δu = -η ∂L/∂u``), each logged step also
    records the one-step normal/tangent displacement ratio of every token against the bound
    ``normal_to_tangent_displacement(κ, |u|, η, |∂L/∂u|)``.

    Args:
        c: the experiment config.
        M: the manifold (it must have a torch chart).
        optimizer: ``sgd``, ``adam`` or ``muon``.
        head: ``chart`` (the true tangent read-out) or ``mlp`` (a learned head).
        weighting: ``frequency`` (each token's loss weighted by V·f) or ``uniform``.
        base: shape (D,), the base point p.
        targets: shape (V, m), the chart coordinates each token is trained towards.
        noise: shape (V, D), a fixed per-token offset.
        freqs: shape (V,), Zipf probabilities (used when ``weighting == "frequency"``).
        kappa: curvature for the displacement-bound check (plain SGD only), or None.
    """
    import torch

    from tangentlab.measure import isoscore_star, mean_cosine

    torch.manual_seed(c.seed)
    gen = torch.Generator().manual_seed(c.seed + 1)
    V, m, D = len(targets), M.dim, M.ambient_dim
    U = torch.zeros((V, m), dtype=torch.float64, requires_grad=True)
    Tp = torch.as_tensor(M.tangent_basis(base)[0], dtype=torch.float64)
    p = torch.as_tensor(base, dtype=torch.float64)
    ustar = torch.as_tensor(targets, dtype=torch.float64)
    w = torch.as_tensor(V * freqs if weighting == "frequency" else np.ones(V), dtype=torch.float64)
    params = [U]
    if head == "mlp":
        W1 = (torch.randn((c.mlp_hidden, D), generator=gen, dtype=torch.float64)
              / np.sqrt(D)).requires_grad_(True)
        W2 = (torch.randn((m, c.mlp_hidden), generator=gen, dtype=torch.float64)
              / np.sqrt(c.mlp_hidden)).requires_grad_(True)
        params += [W1, W2]

        def readout(h):
            return torch.tanh((h - p) @ W1.T) @ W2.T
    else:
        def readout(h):
            return (h - p) @ Tp

    if optimizer == "sgd":
        # the loss is a sum over tokens (each token's own loss, as in the derivation), so the
        # shared head weights see V times larger gradients: their SGD step is scaled by 1/V
        groups = [{"params": [U]}]
        if len(params) > 1:
            groups.append({"params": params[1:], "lr": c.lr_sgd / V})
        opt = torch.optim.SGD(groups, lr=c.lr_sgd)
    elif optimizer == "adam":
        opt = torch.optim.Adam(params, lr=c.lr_adam)
    else:
        opt = torch.optim.Muon(params, lr=c.lr_muon, weight_decay=0.0)
    buckets = _bucket_of(V)
    Tnp = Tp.numpy()
    log = []
    for step in range(c.steps + 1):
        h = M.chart_torch(base, U)
        h.retain_grad()
        loss = 0.5 * c.lam * (w[:, None] * (readout(h) - ustar) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        if step % c.log_every == 0:
            hn = h.detach().numpy()
            g = h.grad.detach().numpy()
            X = hn + noise
            Tx = M.tangent_basis(hn)
            gt = np.einsum("nd,ndm->nm", g, Tx)
            e_tan = np.einsum("nm,nm->n", gt, gt)
            e_tot = np.einsum("nd,nd->n", g, g)
            rec = {"step": step, "loss": float(loss.detach())}
            for bname, sel in [("all", np.ones(V, bool))] + [
                    (BUCKETS[b], buckets == b) for b in range(3)]:
                Xb = X[sel]
                Xc = Xb - Xb.mean(0)
                tot = float((Xc * Xc).sum())
                tan = float(((Xc @ Tnp) ** 2).sum())
                cov = Xc.T @ Xc / (len(Xb) - 1)
                lam_ = np.linalg.eigvalsh(cov)
                rec[bname] = {
                    "tangent_share": tan / tot,
                    "isotropy_pr": float(lam_.sum() ** 2 / (D * (lam_**2).sum())),
                    "grad_tangent_fraction": float(e_tan[sel].sum() / max(e_tot[sel].sum(), 1e-300)),
                    "grad_tangent_energy": float(e_tan[sel].sum()),
                    "grad_normal_energy": float(e_tot[sel].sum() - e_tan[sel].sum()),
                    "isoscore_star": float(isoscore_star(Xb)),
                    "mean_cosine": float(mean_cosine(Xb - base, n_pairs=2000, seed=c.seed)),
                    "displacement": float(np.linalg.norm(U.detach().numpy()[sel], axis=1).mean()),
                }
            log.append(rec)
        if step < c.steps:
            u_before = U.detach().clone()
            gu = U.grad.detach().clone()
            opt.step()
            if kappa is not None and step % c.log_every == 0:
                # one step's displacement, split in the true frame at h (before the step), vs
                # the bound kappa t + 1/2 kappa eta G with t = |u|, G = |J^T g| = |dL/du|
                with torch.no_grad():
                    h_after = M.chart_torch(base, U).numpy()
                dx = h_after - hn
                tan = np.linalg.norm(np.einsum("nd,ndm->nm", dx, Tx), axis=1)
                nor = np.sqrt(np.maximum(np.einsum("nd,nd->n", dx, dx) - tan**2, 0.0))
                moved = tan > 1e-12
                from tangentlab import theory

                bound = np.asarray(theory.predict(
                    "tangent-amplification", "normal_to_tangent_displacement", kappa=kappa,
                    t=np.maximum(np.linalg.norm(u_before.numpy(), axis=1), 1e-300),
                    eta=c.lr_sgd, grad_norm=np.linalg.norm(gu.numpy(), axis=1)), dtype=float)
                ratio = nor[moved] / tan[moved]
                log[-1]["displacement_ratio_mean"] = float(ratio.mean()) if moved.any() else 0.0
                log[-1]["displacement_ratio_over_bound_max"] = (
                    float(np.max(ratio / bound[moved])) if moved.any() else 0.0)
    return log


@final
class AmplificationExperiment(Experiment):
    """Tangent amplification: a toy trained by SGD, Adam and Muon on manifold data (see module docstring)."""
    name = "amplification"
    description = ("toy models (embedding table of chart coordinates + head) trained with SGD, "
                   "Adam and Muon: tangent share, gradient energy, IsoScore*, by frequency bucket")
    config_cls = AmplificationConfig

    def validate(self, c: AmplificationConfig) -> None:
        """The manifold can be built and has a torch chart (the toy trains through it)."""
        import torch

        M = build_manifold(c.manifold, c.ambient_dim, 0)
        try:
            M.chart_torch(M.sample(1, 0)[0], torch.zeros((1, M.dim), dtype=torch.float64))
        except Exception as exc:
            raise ConfigError(f"amplification: manifold {c.manifold!r} has no torch chart ({exc})") from None


    def run(self, c: AmplificationConfig) -> ExperimentResult:
        """Train the toys and compare tangent share, isotropy and displacement with the theory."""
        from tangentlab import theory
        from tangentlab.synthetic.tokens import zipf_frequencies

        M = build_manifold(c.manifold, c.ambient_dim, c.seed + 3)
        rng = np.random.default_rng([c.seed, 1])
        base = M.sample(1, seed=c.seed + 4)[0]
        fr = M.frame(base)
        ii2 = float(fr.ii_norm_sq[0])
        gram = np.einsum("aij,bji->ab", fr.ii[0], fr.ii[0])
        ii_gram_sq = float(np.sum(gram * gram))
        targets = c.tau * rng.standard_normal((c.n_types, M.dim))
        noise = c.sigma * rng.standard_normal((c.n_types, c.ambient_dim))
        freqs = zipf_frequencies(c.n_types, c.zipf_s)
        rows: list[dict] = []
        checks: list[AgreementCheck] = []
        runs: dict[str, list] = {}

        kappa = max_normal_curvature(fr.ii[0], seed=c.seed)
        theory_log = train_toy(c, M, "sgd", "chart", "uniform", base, targets, noise, freqs,
                               kappa=kappa)
        runs["sgd|chart|uniform"] = theory_log
        steps = np.array([r["step"] for r in theory_log])
        kw = dict(eta=c.lr_sgd, lam=c.lam, tau=c.tau, ii_norm_sq=ii2, m=M.dim,
                  dim=c.ambient_dim, sigma=c.sigma)
        pred_share = np.asarray(theory.predict("tangent-amplification", "tangent_share",
                                               step=steps, **kw), dtype=float)
        pred_iso = np.asarray(theory.predict("tangent-amplification", "isotropy_score",
                                             step=steps, ii_gram_sq=ii_gram_sq, **kw), dtype=float)
        meas_share = np.array([r["all"]["tangent_share"] for r in theory_log])
        meas_iso = np.array([r["all"]["isotropy_pr"] for r in theory_log])
        for k, ps, pi_, ms, mi in zip(steps, pred_share, pred_iso, meas_share, meas_iso):
            b = dict(optimizer="sgd", head="chart", weighting="uniform", step=int(k),
                     manifold=c.manifold, bucket="all", n=c.n_types, seed=c.seed)
            rows.append(dict(metric="tangent_share", value=float(ms), prediction=float(ps), **b))
            rows.append(dict(metric="isotropy_score", value=float(mi), prediction=float(pi_), **b))
        err_share = float(np.max(np.abs(meas_share - pred_share)))
        err_iso = float(np.max(np.abs(meas_iso - pred_iso)))
        # Monte-Carlo scale: V tokens give relative variance errors ~ sqrt(2/V)
        checks.append(AgreementCheck(
            name="tangent share vs closed form (SGD, chart head)",
            description=("largest |measured - predicted| tangent share of variance over the "
                         "logged steps, gradient descent on the quadratic toy realised on the "
                         f"{c.manifold}"),
            measured=err_share, predicted=0.0, tolerance=c.share_tolerance,
            passed=bool(err_share <= c.share_tolerance),
            detail=f"final share measured {meas_share[-1]:.4f}, predicted {pred_share[-1]:.4f}; "
                   f"V={c.n_types} tokens",
        ))
        checks.append(AgreementCheck(
            name="isotropy score vs closed form (SGD, chart head)",
            description="largest |measured - predicted| normalised participation ratio over steps",
            measured=err_iso, predicted=0.0, tolerance=c.iso_tolerance,
            passed=bool(err_iso <= c.iso_tolerance),
            detail=f"final measured {meas_iso[-1]:.4f}, predicted {pred_iso[-1]:.4f}",
        ))

        disp = [(r["step"], r["displacement_ratio_mean"], r["displacement_ratio_over_bound_max"])
                for r in theory_log if "displacement_ratio_mean" in r]
        for k, mean_ratio, over in disp:
            b = dict(optimizer="sgd", head="chart", weighting="uniform", step=int(k),
                     manifold=c.manifold, bucket="all", n=c.n_types, seed=c.seed)
            rows.append(dict(metric="displacement_normal_tangent_ratio", value=mean_ratio, **b))
            rows.append(dict(metric="displacement_ratio_over_bound_max", value=over,
                             prediction=1.0, bound="upper", **b))
        worst = max(o for _, _, o in disp)
        checks.append(AgreementCheck(
            name="one-step displacement within the normal/tangent bound (SGD, chart head)",
            description=("largest over tokens and logged steps of the measured one-step "
                         "‖normal‖/‖tangent‖ displacement over normal_to_tangent_displacement"
                         "(κ, |u|, η, |∂L/∂u|); must be <= 1 + tolerance (higher-order terms "
                         "of the exact manifold)"),
            measured=worst, predicted=1.0, tolerance=c.displacement_tolerance,
            passed=bool(worst <= 1.0 + c.displacement_tolerance),
            detail=f"κ={kappa:.3g}; mean ratio at the last logged step {disp[-1][1]:.3g}",
        ))

        for opt in c.optimizers:
            for head in c.heads:
                log = train_toy(c, M, opt, head, "frequency", base, targets, noise, freqs)
                runs[f"{opt}|{head}|frequency"] = log
                for rec in log:
                    for bname in ("all", *BUCKETS):
                        for metric, val in rec[bname].items():
                            rows.append(dict(metric=metric, value=val, optimizer=opt, head=head,
                                             weighting="frequency", step=rec["step"],
                                             bucket=bname, manifold=c.manifold,
                                             n=c.n_types if bname == "all" else None,
                                             seed=c.seed))
                s0 = log[0]["all"]["tangent_share"]
                s1 = log[-1]["all"]["tangent_share"]
                checks.append(AgreementCheck(
                    name=f"tangent share rises: {opt}, {head} head",
                    description=("tangent share of representation variance at the last logged "
                                 "step minus at step 0 (frequency-weighted loss); must exceed "
                                 "min_rise"),
                    measured=s1 - s0, predicted=None, tolerance=c.min_rise,
                    passed=bool(s1 - s0 >= c.min_rise),
                    detail=(f"share {s0:.3f} -> {s1:.3f}; gradient tangent fraction "
                            f"{log[0]['all']['grad_tangent_fraction']:.3f} -> "
                            f"{log[-1]['all']['grad_tangent_fraction']:.3f}; IsoScore* "
                            f"{log[0]['all']['isoscore_star']:.3f} -> "
                            f"{log[-1]['all']['isoscore_star']:.3f}; by bucket final share "
                            + ", ".join(f"{b} {log[-1][b]['tangent_share']:.3f}" for b in BUCKETS)),
                ))
        fig = self._figure(c, steps, pred_share, runs)
        return ExperimentResult(rows=rows, checks=checks, figures={"amplification.png": fig})

    def _figure(self, c, steps, pred_share, runs):
        fig, (a1, a2, a3) = new_figure(3, width=3.6)
        kk = np.arange(0, c.steps + 1)
        from tangentlab import theory
        th = runs["sgd|chart|uniform"]
        a1.plot(steps, pred_share, "k-", lw=1, label="theory (GD, chart)")
        a1.plot(steps, [r["all"]["tangent_share"] for r in th], "ko", ms=3, label="measured GD")
        for i, key in enumerate(k for k in runs if k.endswith("frequency")):
            log = runs[key]
            st = [r["step"] for r in log]
            opt, head, _ = key.split("|")
            a1.plot(st, [r["all"]["tangent_share"] for r in log], "-", color=f"C{i}", lw=1,
                    label=f"{opt}/{head}")
            a2.plot(st, [r["all"]["grad_tangent_fraction"] for r in log], "-", color=f"C{i}",
                    lw=1, label=f"{opt}/{head}")
        del kk, theory
        a1.set_xlabel("step")
        a1.set_ylabel("tangent share of variance")
        a1.legend(fontsize=5)
        a2.axhline(2 / c.ambient_dim, color="k", ls=":", lw=1, label="isotropic m/D")
        a2.set_xlabel("step")
        a2.set_ylabel("gradient energy in true tangent")
        a2.legend(fontsize=5)
        xs = np.arange(3)
        for i, key in enumerate(k for k in runs if k.endswith("frequency")):
            log = runs[key]
            mid = min(len(log) - 1, max(1, len(log) // 4))
            a3.plot(xs, [log[mid][b]["tangent_share"] for b in BUCKETS], "o-", color=f"C{i}",
                    ms=3, label=key.rsplit("|", 1)[0].replace("|", "/"))
        a3.set_xticks(xs, BUCKETS)
        a3.set_ylabel(f"tangent share at step {runs['sgd|chart|uniform'][min(len(th) - 1, max(1, len(th) // 4))]['step']}")
        a3.legend(fontsize=5)
        fig.tight_layout()
        return figure_png(fig)

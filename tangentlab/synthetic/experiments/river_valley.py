"""Experiment ``river-valley``.

Gradient descent against Muon on a quadratic valley and on a mixed-spiked matrix problem, against
the ``river-valley`` predictions.

Valley: ``L = ½ λ_r x² + ½ λ_h Σ_j y_j²``. The parameters are the diagonal of a square matrix
``P = diag(x, y_1..y_k)`` (off-diagonal entries are parameters too, with zero gradient), so that
``torch.optim.Muon`` sees a 2-D parameter and orthogonalizes a diagonal gradient: ideally the
sign step. Methods: ``gd`` (``torch.optim.SGD``, step η), ``sign-exact`` (the ideal
orthogonalized step ``P -= η_s sign(G)``, the derivation's model), ``muon-plain``
(``torch.optim.Muon``, no momentum: Newton-Schulz orthogonalization, which only approximates
the sign), ``muon`` (momentum 0.95, Nesterov), ``adam`` (step η_s) and ``two-stage``
(``muon-plain`` for ``switch_point`` steps, then gradient descent) and ``two-stage-exact``
(``sign-exact`` then gradient descent, the derivation's schedule). Hitting time: first step with
``|x| <= eps``; band: the largest ``|x|`` over the last ``band_window`` steps.

Mixed-spiked matrix problem: ``L = ½‖W - M*‖²_F``, ``M* = Σ_c s_c u_c v_cᵀ`` with a *signal*
(large s), a *spike* (medium) and a *bulk* (several small) component; ``W`` starts at 0. Each
component's error ``u_cᵀ(W - M*)v_c`` is one coordinate of the valley with λ = 1: gradient
descent contracts it by (1 - η), an orthogonalized step moves every component by η_s at once. We
measure the per-component hitting times of ``eps`` against ``hitting_time("gd"|"sign", ...)``.
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

__all__ = ["RiverValleyConfig", "RiverValleyExperiment", "run_valley"]

METHODS = ("gd", "sign-exact", "muon-plain", "muon", "adam", "two-stage", "two-stage-exact")


@dataclass(frozen=True)
class RiverValleyConfig(Config):
    """Config of ``river-valley``."""

    seed: int = option(0, ge=0, integer=True)
    lam_river: float = option(0.02, gt=0)
    lam_hill: float = 1.0
    n_hills: int = option(3, ge=1, integer=True)
    x0: float = 1.0
    y0: float = 1.0
    eta: float = option(1.0, gt=0)
    eta_sign: float = option(0.03, gt=0)
    eps: float = option(0.005, gt=0)
    max_steps: int = option(800, ge=10, integer=True)
    sensing_steps: int = option(300, ge=10, integer=True)
    band_window: int = option(50, ge=1, integer=True)
    methods: tuple[str, ...] = option(METHODS, choices=METHODS, min_len=1, unique=True)
    time_tolerance: float = 0.05
    muon_time_tolerance: float = 0.25
    band_tolerance: float = 0.5
    sensing_dim: int = 12
    signal: float = 10.0
    spike: float = 3.0
    bulk: float = 0.3
    n_bulk: int = option(4, ge=1, integer=True)
    sensing_eta: float = option(0.1, gt=0, lt=2)
    sensing_eta_sign: float = option(0.1, gt=0)
    sensing_eps: float = option(0.05, gt=0)

    @classmethod
    def quick(cls) -> RiverValleyConfig:
        """The ``--quick`` settings: fewer steps, the same checks."""
        return cls(max_steps=400, sensing_steps=200, sensing_dim=8, n_bulk=3)

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        c = self
        return [
            (c.lam_hill > c.lam_river,
             f'river-valley: need lam_river < lam_hill; got {c.lam_river} and {c.lam_hill}'),
            (c.eta < 2 / c.lam_hill,
             f'river-valley: gradient descent diverges on the hills unless eta < 2/lam_hill = {2 / c.lam_hill:g}; got eta={c.eta}'),
            (c.x0 > c.eps,
             f'river-valley: x0 must exceed eps; got x0={c.x0}, eps={c.eps}'),
            (c.band_window < c.max_steps,
             f'river-valley: band_window must be < max_steps; got {c.band_window} and {c.max_steps}'),
            (c.sensing_dim >= c.n_bulk + 2,
             f'river-valley: sensing_dim must be >= n_bulk + 2; got {c.sensing_dim} and n_bulk={c.n_bulk}'),
            (c.signal > c.spike > c.bulk > c.sensing_eps,
             f'river-valley: need signal > spike > bulk > sensing_eps; got {c.signal}, {c.spike}, {c.bulk}, {c.sensing_eps}'),
        ]


def _muon(params, lr, momentum):
    import torch

    return torch.optim.Muon(params, lr=lr, weight_decay=0.0, momentum=momentum,
                            nesterov=momentum > 0)


def run_valley(c: RiverValleyConfig, method: str, switch_step: int | None = None) -> np.ndarray:
    """Trajectory of the river coordinate |x_k|, k = 0..max_steps, shape (max_steps + 1,)."""
    import torch

    k = c.n_hills + 1
    P = torch.diag(torch.tensor([c.x0] + [c.y0] * c.n_hills, dtype=torch.float64))
    P.requires_grad_(True)
    lam = torch.tensor([c.lam_river] + [c.lam_hill] * c.n_hills, dtype=torch.float64)

    def make(name):
        if name == "gd":
            return torch.optim.SGD([P], lr=c.eta)
        if name == "muon-plain":
            return _muon([P], c.eta_sign, 0.0)
        if name == "muon":
            return _muon([P], c.eta_sign, 0.95)
        if name == "adam":
            return torch.optim.Adam([P], lr=c.eta_sign)
        return None

    opt = make("muon-plain" if method == "two-stage" else method)
    exact_sign = method in ("sign-exact", "two-stage-exact")
    xs = np.empty(c.max_steps + 1)
    for step in range(c.max_steps + 1):
        xs[step] = abs(float(P.detach()[0, 0]))
        if step == c.max_steps:
            break
        if method in ("two-stage", "two-stage-exact") and step == switch_step:
            opt = make("gd")
            exact_sign = False
        loss = 0.5 * (lam * torch.diagonal(P) ** 2).sum()
        if opt is not None:
            opt.zero_grad()
        if P.grad is not None:
            P.grad = None
        loss.backward()
        if exact_sign:
            with torch.no_grad():
                P -= c.eta_sign * torch.sign(P.grad)
        else:
            opt.step()
    del k
    return xs


def _hit(xs: np.ndarray, eps: float) -> float:
    idx = np.nonzero(xs <= eps)[0]
    return float(idx[0]) if idx.size else math.inf


@final
class RiverValleyExperiment(Experiment):
    """Gradient descent against Muon and sign descent on a river valley and on matrix sensing."""
    name = "river-valley"
    description = ("GD, Muon (with/without momentum), Adam and a two-stage schedule on the "
                   "quadratic valley and a mixed-spiked matrix problem: hitting times and bands")
    config_cls = RiverValleyConfig

    def run(self, c: RiverValleyConfig) -> ExperimentResult:
        """Run every method and compare hitting times, bands and the two-stage switch with theory."""
        from tangentlab import theory

        rows: list[dict] = []
        checks: list[AgreementCheck] = []
        kw = dict(x0=c.x0, lam=c.lam_river, eta=c.eta, eps=c.eps)
        K = int(theory.predict("river-valley", "switch_point", eta_sign=c.eta_sign, **kw))
        preds = {
            "gd": float(theory.predict("river-valley", "hitting_time", method="gd", **kw)),
            "sign-exact": float(theory.predict("river-valley", "hitting_time", method="sign",
                                               eta_sign=c.eta_sign, **kw)),
            "two-stage": float(theory.predict("river-valley", "hitting_time", method="two-stage",
                                              eta_sign=c.eta_sign, switch_step=K, **kw)),
        }
        preds["muon-plain"] = preds["sign-exact"]
        preds["two-stage-exact"] = preds["two-stage"]
        band_pred = float(theory.predict("river-valley", "oscillation_band", eta=c.eta_sign,
                                         x0=c.x0))
        traj: dict[str, np.ndarray] = {}
        for method in c.methods:
            xs = run_valley(c, method, switch_step=K)
            traj[method] = xs
            hit = _hit(xs, c.eps)
            band = float(xs[-c.band_window:].max())
            base = dict(problem="valley", optimizer=method, n=c.max_steps, seed=c.seed)
            rows.append(dict(metric="hitting_time", value=hit, prediction=preds.get(method),
                             **base))
            rows.append(dict(metric="final_band", value=band,
                             prediction=band_pred if method in ("sign-exact", "muon-plain") else None,
                             **base))
            if method.startswith("two-stage"):
                rows.append(dict(metric="switch_step", value=float(K), prediction=float(K), **base))
            if method in preds:
                tol = (c.muon_time_tolerance if method in ("muon-plain", "two-stage")
                       else c.time_tolerance)
                p = preds[method]
                if math.isinf(p):
                    ok, err = math.isinf(hit), (0.0 if math.isinf(hit) else math.inf)
                else:
                    err = abs(hit - p) / p if math.isfinite(hit) else math.inf
                    ok = err <= tol
                checks.append(AgreementCheck(
                    name=f"valley hitting time: {method}",
                    description=(f"first step with |x| <= eps={c.eps} on the river (λ_r="
                                 f"{c.lam_river}, λ_h={c.lam_hill}) vs the exact prediction "
                                 f"({'sign descent' if method != 'gd' else 'gradient descent'}"
                                 f"{', switch at ' + str(K) if method.startswith('two-stage') else ''}); "
                                 "relative error"),
                    measured=hit, predicted=p, tolerance=tol, passed=bool(ok),
                    detail=f"relative error {err:.3g}",
                ))
            if method in ("sign-exact", "muon-plain"):
                err = abs(band - band_pred) / band_pred
                checks.append(AgreementCheck(
                    name=f"oscillation band: {method}",
                    description=(f"largest |x| over the last {c.band_window} steps vs the "
                                 f"predicted band amplitude max(r, η_s - r) (η_s={c.eta_sign})"),
                    measured=band, predicted=band_pred, tolerance=c.band_tolerance,
                    passed=bool(err <= c.band_tolerance), detail=f"relative error {err:.3g}",
                ))
        for two, single in (("two-stage-exact", "sign-exact"), ("two-stage", "muon-plain")):
            if not {two, "gd", single} <= set(c.methods):
                continue
            t2 = _hit(traj[two], c.eps)
            t_gd, t_s = _hit(traj["gd"], c.eps), _hit(traj[single], c.eps)
            best = min(t_gd, t_s)
            pbest = min(preds["gd"], preds["sign-exact"])
            checks.append(AgreementCheck(
                name=f"two-stage schedule is fastest: {two}",
                description=(f"hitting time of {single}-then-GD (switch at the predicted switch "
                             f"point) over the best of GD and {single} alone; must be <= 1"),
                measured=t2 / best if math.isfinite(best) else 0.0,
                predicted=preds["two-stage"] / pbest if math.isfinite(pbest) else 0.0,
                tolerance=1.0, passed=bool(t2 <= best),
                detail=f"{two} {t2:g}, GD {t_gd:g}, {single} {t_s:g} steps; switch at {K}",
            ))
        srows, schecks, strajs = self._sensing(c)
        rows += srows
        checks += schecks
        fig = self._figure(c, traj, preds, band_pred, strajs)
        return ExperimentResult(rows=rows, checks=checks, figures={"river-valley.png": fig})

    def _sensing(self, c: RiverValleyConfig):
        import torch

        from tangentlab import theory

        d = c.sensing_dim
        rng = np.random.default_rng([c.seed, 5])
        U, _ = np.linalg.qr(rng.standard_normal((d, d)))
        V, _ = np.linalg.qr(rng.standard_normal((d, d)))
        s = np.array([c.signal, c.spike] + [c.bulk] * c.n_bulk)
        names = ["signal", "spike"] + [f"bulk{i}" for i in range(c.n_bulk)]
        r = len(s)
        Mstar = torch.as_tensor((U[:, :r] * s) @ V[:, :r].T)
        Ut, Vt = torch.as_tensor(U[:, :r]), torch.as_tensor(V[:, :r])
        rows, checks, trajs = [], [], {}
        for method, tol in (("gd", c.time_tolerance), ("muon-plain", c.muon_time_tolerance)):
            W = torch.zeros((d, d), dtype=torch.float64, requires_grad=True)
            opt = (torch.optim.SGD([W], lr=c.sensing_eta) if method == "gd"
                   else _muon([W], c.sensing_eta_sign, 0.0))
            errs = []
            for _ in range(c.sensing_steps + 1):
                with torch.no_grad():
                    errs.append(torch.abs(torch.einsum("dc,de,ec->c", Ut, W - Mstar, Vt)).numpy())
                loss = 0.5 * ((W - Mstar) ** 2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
            E = np.array(errs)
            trajs[method] = E
            for ci, name in enumerate(names):
                hit = _hit(E[:, ci], c.sensing_eps)
                pred = float(theory.predict(
                    "river-valley", "hitting_time", method="gd" if method == "gd" else "sign",
                    x0=float(s[ci]), lam=1.0, eta=c.sensing_eta, eps=c.sensing_eps,
                    eta_sign=c.sensing_eta_sign))
                rows.append(dict(metric="hitting_time", problem="matrix-sensing", optimizer=method,
                                 component=name, value=hit, prediction=pred, n=c.sensing_steps,
                                 seed=c.seed))
                if ci <= 2:  # signal, spike, first bulk component
                    err = abs(hit - pred) / pred if math.isfinite(hit) and math.isfinite(pred) \
                        else (0.0 if hit == pred else math.inf)
                    checks.append(AgreementCheck(
                        name=f"matrix sensing hitting time: {method}, {name}",
                        description=(f"steps until the {name} component's error is <= "
                                     f"{c.sensing_eps} (s={s[ci]:g}) vs "
                                     f"{'gradient descent' if method == 'gd' else 'sign descent'}"
                                     " prediction; relative error"),
                        measured=hit, predicted=pred, tolerance=tol, passed=bool(err <= tol),
                        detail=f"relative error {err:.3g}",
                    ))
        return rows, checks, trajs

    def _figure(self, c, traj, preds, band_pred, strajs):
        fig, (a1, a2) = new_figure(2, width=4.4)
        for i, (m, xs) in enumerate(traj.items()):
            a1.plot(np.arange(len(xs)), np.maximum(xs, 1e-6), "-", lw=1, color=f"C{i}", label=m)
            if m in preds and math.isfinite(preds[m]):
                a1.plot([preds[m]], [c.eps], "v", color=f"C{i}", ms=6)
        a1.axhline(c.eps, color="k", ls=":", lw=1, label="eps")
        a1.axhline(band_pred, color="k", ls="--", lw=1, label="predicted band")
        a1.set_yscale("log")
        a1.set_xlabel("step")
        a1.set_ylabel("|x| (river); ▼ = predicted hitting time")
        a1.legend(fontsize=5)
        for j, (m, E) in enumerate(strajs.items()):
            for ci, ls in zip(range(3), ("-", "--", ":")):
                a2.plot(np.maximum(E[:, ci], 1e-6), ls, color=f"C{j}", lw=1,
                        label=f"{m} {['signal', 'spike', 'bulk'][ci]}")
        a2.axhline(c.sensing_eps, color="k", ls=":", lw=1)
        a2.set_yscale("log")
        a2.set_xlim(0, c.sensing_steps)
        a2.set_xlabel("step")
        a2.set_ylabel("component error (matrix sensing)")
        a2.legend(fontsize=5)
        fig.tight_layout()
        return figure_png(fig)

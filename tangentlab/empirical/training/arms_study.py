"""Learning arms over a training horizon, against random subspaces as well (issue 36, item 1).

The measurement's learning-arms row (:mod:`tangentlab.empirical.measurement.learning_arms`)
trains 8 first-order SGD steps per arm on the eval batches' fit half. A 2026 study of low-rank
training (arXiv 2604.25143) found that restricting updates to *any* rank-3 subspace, random ones
included, speeds learning up: "training onto Q_T still learns" then means little unless training
onto a random subspace of the same rank learns less. This study continues a stated checkpoint of
a training run for ``steps`` steps (500 by default) on the run's own training stream, in 3 + 2m
arms that share the batches, their order, the optimizer and its settings:

- ``unmodified``; ``onto`` (the site's activation gradient g projected onto Q_T, g Q Qᵀ);
  ``away`` (g (I − Q Qᵀ));
- ``onto_control`` j and ``away_control`` j for m rank-r Haar subspaces B_j of the complement of
  Q_T (:func:`~tangentlab.empirical.measurement.learning_arms.haar_complement_controls`).

The projection acts in the backward pass only (the measurement row's own projection), so every
arm computes the same function of its parameters. Q_T is the rank-r PCA basis of the site's
activations at the checkpoint, fitted on ``fit_batches`` training batches drawn past the run's
last step (the protocol's *refit* proxy: the fixed proxy is fitted on early checkpoints and not
stored). The held-out loss (mean per target over ``eval_batches`` fixed batches of the run's eval
split) is read at step 0 and every ``eval_every`` steps.

Numbers (nats per target): each arm's held-out curve L_a(t), and two gaps between curves, each
the trapezoid area over the read steps divided by the horizon (a mean gap):

- ``arms_onto_gain`` = mean_j A(L_onto_control_j − L_onto): > 0 when training onto Q_T lowers
  the held-out loss more than training onto a random subspace of the same rank;
- ``arms_away_cost`` = A(L_away − mean_j L_away_control_j): > 0 when training without Q_T
  learns less than training without a random subspace.

Intervals: percentile bootstrap over the eval batches (one resample of the batch indices serves
every arm and read step), ``n_boot`` replicates at ``confidence``. The stated rule (issue 36):
**supported** when both intervals lie above 0, **not supported** when either lies below 0,
**inconclusive** otherwise. The report's learning-arms row does not read this study (that row is
on the verdict path a shipped certificate fingerprints); ``tangentlab empirical arms`` writes it
as a run directory of its own.

Shapes: Q (d, r); controls (m, d, r); loss sums and counts (n_arms, n_reads, eval_batches).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.config import Config, option

__all__ = ["ArmsStudyConfig", "ArmCurves", "run_arms", "arms_rows", "arms_verdict",
           "write_arms_study", "run_arms_stage", "ARMS_KIND", "DEFAULT_LR"]

#: The manifest ``kind`` of a study's run directory.
ARMS_KIND = "empirical/arms"
#: The learning rate per optimizer where none is stated: AdamW's is the small preset's final rate
#: (1e-3 × 0.1); SGD's is the one the decoder's 500-step study used (docs/empirical.md).
DEFAULT_LR = {"adamw": 1e-4, "sgd": 0.05}


@dataclass(frozen=True)
class ArmsStudyConfig(Config):
    """The study's settings (module docstring); every key is a ``--set`` key of the command.

    ``step``: the checkpoint to continue (-1: the run's last); ``lr``: the optimizer's learning
    rate, 0 for the optimizer's own default (:data:`DEFAULT_LR`, :attr:`rate`);
    ``batch_size``/``seq_len`` 0: the run's own.
    """

    step: int = option(-1, ge=-1, integer=True)
    site: str = "blocks.-1.resid_post"
    steps: int = option(500, ge=1, integer=True)
    optimizer: str = option("adamw", choices=("adamw", "sgd"))
    lr: float = option(0.0, ge=0)
    weight_decay: float = option(0.0, ge=0)
    rank: int = option(8, ge=1, integer=True)
    n_controls: int = option(4, ge=1, le=32, integer=True)
    batch_size: int = option(0, ge=0, integer=True)
    seq_len: int = option(0, ge=0, integer=True)
    eval_batches: int = option(16, ge=2, integer=True)
    eval_every: int = option(50, ge=1, integer=True)
    fit_batches: int = option(8, ge=1, integer=True)
    n_boot: int = option(1000, ge=100, integer=True)
    confidence: float = option(0.95, gt=0, lt=1)
    seed: int = 0

    @property
    def rate(self) -> float:
        """The learning rate the arms use: ``lr``, or :data:`DEFAULT_LR` of the optimizer."""
        return self.lr or DEFAULT_LR[self.optimizer]

    @classmethod
    def quick(cls) -> ArmsStudyConfig:
        """A smoke setting: 20 steps, 2 controls, reads every 5 steps."""
        return cls(steps=20, n_controls=2, eval_every=5, eval_batches=4, fit_batches=2,
                   n_boot=200)


@dataclass(frozen=True)
class ArmCurves:
    """Held-out loss of every arm at every read step.

    Attributes:
        arms: arm names, in order (``unmodified``, ``onto``, ``away``, then ``onto_control``
            and ``away_control`` per control).
        read_steps: the steps at which the loss was read (0 first, ``steps`` last).
        loss_sums, counts: (n_arms, n_reads, eval_batches) summed loss and targets per batch.
        n_controls: m.
    """

    arms: tuple[str, ...]
    read_steps: tuple[int, ...]
    loss_sums: Any
    counts: Any
    n_controls: int


def _arm_list(m: int) -> list[tuple[str, str, int | None]]:
    """(name, projection kind, control index) of every arm."""
    out = [("unmodified", "unmodified", None), ("onto", "onto", None), ("away", "away", None)]
    for j in range(m):
        out += [(f"onto_control_{j}", "onto", j), (f"away_control_{j}", "away", j)]
    return out


def _data(run_dir: Path, cfg: ArmsStudyConfig, tokenizer):
    """(training stream, eval batches, batch arguments) of the run, as its trainer built them."""
    import json

    import torch

    from tangentlab.empirical.loading.corpus import load_texts, split_texts
    from tangentlab.empirical.loading.data import make_batch
    from tangentlab.empirical.loading.tokenizer import encode_stream

    tc = json.loads((run_dir / "train_config.json").read_text())
    split = split_texts(load_texts(tc["corpus"], max_docs=tc.get("max_docs")),
                        tc["eval_fraction"], seed=tc["seed"])
    special = [i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None]
    args = {"batch_size": cfg.batch_size or tc["batch_size"], "seq_len": cfg.seq_len or tc["seq_len"],
            "arch": tc["arch"], "seed": tc["seed"], "mask_id": tokenizer.mask_token_id,
            "vocab_size": len(tokenizer), "mlm_probability": tc["mlm_probability"],
            "special_ids": special}
    stream = torch.from_numpy(encode_stream(tokenizer, split.train,
                                            max_tokens=tc.get("max_train_tokens")))
    ev = torch.from_numpy(encode_stream(tokenizer, split.eval))
    evals = [make_batch(ev, 10_000_000 + b, **{**args, "seed": tc["seed"] + cfg.seed})
             for b in range(cfg.eval_batches)]
    return stream, evals, args, int(tc["steps"])


def _fit_q(loaded, site: str, batches, rank: int):
    """Q_T (d, r): the rank-r PCA basis of the site's activations over ``batches``."""
    import numpy as np

    from tangentlab.empirical.loading.capture import capture_batch
    from tangentlab.measure.proxies import PCAProxy

    rows = []
    for inputs, labels, masked in batches:
        cb = capture_batch(loaded, [site], inputs, labels, masked=masked, grads=False)
        rows.append(cb.acts[site][cb.rows.bool()].double().cpu().numpy())  # real tokens only
    return PCAProxy(rank).fit(np.concatenate(rows)).basis()


def _held_out(loaded, evals):
    """Per-batch (loss sum, targets) of ``loaded`` on the eval batches."""
    import torch

    from tangentlab.empirical.loading.capture import token_losses

    sums, counts = [], []
    with torch.no_grad():
        for inputs, labels, _ in evals:
            out = loaded.model(input_ids=inputs)
            per_tok, valid = token_losses(out.logits, labels, loaded.arch)
            sums.append(float(per_tok.sum()))
            counts.append(int(valid.sum()))
    return sums, counts


def _train_arm(loaded, cfg: ArmsStudyConfig, kind: str, B, batch_at, evals, reads):
    """One arm from a fresh copy of the checkpoint: (sums, counts) per read step."""
    import copy

    import torch

    from tangentlab.empirical.loading.capture import site_hooks, token_losses
    from tangentlab.empirical.measurement.learning_arms import projector  # the row's own

    model = copy.deepcopy(loaded.model)
    model.eval()  # no dropout: every arm computes the same function of its parameters
    arm = dataclasses.replace(loaded, model=model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.AdamW(params, lr=cfg.rate, weight_decay=cfg.weight_decay)
           if cfg.optimizer == "adamw" else torch.optim.SGD(params, lr=cfg.rate,
                                                            weight_decay=cfg.weight_decay))
    fn = projector(torch, kind, B)
    sums, counts = [], []
    with site_hooks(model, [cfg.site], make_leaf=False,
                    edit={cfg.site: fn or (lambda h: h)}) as captured:
        for t in range(cfg.steps + 1):
            if t in reads:
                s, n = _held_out(arm, evals)
                sums.append(s)
                counts.append(n)
            if t == cfg.steps:
                break
            inputs, labels, _ = batch_at(t)
            opt.zero_grad(set_to_none=True)
            per_tok, valid = token_losses(model(input_ids=inputs).logits, labels, loaded.arch)
            (per_tok.sum() / valid.sum().clamp(min=1)).backward()
            opt.step()
            captured[cfg.site].clear()  # the hook keeps every output (and its graph) otherwise
    return sums, counts


def run_arms(run_dir: str | Path, cfg: ArmsStudyConfig, *, device: str = "cpu") -> ArmCurves:
    """Train every arm of the study on training run ``run_dir`` (module docstring)."""
    import numpy as np
    import torch

    from tangentlab.empirical.loading.checkpoints import list_checkpoints
    from tangentlab.empirical.loading.data import make_batch
    from tangentlab.empirical.loading.models import load_model
    from tangentlab.empirical.measurement.learning_arms import haar_complement_controls
    from tangentlab.errors import ConfigError

    run_dir = Path(run_dir)
    cks = dict(list_checkpoints(run_dir))
    if not cks or not (run_dir / "train_config.json").is_file():
        raise ConfigError(f"{str(run_dir)!r} is not a training run: it needs train_config.json "
                          "and checkpoints/step_*/ with train_state.json; pass a directory "
                          "written by `tangentlab empirical train` (or a reproduce run's "
                          "train/<arch>)")
    step = max(cks) if cfg.step == -1 else cfg.step
    if step not in cks:
        raise ConfigError(f"the run {str(run_dir)!r} has no checkpoint at step {cfg.step}; its "
                          f"steps are {sorted(cks)} (-1: the last)")
    loaded = load_model(cks[step], device=device)
    stream, evals, args, run_steps = _data(run_dir, cfg, loaded.tokenizer)

    def batch_at(t: int):  # training batches past the run's own last step, the same in every arm
        return make_batch(stream, run_steps + 1 + cfg.fit_batches + t, **args)

    Q = _fit_q(loaded, cfg.site, [make_batch(stream, run_steps + 1 + i, **args)
                                  for i in range(cfg.fit_batches)], cfg.rank)
    controls = haar_complement_controls(Q, cfg.n_controls, [cfg.seed, 43])
    torch.manual_seed(int(np.random.default_rng([cfg.seed, 47]).integers(2**31 - 1)))
    dt = next(loaded.model.parameters()).dtype
    reads = sorted({0, cfg.steps, *range(0, cfg.steps, cfg.eval_every)})
    arms = _arm_list(cfg.n_controls)
    sums, counts = [], []
    for _, kind, j in arms:
        B = None if kind == "unmodified" else torch.as_tensor(Q if j is None else controls[j],
                                                              dtype=dt)
        s, n = _train_arm(loaded, cfg, kind, B, batch_at, evals, set(reads))
        sums.append(s)
        counts.append(n)
    return ArmCurves(tuple(a[0] for a in arms), tuple(reads), np.asarray(sums, dtype=float),
                     np.asarray(counts, dtype=float), cfg.n_controls)


def _gaps(curves: ArmCurves, idx) -> tuple[Any, Any, Any]:
    """(arm curves (n_arms, n_reads), onto gain, away cost) on eval batches ``idx`` (..., n)."""
    import numpy as np

    L = curves.loss_sums[..., idx].sum(-1) / curves.counts[..., idx].sum(-1)  # (a, r, [B])
    L = np.moveaxis(L, -1, 0) if L.ndim == 3 else L
    t = np.asarray(curves.read_steps, dtype=float)
    span = t[-1] - t[0]

    def area(y):  # mean over the horizon of y(t), trapezoid rule; y (..., n_reads)
        return ((y[..., 1:] + y[..., :-1]) / 2 * np.diff(t)).sum(-1) / span

    on = [curves.arms.index(f"onto_control_{j}") for j in range(curves.n_controls)]
    aw = [curves.arms.index(f"away_control_{j}") for j in range(curves.n_controls)]
    onto_gain = area(L[..., on, :] - L[..., [1], :]).mean(-1)
    away_cost = area(L[..., 2, :] - L[..., aw, :].mean(-2))
    return L, onto_gain, away_cost


def arms_verdict(gain_ci: tuple[float, float], cost_ci: tuple[float, float]) -> str:
    """The stated rule: both intervals above 0 → supported; either below 0 → not supported."""
    from tangentlab.claims.rules import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

    if gain_ci[0] > 0 and cost_ci[0] > 0:
        return SUPPORTED
    if gain_ci[1] < 0 or cost_ci[1] < 0:
        return NOT_SUPPORTED
    return INCONCLUSIVE


def arms_rows(curves: ArmCurves, cfg: ArmsStudyConfig) -> tuple[list[dict], str]:
    """(result rows, verdict): every arm's curve, the two gaps with their intervals."""
    import numpy as np

    nb = curves.loss_sums.shape[-1]
    L, gain, cost = _gaps(curves, np.arange(nb))
    rng = np.random.default_rng([cfg.seed, 53])
    _, g_b, c_b = _gaps(curves, rng.integers(0, nb, size=(cfg.n_boot, nb)))
    q = [(1 - cfg.confidence) / 2 * 100, (1 + cfg.confidence) / 2 * 100]
    g_ci = tuple(float(x) for x in np.percentile(g_b, q))
    c_ci = tuple(float(x) for x in np.percentile(c_b, q))
    verdict = arms_verdict(g_ci, c_ci)
    kw = {"experiment": ARMS_KIND, "site": cfg.site, "optimizer": cfg.optimizer, "lr": cfg.rate,
          "steps": cfg.steps, "n_controls": curves.n_controls, "n_batches": nb}
    rows = [{**kw, "metric": "arms_loss", "variant": arm, "step": s, "value": float(L[a, r])}
            for a, arm in enumerate(curves.arms) for r, s in enumerate(curves.read_steps)]
    rows += [{**kw, "metric": "arms_onto_gain", "value": float(gain), "ci_low": g_ci[0],
              "ci_high": g_ci[1], "n_replicates": cfg.n_boot, "rule": verdict},
             {**kw, "metric": "arms_away_cost", "value": float(cost), "ci_low": c_ci[0],
              "ci_high": c_ci[1], "n_replicates": cfg.n_boot, "rule": verdict}]
    return rows, verdict


def write_arms_study(run_dir: str | Path, out: str | Path, cfg: ArmsStudyConfig, *,
                     device: str = "cpu") -> tuple[Path, str]:
    """Run the study on ``run_dir`` and write ``out`` (results, manifest); (out, verdict).

    ``device``: ``cpu``, ``cuda[:N]``, ``mps`` or ``auto`` (resolved here, as reproduce passes it).
    """
    from tangentlab.contract import RunOutput, write_run
    from tangentlab.empirical.loading.models import resolve_device

    device = resolve_device(device)

    box: dict[str, str] = {}

    def produce() -> RunOutput:
        t0 = time.perf_counter()
        curves = run_arms(run_dir, cfg, device=device)
        rows, box["verdict"] = arms_rows(curves, cfg)
        return RunOutput(rows=rows, timings={"arms": time.perf_counter() - t0},
                         extra={"trained_run": str(run_dir), "arms": list(curves.arms),
                                "read_steps": list(curves.read_steps), "learning_rate": cfg.rate,
                                "verdict": box["verdict"]})

    path = write_run(out, kind=ARMS_KIND, config=cfg, produce=produce,
                     seeds={"arms": cfg.seed}, quick=False, device=device)
    return path, box["verdict"]


def run_arms_stage(out: str | Path, run_dir: str | Path, *, study: dict[str, Any],
                   device: str = "cpu") -> Path:
    """The reproduce stage ``arms/<arch>``: the study on ``run_dir`` with ``study``'s keys.

    ``study``: :class:`ArmsStudyConfig` keys. Returns ``out``.
    """
    return write_arms_study(run_dir, out, ArmsStudyConfig(**study), device=device)[0]

"""The second causal test, "learning needs the tangent directions": training inside and outside Q_T.

Song, Ahn & Yun (ICLR 2025) showed that the "gradients live in a tiny subspace" alignment can be
spurious: the top subspace holds most of the gradient's energy, yet training restricted to it
barely lowers the loss, and training *without* it loses little. The test here asks the same of
Q_T. From one checkpoint, each arm continues training for ``steps`` SGD steps on the same
batches in the same order, with the site's activation gradient ∂L/∂h modified in the backward
pass (an identity forward, a projection backward, on the site output):

- ``unmodified``: g;
- ``onto``: g Q Qᵀ (training inside span(Q_T));
- ``away``: g (I − Q Qᵀ) (training without Q_T);
- ``away_control`` j: g (I − B_j B_jᵀ) for rank-r controls B_j (Haar draws from the complement
  of span(Q_T); several draws);
- ``onto_control`` j: g B_j B_jᵀ (training inside a control's span: the random-subspace
  objection, issue 36; restricting updates to *any* low-rank subspace can help, arXiv 2604.25143).

Every parameter upstream of the site that is trainable (``requires_grad``) moves; those
downstream get no gradient through the projection but still get their own (the head's loss
reaches them directly), in every arm alike. Each arm starts from its own copy of the checkpoint.
The step size is set once, from the unmodified gradient on the first training batch:
``lr = step_loss / ||∇θ L||²`` (so the unmodified arm's first step lowers the training loss by
about ``step_loss`` nats to first order, whatever the model's scale: a step small enough for the
first-order regime) and shared by every arm, so a projection that removes gradient shows as a
smaller step. The held-out loss (the causal test batches) is read before and after.

:func:`learning_arms` returns the per-batch held-out loss sums as a matrix whose columns are
``before``, ``unmodified``, ``onto``, ``away``, the controls' ``away_control`` arms and their
``onto_control`` arms; :func:`learning_rows` turns it into result rows. The verdict reads two
paired excesses, with D = held-out loss before − after (per target):

- ``learning_excess`` = mean_j D(away_control_j) − D(away): how much more the loss falls when a
  control is removed from the gradient than when Q_T is;
- ``learning_excess_onto`` = D(onto) − mean_j D(onto_control_j): how much more the loss falls
  when training inside Q_T than inside a control.

Their intervals resample the held-out batches and redraw the controls
(:func:`tangentlab.measure.paired_excess`, expanded percentile). A third, the **Haar leg**
``learning_excess_onto_haar``, compares training inside Q_T with the mean over *every* rank-r
subspace of Q_T's complement, to first order in the step. There D(P) = c₀ + tr(P A): c₀ is what
the parameters after the site learn, which no projection touches, and tr(P A) what passes
through the site. So c₀ = D(onto) + D(away) − D(unmodified), the Haar mean of D(onto C) over
rank-r subspaces C of a (d − r)-space is c₀ + r/(d − r) (D(U) − D(onto)), and
H = (D(U) − D(away)) − r/(d − r) (D(U) − D(onto)). It carries no noise of drawing the
controls; its interval resamples the held-out batches only. The drawn controls' mean does carry
that noise, and the bootstrap of a few skewed values understates it: on the planted no-effect
null (a mean gradient with no preferred direction) the onto leg's
interval lay above 0 in 2 of 12 simulations of the standard setting (8 controls). Rule:
``tangentlab.claims.rules.RULES["learning-arms"]``. To first order in the step the two excesses
are equal (D(away) + D(onto) = D(unmodified) + c₀ for orthogonal projections, below); they part
where the steps leave the first-order regime, which is where "any subspace helps" lives.

Shapes: ``Q`` (d, r); ``controls`` (m, d, r); loss sums (n_eval, 4 + 2m).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ArmLosses", "learning_arms", "learning_rows", "measure_learning_arms", "ARM_NAMES",
           "haar_complement_controls", "projector"]

#: Columns of :attr:`ArmLosses.loss_sums` before the controls' arms.
ARM_NAMES: tuple[str, ...] = ("before", "unmodified", "onto", "away")


@dataclass(frozen=True)
class ArmLosses:
    """Held-out loss sums of every arm.

    Attributes:
        loss_sums: (n_eval, 4 + 2m) summed held-out loss per batch; columns :data:`ARM_NAMES`,
            then one per control (``away_control`` j), then one per control (``onto_control`` j).
        counts: (n_eval, 4 + 2m) targets behind each sum.
        steps: SGD steps per arm.
        lr: the shared learning rate (``step_loss / ||∇θ L||²`` on the first batch).
        step_loss: the unmodified arm's first-order training-loss decrease per step (nats).
        n_params: trainable parameters.
        rank, dim: r and d of Q_T (0: not recorded; the Haar leg needs them).
    """

    loss_sums: Any
    counts: Any
    steps: int
    lr: float
    step_loss: float
    n_params: int
    rank: int = 0
    dim: int = 0

    @property
    def n_controls(self) -> int:
        """Controls (each has an away and an onto arm)."""
        return (int(self.loss_sums.shape[1]) - len(ARM_NAMES)) // 2


def haar_complement_controls(Q, n: int, seed):
    """``n`` Haar rank-r subspaces of the complement of span(Q): (n, d, r) orthonormal bases."""
    import numpy as np

    from tangentlab.errors import RankError
    from tangentlab.measure.subspace import complement_basis

    Q = np.asarray(Q, dtype=np.float64)
    d, r = Q.shape
    if d - r < r:
        raise RankError(f"a rank-{r} control needs a complement of at least {r} dimensions; "
                        f"d = {d} leaves {d - r}")
    P = complement_basis(Q)
    rng = np.random.default_rng(seed)
    out = np.empty((n, d, r))
    for j in range(n):
        B, tri = np.linalg.qr(rng.standard_normal((d - r, r)))
        out[j] = P @ (B * np.sign(np.diag(tri)))
    return out


def projector(torch, kind: str, B):
    """fn(h) -> h: identity forward; backward multiplies ∂L/∂h by the arm's projection."""
    if kind == "unmodified":
        return None

    class _Project(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h):
            return h.view_as(h)

        @staticmethod
        def backward(ctx, g):
            Bt = B.to(dtype=g.dtype, device=g.device)
            inside = (g @ Bt) @ Bt.T
            return inside if kind == "onto" else g - inside

    return _Project.apply


def _mean_loss(torch, loaded, batch):
    from tangentlab.empirical.loading.capture import token_losses

    dev = next(loaded.model.parameters()).device
    out = loaded.model(input_ids=batch.input_ids.to(dev))
    per_tok, valid = token_losses(out.logits, batch.labels.to(dev), loaded.arch)
    n = valid.sum()
    return per_tok.sum() / n.clamp(min=1), float(per_tok.detach().sum()), int(n)


def _held_out(torch, loaded, batches):
    sums, counts = [], []
    with torch.no_grad():
        for b in batches:
            _, s, n = _mean_loss(torch, loaded, b)
            sums.append(s)
            counts.append(n)
    return sums, counts


def learning_arms(lm, site: str, Q, controls, *, train_batches: Sequence, eval_batches: Sequence,
                  steps: int, step_loss: float, seed) -> ArmLosses:
    """Train every arm (module docstring) and read the held-out loss before and after.

    ``lm``: a loaded model (``.model``, ``.arch``); ``Q``: (d, r); ``controls``: (m, d, r);
    ``train_batches``: SGD batches, used in order, cycled when fewer than ``steps``;
    ``eval_batches``: the held-out batches. Deterministic for a given ``seed``.
    """
    import copy
    import dataclasses

    import numpy as np
    import torch

    from tangentlab.empirical.loading.capture import site_hooks
    from tangentlab.errors import ConfigError

    if steps < 1 or not step_loss > 0:
        raise ConfigError(f"learning arms need steps >= 1 and step_loss > 0; got steps={steps}, "
                          f"step_loss={step_loss}")
    if not train_batches or not eval_batches:
        raise ConfigError("learning arms need at least one training and one held-out batch")
    torch.manual_seed(int(np.random.default_rng(seed).integers(2**31 - 1)))
    base = lm.model
    was_training = base.training
    dt = next(base.parameters()).dtype
    arms = ([("unmodified", None), ("onto", Q), ("away", Q)] + [("away", B) for B in controls]
            + [("onto", B) for B in controls])
    before_s, before_n = _held_out(torch, lm, eval_batches)
    cols_s, cols_n = [before_s], [before_n]
    lr = None
    n_params = 0
    for kind, B in arms:
        model = copy.deepcopy(base)
        model.eval()  # no dropout: every arm sees the same function of its parameters
        arm = dataclasses.replace(lm, model=model)
        params = [p for p in model.parameters() if p.requires_grad]
        n_params = sum(p.numel() for p in params)
        if not params:
            raise ConfigError("the model has no trainable parameters for the learning arms")
        fn = projector(torch, kind, None if B is None else torch.as_tensor(
            np.asarray(B, dtype=np.float64), dtype=dt))
        edit = {site: fn} if fn is not None else {site: (lambda h: h)}
        with site_hooks(model, [site], make_leaf=False, edit=edit):
            for t in range(steps):
                batch = train_batches[t % len(train_batches)]
                model.zero_grad(set_to_none=True)
                loss, _, _ = _mean_loss(torch, arm, batch)
                loss.backward()
                if lr is None:  # the unmodified arm runs first
                    sq = float(sum((p.grad.double() ** 2).sum() for p in params
                                   if p.grad is not None))
                    lr = step_loss / sq if sq > 0 else 0.0
                with torch.no_grad():
                    for p in params:
                        if p.grad is not None:
                            p.add_(p.grad, alpha=-lr)
        s, n = _held_out(torch, arm, eval_batches)
        cols_s.append(s)
        cols_n.append(n)
        del model
    base.train(was_training)
    return ArmLosses(loss_sums=np.asarray(cols_s, dtype=np.float64).T,
                     counts=np.asarray(cols_n, dtype=np.float64).T, steps=int(steps),
                     lr=float(lr or 0.0), step_loss=float(step_loss), n_params=int(n_params),
                     rank=int(np.shape(Q)[1]), dim=int(np.shape(Q)[0]))


def learning_rows(al: ArmLosses, cfg, base) -> list[dict]:
    """Result rows of the learning arms (``cfg``: ``n_boot``, ``confidence``, ``seed``).

    ``learning_loss_decrease_{unmodified,onto,away,away_control_mean,onto_control_mean}``:
    held-out loss before − after, per target (ci: expanded percentile over held-out batch
    resamples; the controls' means also redraw the controls, band = min/max over controls);
    ``learning_excess``, ``learning_excess_onto`` and ``learning_excess_onto_haar``: the
    verdict's paired excesses (module docstring), each with ``p_value`` (two-sided),
    ``n_controls``, ``steps``, ``lr``. The Haar leg is left out where r and d are not known or
    the arms' held-out targets differ.
    """
    import numpy as np

    from tangentlab.measure import paired_excess

    m = al.n_controls
    k0 = len(ARM_NAMES)
    away_c, onto_c = list(range(k0, k0 + m)), list(range(k0 + m, k0 + 2 * m))
    # rows: 0 = away, 1 = unmodified, 2 = onto (against the away controls: only their tangent
    # part is read), 3 = onto against the onto controls. One draw of the controls serves all.
    # Row 4 (where r < d are known): onto against the Haar mean, a column of its own whose loss
    # is before - c0 - r/(d - r) (D(U) - D(onto)), c0 = D(onto) + D(away) - D(U) (what the
    # parameters after the site learn), named m times (rows are 1 + m long; a draw among equal
    # columns is that column, and the other rows' draws stay as they were); every column counts
    # the same held-out targets.
    L, N, index = al.loss_sums, al.counts, [[3] + away_c, [1] + away_c, [2] + away_c, [2] + onto_c]
    # the Haar column combines loss sums, so it needs r < d and every arm's targets equal
    haar = 0 < al.rank < al.dim and bool(np.all(N == N[:, :1]))
    if haar:
        c = al.rank / (al.dim - al.rank)
        L = np.column_stack([L, L[:, 2] + L[:, 3] - L[:, 1] - c * (L[:, 2] - L[:, 1])])
        N = np.column_stack([N, N[:, 0]])
        index.append([2] + [L.shape[1] - 1] * m)
    res = paired_excess(L, N, np.array(index), np.zeros(len(index)), n_boot=cfg.n_boot,
                        confidence=cfg.confidence, seed=[cfg.seed, 37], clean=0)
    nb = al.loss_sums.shape[0]
    kw = {"bucket": "all", "n": int(al.counts[:, 0].sum()), "n_batches": nb, "steps": al.steps,
          "lr": al.lr, "step_loss": al.step_loss, "n_controls": m}
    f = float
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = al.loss_sums.sum(0) / al.counts.sum(0)
    dec_away, dec_onto = loss[0] - loss[away_c], loss[0] - loss[onto_c]
    rows = [
        base.row("learning_loss_before", f(loss[0]), **kw),
        # res rows: 0 = away, 1 = unmodified, 2 = onto (tangent = that arm; control = controls)
        base.row("learning_loss_decrease_unmodified", -f(res.tangent[1]), ci_low=-f(res.tangent_hi[1]),
                 ci_high=-f(res.tangent_lo[1]), **kw),
        base.row("learning_loss_decrease_onto", -f(res.tangent[2]), ci_low=-f(res.tangent_hi[2]),
                 ci_high=-f(res.tangent_lo[2]), **kw),
        base.row("learning_loss_decrease_away", -f(res.tangent[0]), ci_low=-f(res.tangent_hi[0]),
                 ci_high=-f(res.tangent_lo[0]), **kw),
        base.row("learning_loss_decrease_away_control_mean", -f(res.control[0]),
                 ci_low=-f(res.control_hi[0]), ci_high=-f(res.control_lo[0]),
                 band_low=f(dec_away.min()), band_high=f(dec_away.max()), **kw),
        base.row("learning_loss_decrease_onto_control_mean", -f(res.control[3]),
                 ci_low=-f(res.control_hi[3]), ci_high=-f(res.control_lo[3]),
                 band_low=f(dec_onto.min()), band_high=f(dec_onto.max()), **kw),
        base.row("learning_excess", f(res.excess[0]), ci_low=f(res.excess_lo[0]),
                 ci_high=f(res.excess_hi[0]), p_value=f(res.p_value[0]), **kw),
        # excess = increase(onto Q_T) - increase(onto controls) = D(controls) - D(onto): negated
        base.row("learning_excess_onto", -f(res.excess[3]), ci_low=-f(res.excess_hi[3]),
                 ci_high=-f(res.excess_lo[3]), p_value=f(res.p_value[3]), **kw),
    ]
    if haar:  # D(onto Q_T) - the Haar mean: negated as the onto leg is
        rows.append(base.row("learning_excess_onto_haar", -f(res.excess[4]),
                             ci_low=-f(res.excess_hi[4]), ci_high=-f(res.excess_lo[4]),
                             p_value=f(res.p_value[4]), **kw))
    return rows


def measure_learning_arms(lm, site: str, Q, eval_data, cfg, base) -> list[dict]:
    """The learning-arms rows of one (checkpoint, site), as ``measure`` runs them.

    Trains on the fit half's batches (in order), reads the held-out loss on the test half's
    batches (the causal check's), with ``cfg.learning_controls`` Haar complement controls of
    ``Q`` and ``cfg.learning_steps`` steps at ``cfg.learning_step_loss``. When no rank-r control
    exists (d < 2r) the rows are NaN with a note saying why. ``Q`` is the fixed proxy, so the
    rows carry ``proxy="fixed"``, as the causal check's do.
    """
    from tangentlab.errors import RankError

    base = base.with_(proxy="fixed")

    try:
        controls = haar_complement_controls(Q, cfg.learning_controls, [cfg.seed, 41])
    except RankError as e:
        return [base.row(name, None, note=f"no learning arms: {e}") for name in (
            "learning_excess", "learning_excess_onto", "learning_loss_decrease_unmodified")]
    al = learning_arms(lm, site, Q, controls, train_batches=eval_data.fit_batches,
                       eval_batches=eval_data.test_batches, steps=cfg.learning_steps,
                       step_loss=cfg.learning_step_loss, seed=[cfg.seed, 43])
    return learning_rows(al, cfg, base)

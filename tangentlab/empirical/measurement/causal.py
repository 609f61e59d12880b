"""The causal check's forward passes: the loss under ablation and steering edits at one site.

Same rows and positions for matching and ablation (issue 18): :func:`edit_positions` marks the
positions an edit touches (the site's rows: real tokens, for a decoder not the last position;
never a position of ``exclude_positions``, the positions Q_T was fitted without).
:func:`ablated_moments` takes the mean and covariance of exactly those positions on the causal
test batches (one clean forward pass each); the controls are matched on that covariance, the
ablation fills with that mean, and :func:`causal_losses` edits only those positions.

Variants (:func:`build_variants`), in order:

1. clean (no edit);
2. mean-ablation of span(Q) (the tangent proxy), full strength;
3. mean-ablation of each *complement* control (Haar rank-r subspaces of span(Q)'s complement);
4. the dose plan (:func:`tangentlab.measure.causal_controls.dose_plan`): at each dose level,
   Q_T and ``n_controls`` spectrum-weighted rank-r complement controls, each ablated at the
   strength that removes exactly the level's variance; then the same controls at the strengths
   that displace the rows by the same mean squared distance (``match="displacement"``); then
   the same controls matched on *both* (``match="both"``: a shrink plus noise inside the edited
   subspace, so every edit removes the level's variance and moves the rows by the same mean
   squared distance; the verdict reads this one). The noise of a row is scaled by the row's own
   scale (its whitened norm, mean square 1), so it follows the rows' scale profile as the
   shrink and a full ablation do: with heavy-tailed rows, matching the mean displacement then
   also matches how it is spread over rows (issue 33);
5. for each step size α: a shift by α·rms along Q's first direction, then along each complement
   control's first direction.

Every variant's basis is zero-padded to rank r (a zero column edits nothing). The activation
variance an edit removes is computed exactly for the edit as applied,
:func:`tangentlab.measure.removed_variance` (tr Σ − tr((I − BBᵀ)Σ(I − BBᵀ))), with Σ the
covariance of the edited positions. The rows are built by :func:`causal_rows`. The second
causal test, training inside and outside Q_T, is :mod:`tangentlab.empirical.measurement.learning_arms`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CausalLosses", "Variants", "ablated_moments", "build_variants", "causal_losses",
           "causal_rows", "edit_positions", "pad_bases", "NO_MATCH_NOTE", "EXTRAPOLATED_NOTE",
           "DOSE_CONTROLS"]


@dataclass(frozen=True)
class Variants:
    """The stacked edits of one causal check (module docstring for the order).

    Attributes:
        bases: (K, d, r) ablation bases (scaled by sqrt(strength); zeros = no ablation).
        shifts: (K, d) constant shifts (steering).
        removed_variance: (K,) variance each edit removes from the edited positions.
        index_tangent: column of Q_T's full ablation; ``index_complement`` (m,) the complement
            controls' columns; ``index_dose`` (L, 1 + n) the dose plan's columns (Q_T first;
            shape (0, 0) when no plan could be built); ``index_steer``: per step size,
            (tangent column, controls' columns (m,)).
        plan: the :class:`~tangentlab.measure.causal_controls.DosePlan` (None when none).
        displacement_plan, index_displacement: the same controls matched on displacement
            (mean squared distance the edit moves the rows) instead of removed variance.
        both_plan, index_both: the same controls matched on both (the verdict's plan).
        noise: (K, d, r) noise bases (zeros except in ``both_plan``'s columns).
        whiten: (d, d) ``Σ^{-1/2}`` of the edited positions: the noise is scaled per row by the
            row's own scale, its whitened norm
            (:func:`tangentlab.empirical.loading.capture.edit_activations`).
        plan_note: why there is no plan ('' when there is one).
        steer_sizes: the step sizes α.
    """

    bases: Any
    shifts: Any
    removed_variance: Any
    index_tangent: int
    index_complement: Any
    index_dose: Any
    index_steer: tuple
    plan: Any
    plan_note: str
    steer_sizes: tuple
    displacement_plan: Any = None
    index_displacement: Any = None
    both_plan: Any = None
    index_both: Any = None
    noise: Any = None
    whiten: Any = None


@dataclass(frozen=True)
class CausalLosses:
    """Per-batch loss sums of every edit variant, and where each variant sits.

    Attributes:
        loss_sums: (n_batches, K) summed loss; ``counts`` (n_batches, K) targets.
        variants: the :class:`Variants` that produced the columns.
        n_rows: edited positions the moments were taken on.
        exclude_positions: positions left unedited (and out of the moments).
    """

    loss_sums: Any
    counts: Any
    variants: Variants
    n_rows: int = 0
    exclude_positions: tuple = ()

    # the former flat fields, read by the metric rows
    @property
    def removed_variance(self):
        """(K,) variance each edit removes (0 for clean and steering)."""
        return self.variants.removed_variance

    @property
    def index_tangent(self) -> int:
        """Column of Q_T's full-strength ablation."""
        return self.variants.index_tangent

    @property
    def index_complement(self):
        """(m,) columns of the complement controls."""
        return self.variants.index_complement

    @property
    def index_steer(self) -> tuple:
        """Per step size, (tangent column, controls' columns)."""
        return self.variants.index_steer

    @property
    def steer_sizes(self) -> tuple:
        """The steering step sizes α."""
        return self.variants.steer_sizes


def pad_bases(bases: Sequence[Any], r_max: int):
    """Stack bases (each (d, r_i), r_i ≤ r_max) into (K, d, r_max), zero-padding the columns."""
    import numpy as np

    d = np.asarray(bases[0]).shape[0]
    out = np.zeros((len(bases), d, r_max))
    for i, B in enumerate(bases):
        B = np.asarray(B, dtype=np.float64)
        out[i, :, : B.shape[1]] = B
    return out


def edit_positions(shape: tuple[int, int], arch: str, exclude_positions: Sequence[int] = ()):
    """(B, T) bool: the positions an edit touches and the moments are taken on.

    The site's rows (every position; for a decoder not the last one, which has no target) minus
    ``exclude_positions`` (taken modulo T, as the row plan does).
    """
    import torch

    B, T = shape
    mask = torch.ones((B, T), dtype=torch.bool)
    if arch == "decoder":
        mask[:, -1] = False
    for p in exclude_positions:
        mask[:, int(p) % T] = False
    return mask


def ablated_moments(acts_batches: Sequence[Any], masks: Sequence[Any]):
    """Mean (d,), covariance (d, d) (float64, divisor n) and count n of the masked rows.

    ``acts_batches``: activations (B, T, d) per batch; ``masks``: (B, T) bool per batch.
    """
    import numpy as np

    from tangentlab.errors import InsufficientSamplesError

    n, s, ss = 0, None, None
    for H, M in zip(acts_batches, masks):
        X = np.asarray(H, dtype=np.float64)[np.asarray(M, dtype=bool)]
        if s is None:
            s, ss = np.zeros(X.shape[1]), np.zeros((X.shape[1], X.shape[1]))
        n += X.shape[0]
        s += X.sum(0)
        ss += X.T @ X
    if n < 2:
        raise InsufficientSamplesError(f"the causal check needs at least 2 edited positions, got {n}")
    mu = s / n
    cov = ss / n - np.outer(mu, mu)
    return mu, (cov + cov.T) / 2, n


def build_variants(Q, complement, cov, *, rms: float, steer_sizes: Sequence[float],
                   n_controls: int, seed) -> Variants:
    """The stacked edits (module docstring) for basis ``Q`` (d, r) and complement controls (m, d, r).

    ``cov``: (d, d) covariance of the edited positions (:func:`ablated_moments`); ``rms``: the
    steering unit; ``n_controls``, ``seed``: the dose plan's controls.
    """
    import numpy as np

    from tangentlab.empirical.loading.capture import row_scale_whitener
    from tangentlab.errors import RankError
    from tangentlab.measure import removed_variance
    from tangentlab.measure.causal_controls import dose_plan

    Q = np.asarray(Q, dtype=np.float64)
    d, r = Q.shape
    complement = list(np.asarray(complement, dtype=np.float64))
    try:
        plan, note = dose_plan(Q, cov, n_controls, seed), ""
        shift = dose_plan(Q, cov, n_controls, seed, controls=plan.controls, match="displacement")
        both = dose_plan(Q, cov, n_controls, seed, controls=plan.controls, match="both")
    except RankError as e:
        plan, shift, both, note = None, None, None, str(e)
    bases = [np.zeros((d, r)), Q] + complement
    noise = [np.zeros((d, r))] * len(bases)
    m = len(complement)

    def add(p):
        if p is None:
            return np.zeros((0, 0), dtype=np.int64)
        flat = list(p.flat_bases())
        i0 = len(bases)
        bases.extend(flat)
        noise.extend(list(p.flat_noise()))
        return i0 + np.arange(len(flat)).reshape(p.bases.shape[:2])

    index_dose, index_shift, index_both = add(plan), add(shift), add(both)
    shifts = [np.zeros(d)] * len(bases)
    index_steer = []
    for alpha in steer_sizes:
        i0 = len(bases)
        for S in [Q] + complement:
            bases.append(np.zeros((d, r)))
            noise.append(np.zeros((d, r)))
            shifts.append(alpha * rms * S[:, 0])
        index_steer.append((i0, np.arange(i0 + 1, i0 + 1 + m)))
    B, N = pad_bases(bases, r), pad_bases(noise, r)
    rv = np.asarray(removed_variance(B, cov), dtype=np.float64)
    rv = rv - np.einsum("kdr,kdr->k", N, N)  # added noise inside span(B) adds variance back
    return Variants(bases=B, shifts=np.stack(shifts), removed_variance=rv,
                    index_tangent=1, index_complement=np.arange(2, 2 + m), index_dose=index_dose,
                    index_steer=tuple(index_steer), plan=plan, plan_note=note,
                    displacement_plan=shift, index_displacement=index_shift,
                    both_plan=both, index_both=index_both, noise=N,
                    whiten=row_scale_whitener(cov),
                    steer_sizes=tuple(float(a) for a in steer_sizes))


def _masked_losses(lm, site: str, input_ids, labels, *, bases, shifts, mu, mask,
                   max_batch: int = 64, noise=None, noise_seed: int = 0, whiten=None):
    """Summed loss (K,) and targets (K,) of the batch under K edits applied where ``mask`` is true.

    Variant k replaces h by ``h − ((h − mu) B_k) B_kᵀ + shift_k`` at the masked positions and
    leaves the others unchanged (:func:`tangentlab.empirical.loading.capture.edited_losses`).
    """
    from tangentlab.empirical.loading.capture import edited_losses

    return edited_losses(lm, site, input_ids, labels, bases=bases, shifts=shifts, mu=mu,
                         mask=mask, max_batch=max_batch, noise=noise, noise_seed=noise_seed,
                         whiten=whiten)


def causal_losses(lm, site: str, Q, complement, *, rms: float, batches: Sequence,
                  steer_sizes: Sequence[float], n_controls: int, seed,
                  exclude_positions: Sequence[int] = ()) -> CausalLosses:
    """Loss of every edit variant (module docstring) on each of ``batches`` (EvalBatch records).

    ``Q``: (d, r) tangent basis; ``complement``: (m, d, r) complement controls; ``rms``: RMS
    activation norm at the site (the steering unit); ``n_controls``, ``seed``: the dose plan's
    controls; ``exclude_positions``: positions neither edited nor in the moments.
    """
    import numpy as np

    from tangentlab.empirical.loading.capture import capture_batch

    masks, acts = [], []
    for batch in batches:
        mk = edit_positions(tuple(batch.input_ids.shape), lm.arch, exclude_positions)
        cb = capture_batch(lm, [site], batch.input_ids, grads=False)
        acts.append(next(iter(cb.acts.values())).double().cpu().numpy())
        masks.append(mk.numpy())
    mu, cov, n = ablated_moments(acts, masks)
    del acts
    var = build_variants(Q, complement, cov, rms=rms, steer_sizes=steer_sizes,
                         n_controls=n_controls, seed=seed)
    import zlib

    L, N = [], []
    has_noise = bool(np.any(var.noise))
    base_seed = zlib.crc32(repr(seed).encode())
    for i, (batch, mk) in enumerate(zip(batches, masks)):
        lsum, cnt = _masked_losses(lm, site, batch.input_ids, batch.labels, bases=var.bases,
                                   shifts=var.shifts, mu=mu, mask=mk,
                                   noise=var.noise if has_noise else None,
                                   noise_seed=(base_seed + 7919 * i) % (2**31 - 1),
                                   whiten=var.whiten)
        L.append(lsum)
        N.append(cnt)
    return CausalLosses(loss_sums=np.stack(L).astype(np.float64),
                        counts=np.stack(N).astype(np.float64), variants=var, n_rows=int(n),
                        exclude_positions=tuple(int(p) for p in exclude_positions))


#: The note on the dose rows when no matched dose plan could be built.
NO_MATCH_NOTE = ("no rank- and variance-matched dose plan: a rank-r control needs d >= 2r and "
                 "some activation variance along it")

#: The note on the extrapolated reading of the controls' dose-response at Q_T's full ablation.
EXTRAPOLATED_NOTE = ("the controls' dose-response (quadratic through the origin) read at Q_T's "
                     "full removed variance, beyond the largest dose any control reaches: a "
                     "description, not a verdict")

def _percentile_ci(reps, confidence: float) -> tuple[float, float]:
    import numpy as np

    reps = np.asarray(reps, dtype=np.float64)
    reps = reps[np.isfinite(reps)]
    if reps.size < 2:
        return float("nan"), float("nan")
    a = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return float(lo), float(hi)


def causal_rows(cl, cfg, base) -> list[dict]:
    """Rows of the causal check from :class:`~tangentlab.empirical.measurement.causal.CausalLosses`.

    Loss increases (per target) over the clean loss for the tangent and the complement controls
    (percentile intervals over the test batches, controls held fixed: descriptions); the
    activation variance each edit removes (on the edited positions); the steering rows; and the
    dose-response rows the verdict reads (:func:`tangentlab.measure.paired_excess`): at each dose
    level, Q_T and the rank- and variance-matched controls, and the paired excess with an
    expanded percentile interval whose replicates resample the batches and redraw the controls.
    ``ablation_excess`` (the largest dose) decides. Control spreads (min–max) go to
    ``band_low``/``band_high``.
    """
    import numpy as np

    from tangentlab.measure import curve_at, paired_excess

    L, Nt = cl.loss_sums, cl.counts  # (nb, K)
    nb = L.shape[0]

    def increases(w):  # w: (R, nb) batch weights -> (R, K) loss increase of each variant
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = (w @ L) / (w @ Nt)
        return loss - loss[:, :1]

    point = increases(np.ones((1, nb)))[0]
    rng = np.random.default_rng([cfg.seed, 23])
    W = np.stack([np.bincount(rng.integers(0, nb, size=nb), minlength=nb)
                  for _ in range(cfg.n_boot)]).astype(np.float64) if nb >= 2 else None
    reps = increases(W) if W is not None else None
    t, comp = cl.index_tangent, cl.index_complement
    kw = {"bucket": "all", "n": int(Nt[:, 0].sum()), "n_batches": nb}
    excl = ",".join(str(p) for p in cl.exclude_positions)

    def stat(f, name, **extra):
        v = float(f(point[None])[0])
        lo, hi = (_percentile_ci(f(reps), cfg.confidence) if reps is not None
                  else (float("nan"), float("nan")))
        return base.row(name, v, ci_low=lo, ci_high=hi, **kw, **extra)

    rv = cl.removed_variance  # (K,) for every variant (0 for clean and steering)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_var = point / rv
    clean = float((L[:, 0].sum()) / Nt[:, 0].sum())
    rows = [
        base.row("causal_loss_clean", clean, **kw),
        base.row("causal_edited_rows", float(cl.n_rows), exclude_positions=excl, **kw),
        stat(lambda x: x[:, t], "ablation_loss_tangent"),
        stat(lambda x: x[:, comp].mean(axis=1), "ablation_loss_control_mean",
             band_low=float(point[comp].min()), band_high=float(point[comp].max()),
             controls="complement"),
    ]
    rows += _dose_rows(cl, cfg, base, kw, point, paired_excess, curve_at)
    rows += [
        base.row("removed_variance_tangent", float(rv[t]), **kw),
        base.row("removed_variance_control_mean", float(rv[comp].mean()),
                 band_low=float(rv[comp].min()), band_high=float(rv[comp].max()), **kw),
        base.row("ablation_loss_per_variance_tangent", float(per_var[t]), **kw),
        base.row("ablation_loss_per_variance_control_mean", float(per_var[comp].mean()),
                 band_low=float(per_var[comp].min()), band_high=float(per_var[comp].max()), **kw),
    ]
    for alpha, (st_t, st_c) in zip(cl.steer_sizes, cl.index_steer):
        rows += [
            stat(lambda x, i=st_t: x[:, i], "steer_loss_tangent", step_size=float(alpha)),
            stat(lambda x, i=st_c: x[:, i].mean(axis=1), "steer_loss_control_mean",
                 band_low=float(point[st_c].min()), band_high=float(point[st_c].max()),
                 step_size=float(alpha)),
        ]
    return rows


#: The controls behind the dose rows (recorded in the rows' ``controls`` column).
DOSE_CONTROLS = "rank- and variance-matched (spectrum-weighted complement, partial ablation)"


def _excess_rows(base, d, top: int, excess: str, control: str, **keys) -> list[dict]:
    """The paired excess and the matched controls' mean loss increase at dose index ``top``.

    ``d`` is one match's bootstrap read; the excess row carries its p-value, the control row the
    controls' range as its band.
    """
    return [base.row(excess, d.excess[top], ci_low=d.excess_lo[top], ci_high=d.excess_hi[top],
                     p_value=d.p_value[top], **keys),
            base.row(control, d.control[top], ci_low=d.control_lo[top], ci_high=d.control_hi[top],
                     band_low=d.control_min[top], band_high=d.control_max[top], **keys)]


def _dose_rows(cl, cfg, base, kw: dict, point, paired_excess, curve_at) -> list[dict]:
    """The dose-response rows and the verdict's ``ablation_excess`` (see :func:`causal_rows`)."""
    from types import SimpleNamespace

    import numpy as np

    var = cl.variants
    names = ("ablation_excess", "ablation_loss_matched_mean", "ablation_loss_tangent_matched",
             "removed_variance_matched", "ablation_strength_tangent",
             "ablation_control_curve_at_tangent", "ablation_excess_extrapolated",
             "ablation_excess_displacement", "ablation_loss_matched_displacement_mean",
             "ablation_excess_both", "ablation_loss_matched_both_mean",
             "ablation_loss_tangent_both")
    if var.plan is None or not np.size(var.index_dose):
        return [base.row(m, None, note=f"{NO_MATCH_NOTE}: {var.plan_note}",
                         controls=DOSE_CONTROLS, **kw) for m in names]
    plan = var.plan

    def read(index, targets):  # plain floats (a numpy scalar would be written as its repr)
        res = paired_excess(cl.loss_sums, cl.counts, index, targets, n_boot=cfg.n_boot,
                            confidence=cfg.confidence, seed=[cfg.seed, 29])
        return SimpleNamespace(n_controls=int(res.n_controls), **{
            k: [float(x) for x in getattr(res, k)] for k in (
                "tangent", "tangent_lo", "tangent_hi", "control", "control_lo", "control_hi",
                "control_min", "control_max", "excess", "excess_lo", "excess_hi", "p_value")})

    dr = read(var.index_dose, plan.targets)
    rows = []
    for i, level in enumerate(plan.levels):
        lk = {"dose_level": float(level), "removed_variance": float(plan.targets[i]),
              "strength_tangent": float(plan.strengths[i, 0]), "controls": DOSE_CONTROLS}
        rows += [
            base.row("ablation_dose_loss_tangent", dr.tangent[i], ci_low=dr.tangent_lo[i],
                     ci_high=dr.tangent_hi[i], **kw, **lk),
            base.row("ablation_dose_loss_control_mean", dr.control[i], ci_low=dr.control_lo[i],
                     ci_high=dr.control_hi[i], band_low=dr.control_min[i],
                     band_high=dr.control_max[i], **kw, **lk),
            base.row("ablation_dose_excess", dr.excess[i], ci_low=dr.excess_lo[i],
                     ci_high=dr.excess_hi[i], p_value=dr.p_value[i], **kw, **lk),
        ]
    top = len(plan.levels) - 1
    tk = {"dose_level": float(plan.levels[top]), "removed_variance": float(plan.targets[top]),
          "controls": DOSE_CONTROLS, "n_controls": dr.n_controls, "interval": "bootstrap"}
    v_t = float(plan.full_variance[0])
    curve = curve_at(plan.targets, dr.control, v_t)
    rows += [
        *_excess_rows(base, dr, top, "ablation_excess", "ablation_loss_matched_mean", **kw, **tk),
        base.row("ablation_loss_tangent_matched", dr.tangent[top], ci_low=dr.tangent_lo[top],
                 ci_high=dr.tangent_hi[top], strength=float(plan.strengths[top, 0]), **kw, **tk),
        base.row("removed_variance_matched", float(plan.targets[top]),
                 band_low=float(plan.removed_variance[top].min()),
                 band_high=float(plan.removed_variance[top].max()), **kw),
        base.row("ablation_strength_tangent", float(plan.strengths[top, 0]),
                 band_low=float(plan.strengths[top, 1:].min()),
                 band_high=float(plan.strengths[top, 1:].max()), **kw),
        base.row("ablation_control_curve_at_tangent", curve, removed_variance=v_t,
                 note=EXTRAPOLATED_NOTE, **kw),
        base.row("ablation_excess_extrapolated", float(point[var.index_tangent]) - curve,
                 removed_variance=v_t, note=EXTRAPOLATED_NOTE, **kw),
    ]
    sp = var.displacement_plan
    if sp is not None and np.size(var.index_displacement):
        ds = read(var.index_displacement, sp.targets)
        dk = dict(tk, match="displacement", displacement=float(sp.targets[top]),
                  strength=float(sp.strengths[top, 0]))
        dk.pop("removed_variance")
        rows += _excess_rows(base, ds, top, "ablation_excess_displacement",
                             "ablation_loss_matched_displacement_mean", **kw, **dk)
    bp = var.both_plan
    if bp is not None and np.size(var.index_both):
        db = read(var.index_both, bp.targets)
        bk = dict(tk, match="both", strength=float(bp.strengths[top, 0]))
        rows += [
            *_excess_rows(base, db, top, "ablation_excess_both", "ablation_loss_matched_both_mean",
                          **kw, **bk),
            base.row("ablation_loss_tangent_both", db.tangent[top], ci_low=db.tangent_lo[top],
                     ci_high=db.tangent_hi[top], **kw, **bk),
        ]
    return rows

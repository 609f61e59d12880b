"""Causal controls matched to Q_T on rank *and* removed variance, and the paired dose-response excess.

Why a new construction (issue 18): a PCA proxy Q_T of rank r is the rank-r subspace whose
mean-ablation removes the most activation variance, so no other rank-r subspace removes as much.
Controls from the complement of span(Q_T) then need many more directions than r (32-367 for a
rank-8 Q_T), and for a steep spectrum (1/i at d = 128, a rogue dimension) the whole complement
holds less variance than Q_T: no such control exists. Full-space controls that approach Q_T's
variance approach Q_T itself.

The construction here matches *both* edits instead of only the control:

- **Controls:** rank-r subspaces of the complement of span(Q_T), drawn with a spectrum-weighted
  (importance) draw ``B = orth(P S_c^{1/2} G)`` (P the complement basis, ``S_c = P^T Sigma P``,
  G a Gaussian ``(d - r, r)`` matrix): random, rank r, disjoint from Q_T, biased toward the
  complement's high-variance directions so that they remove more variance than Haar controls.
  They exist for every spectrum whenever ``d >= 2r``.
- **Partial ablation:** mean-ablation at strength s in (0, 1] along an orthonormal basis B,
  ``h' = h - s ((h - mu) B) B^T``, removes ``(2s - s^2) tr(B^T Sigma B)`` of variance (and equals
  the ordinary mean-ablation along ``sqrt(s) B``, so :func:`removed_variance` of the scaled basis
  is exact). Any variance up to ``tr(B^T Sigma B)`` is reached exactly by
  :func:`strength_for`.
- **Dose grid:** ``v_max = min(tr(Q^T Sigma Q), min_j tr(B_j^T Sigma B_j))`` is the largest
  variance every edit can remove. At each level a of :data:`DOSE_LEVELS`, Q_T and every control
  are ablated at the strengths that remove exactly ``a v_max``: same rank, same removed variance,
  so a loss that depends on removed variance only, by any function (linear, convex, concave),
  gives the same loss increase to Q_T and to the controls at every level.

:func:`paired_excess` reads the loss increases of that plan: at each level, the excess = Q_T's
increase minus the controls' mean increase at the same removed variance, with an interval whose
replicates resample the test batches and redraw the controls (expanded percentile,
Hesterberg 2015). :func:`curve_at` fits the controls' dose-response (a quadratic through the
origin) and reads it at any removed variance (e.g. Q_T's full ablation: an extrapolation, shown
only as a description).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.causal_controls import dose_plan
    >>> cov = np.diag(1.0 / np.arange(1, 129))          # a 1/i spectrum at d = 128
    >>> Q = np.eye(128)[:, :8]                           # the top-8 PCA subspace
    >>> plan = dose_plan(Q, cov, n_controls=5, seed=0)
    >>> bool(np.allclose(plan.removed_variance, plan.targets[:, None]))   # matched at every dose
    True
    >>> plan.bases.shape                                 # (levels, Q_T + 5 controls, d, r)
    (2, 6, 128, 8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import RankError, ShapeError, ValidationError
from tangentlab.measure._validate import as_basis, as_moment, check_positive_int, to_float64
from tangentlab.typing import ArrayLike, Seed

__all__ = [
    "DOSE_LEVELS",
    "spectrum_weighted_controls",
    "strength_for",
    "DosePlan",
    "dose_plan",
    "displacement",
    "DoseResponse",
    "paired_excess",
    "curve_at",
]

#: Fractions of ``v_max`` (the largest variance every edit can remove) at which Q_T and the
#: controls are ablated; the verdict reads the last (largest) level.
DOSE_LEVELS: tuple[float, ...] = (0.5, 1.0)


def _removed(B: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``2 tr(B^T S B) - tr(B^T B B^T S B)`` for a stack ``(n, d, k)``."""
    SB = np.einsum("ij,njk->nik", S, B)
    BtSB = np.einsum("nik,nil->nkl", B, SB)
    BtB = np.einsum("nik,nil->nkl", B, B)
    return 2 * np.einsum("nkk->n", BtSB) - np.einsum("nkl,nlk->n", BtB, BtSB)


def spectrum_weighted_controls(Q: ArrayLike, cov: ArrayLike, n: int, seed: Seed) -> np.ndarray:
    """``n`` rank-r controls in the complement of span(Q), drawn as ``orth(P S_c^{1/2} G)``.

    Args:
        Q: ``(d, r)`` orthonormal basis.
        cov: ``(d, d)`` covariance of the rows the ablation edits.
        n: number of controls.
        seed: seed of the Gaussian draws.

    Returns ``(n, d, r)`` orthonormal bases, each orthogonal to Q. Raises RankError when the
    complement has fewer than r dimensions (``d < 2r``).
    """
    from tangentlab.measure.subspace import complement_basis

    S = as_moment(cov, name="cov")
    d = S.shape[0]
    Q = as_basis(Q, d=d)
    r = Q.shape[1]
    n = check_positive_int(n, "n")
    if d - r < r:
        raise RankError(f"a rank-{r} control needs a complement of at least {r} dimensions; "
                        f"d = {d} leaves {d - r}: use a rank of at most {d // 2}")
    P = complement_basis(Q)  # (d, d - r)
    w, U = np.linalg.eigh(P.T @ S @ P)
    half = (U * np.sqrt(np.clip(w, 0.0, None))) @ U.T
    rng = np.random.default_rng(seed)
    out = np.empty((n, d, r))
    for j in range(n):
        M = half @ rng.standard_normal((d - r, r))
        if np.linalg.matrix_rank(M) < r:  # a degenerate spectrum: fall back to a Haar draw
            M = rng.standard_normal((d - r, r))
        B, tri = np.linalg.qr(M)
        out[j] = P @ (B * np.sign(np.diag(tri)))
    return out


def strength_for(target: float, full: float) -> float:
    """The strength s in [0, 1] with ``(2s - s^2) full = target`` (``full`` > 0, target <= full)."""
    if not full > 0:
        raise ValidationError(f"the edit's full removed variance must be > 0, got {full!r}")
    f = min(max(float(target) / float(full), 0.0), 1.0)
    return 1.0 - math.sqrt(1.0 - f)


@dataclass(frozen=True)
class DosePlan:
    """Q_T and its controls at matched doses of removed variance.

    Attributes:
        levels: ``(L,)`` the dose levels (fractions of ``v_max``).
        targets: ``(L,)`` removed variance at each level (``levels * v_max``).
        bases: ``(L, 1 + m, d, r)``: at level l, entry 0 is ``sqrt(s) Q`` and entry 1 + j is
            ``sqrt(s_j) B_j`` (mean-ablation along a scaled basis = ablation at strength s).
        strengths: ``(L, 1 + m)`` the strengths s.
        removed_variance: ``(L, 1 + m)`` the variance each edit removes (equal along a row for a
            variance match).
        match: ``"variance"``, ``"displacement"`` or ``"both"`` (what the edits equalise).
        controls: ``(m, d, r)`` the controls at full strength.
        full_variance: ``(1 + m,)`` ``tr(B^T Sigma B)`` of Q_T and of each control.
        v_max: the largest variance every edit can remove.
        noise: ``(L, 1 + m, d, r)`` for ``match="both"``: the noise bases N (each edit adds
            ``z N^T`` with z a standard normal r-vector per row); None otherwise.
    """

    levels: np.ndarray
    targets: np.ndarray
    bases: np.ndarray
    strengths: np.ndarray
    removed_variance: np.ndarray
    controls: np.ndarray
    full_variance: np.ndarray
    v_max: float
    match: str = "variance"
    noise: np.ndarray | None = None

    def flat_bases(self) -> np.ndarray:
        """The plan's bases as one stack ``(L (1 + m), d, r)``, level by level."""
        L, k, d, r = self.bases.shape
        return self.bases.reshape(L * k, d, r)

    def flat_noise(self) -> np.ndarray:
        """The noise bases as one stack ``(L (1 + m), d, r)`` (zeros when the plan adds none)."""
        if self.noise is None:
            return np.zeros_like(self.flat_bases())
        L, k, d, r = self.noise.shape
        return self.noise.reshape(L * k, d, r)

    def to_dict(self) -> dict[str, Any]:
        """Summary for JSON (bases left out)."""
        return {"levels": self.levels.tolist(), "targets": self.targets.tolist(),
                "strengths": self.strengths.tolist(), "full_variance": self.full_variance.tolist(),
                "v_max": self.v_max}


def dose_plan(Q: ArrayLike, cov: ArrayLike, n_controls: int, seed: Seed, *,
              levels: tuple[float, ...] = DOSE_LEVELS, controls: ArrayLike | None = None,
              match: str = "variance") -> DosePlan:
    """Q_T and ``n_controls`` rank-r controls ablated at matched doses (module docstring).

    Args:
        Q: ``(d, r)`` orthonormal basis of Q_T.
        cov: ``(d, d)`` covariance of the rows the ablation edits (the same rows and positions).
        n_controls: number of controls (:func:`spectrum_weighted_controls`).
        seed: seed of the controls.
        levels: dose levels in (0, 1], increasing.
        controls: optional ``(m, d, r)`` orthonormal controls to use instead of drawing them.
        match: ``"variance"``: each edit removes exactly the level's variance,
            ``(2s - s^2) tr(B^T Sigma B)``; ``"displacement"``: each edit moves the rows by the
            same mean squared distance, ``E||dh||^2 = s^2 tr(B^T Sigma B)`` (s = sqrt(target /
            full)). A partial ablation removes more variance than it displaces, so the two
            matches differ. ``"both"``: each edit removes the level's variance v *and*
            displaces the rows by the same mean squared distance v: shrink along B at strength
            ``s = v / F`` (F = ``tr(B^T Sigma B)``) and add noise ``z N^T`` inside span(B) with
            covariance ``(n / F) B B^T Sigma B B^T``, ``n = v (1 - v / F)``; then the edited
            rows' covariance along B is ``(1 - v / F)`` times the clean one and the displacement
            covariance is ``(v / F) B B^T Sigma B B^T``, the shape of a full ablation. A
            control at ``v = F`` is fully ablated (no noise). The verdict reads this match: a
            loss that depends on removed variance only, on displacement only, or on both, by
            any function, gives Q_T and the controls the same expected increase.

    Raises RankError when no edit can remove any variance (a zero covariance on the controls).
    """
    S = as_moment(cov, name="cov")
    d = S.shape[0]
    Q = as_basis(Q, d=d)
    r = Q.shape[1]
    lv = np.asarray(levels, dtype=np.float64).ravel()
    if lv.size < 1 or not (np.all(lv > 0) and np.all(lv <= 1) and np.all(np.diff(lv) > 0)):
        raise ValidationError(f"levels must be increasing fractions in (0, 1], got {levels!r}")
    if controls is None:
        C = spectrum_weighted_controls(Q, S, n_controls, seed)
    else:
        C = to_float64(controls, "controls")
        if C.ndim != 3 or C.shape[1:] != (d, r):
            raise ShapeError(f"controls must be (m, {d}, {r}); got {C.shape}")
    full = np.concatenate([[float(np.sum(Q * (S @ Q)))],
                           np.einsum("ndk,ndk->n", C, np.einsum("ij,njk->nik", S, C))])
    v_max = float(full.min())
    if not v_max > 0:
        raise RankError(f"an edit removes no activation variance (full variances {full.tolist()}): "
                        "the rows hold no variance along a control or along Q")
    targets = lv * v_max
    every = np.concatenate([Q[None], C])  # (1 + m, d, r)
    if match not in ("variance", "displacement", "both"):
        raise ValidationError(f"match must be 'variance', 'displacement' or 'both', got {match!r}")
    noise = None
    if match == "variance":
        strengths = np.array([[strength_for(t, v) for v in full] for t in targets])
    elif match == "displacement":
        strengths = np.sqrt(np.clip(targets[:, None] / full[None, :], 0.0, 1.0))
    else:
        strengths = np.clip(targets[:, None] / full[None, :], 0.0, 1.0)
        n_var = targets[:, None] * (1.0 - strengths)  # (L, 1 + m) noise variance added
        half = np.empty((len(every), r, r))
        for j, B in enumerate(every):  # (B^T Sigma B)^{1/2} / sqrt(F)
            w, U = np.linalg.eigh(B.T @ S @ B)
            half[j] = (U * np.sqrt(np.clip(w, 0.0, None))) @ U.T / math.sqrt(full[j])
        noise = (np.sqrt(n_var)[:, :, None, None]
                 * np.einsum("jdk,jkl->jdl", every, half)[None])  # (L, 1 + m, d, r)
    bases = np.sqrt(strengths)[:, :, None, None] * every[None]
    rv = _removed(bases.reshape(-1, d, r), S).reshape(strengths.shape)
    if noise is not None:
        rv = rv - np.einsum("ajdk,ajdk->aj", noise, noise)
    return DosePlan(levels=lv, targets=targets, bases=bases, strengths=strengths,
                    removed_variance=rv, controls=C, full_variance=full, v_max=v_max, match=match,
                    noise=noise)


def displacement(plan: DosePlan, cov: ArrayLike) -> np.ndarray:
    """``(L, 1 + m)``: the mean squared distance each edit of ``plan`` moves rows of covariance ``cov``.

    ``s^2 tr(B^T Sigma B)`` for the shrink plus ``tr(N N^T)`` for the noise.
    """
    S = as_moment(cov, name="cov")
    B = plan.bases  # sqrt(s) B
    BtSB = np.einsum("ajdk,de,ajeq->ajkq", B, S, B)
    BtB = np.einsum("ajdk,ajdq->ajkq", B, B)
    out = np.einsum("ajkq,ajqk->aj", BtB, BtSB)  # tr(B B^T Sigma B B^T) = s^2 F
    if plan.noise is not None:
        out = out + np.einsum("ajdk,ajdk->aj", plan.noise, plan.noise)
    return out


def _expanded_tail(confidence: float, n_units: int) -> float:
    """Tail of Hesterberg's expanded percentile interval, ``Phi(-sqrt(n/(n-1)) t_{n-1,1-a})``."""
    from scipy.special import stdtrit

    a = (1 - confidence) / 2
    n = max(int(n_units), 2)
    z = -math.sqrt(n / (n - 1)) * float(stdtrit(n - 1, 1 - a))
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


@dataclass(frozen=True)
class DoseResponse:
    """Loss increases of Q_T and of its controls along the dose grid, and their paired excess.

    Every array is ``(L,)`` (one entry per dose level). ``tangent`` and ``control`` are the
    loss increases per target (Q_T's, and the mean over controls); ``excess = tangent -
    control``; ``*_lo``/``*_hi`` the interval ends (replicates resample batches and redraw the
    controls); ``control_min``/``control_max`` the spread over controls; ``p_value`` the
    two-sided bootstrap p-value of excess = 0 (floor 1/n_boot).
    """

    targets: np.ndarray
    tangent: np.ndarray
    tangent_lo: np.ndarray
    tangent_hi: np.ndarray
    control: np.ndarray
    control_lo: np.ndarray
    control_hi: np.ndarray
    control_min: np.ndarray
    control_max: np.ndarray
    excess: np.ndarray
    excess_lo: np.ndarray
    excess_hi: np.ndarray
    p_value: np.ndarray
    n_batches: int
    n_controls: int
    n_boot: int


def paired_excess(loss_sums: ArrayLike, counts: ArrayLike, index: ArrayLike, targets: ArrayLike,
                  *, n_boot: int, confidence: float, seed: Seed, clean: int = 0) -> DoseResponse:
    """The paired excess of Q_T over its matched controls at each dose level.

    Args:
        loss_sums: ``(n_batches, K)`` summed loss of every edit variant on each test batch.
        counts: ``(n_batches, K)`` targets behind each sum.
        index: ``(L, 1 + m)`` columns of the plan (:class:`DosePlan` order: Q_T, then controls).
        targets: ``(L,)`` removed variance at each level.
        n_boot: bootstrap replicates.
        confidence: two-sided level in (0, 1).
        seed: seed of the bootstrap.
        clean: column of the unedited forward pass.

    Loss increase of a variant = (its summed loss over the batches) / (its targets) minus the
    same for the clean pass; each replicate reweights the batches (multinomial) and redraws the
    m controls with replacement. With one batch the intervals are NaN.
    """
    L = to_float64(loss_sums, "loss_sums")
    N = to_float64(counts, "counts")
    if L.ndim != 2 or L.shape != N.shape:
        raise ShapeError(f"loss_sums and counts must be equal (n_batches, K); got {L.shape}, {N.shape}")
    idx = np.asarray(index, dtype=np.int64)
    if idx.ndim != 2 or idx.shape[1] < 2:
        raise ShapeError(f"index must be (L, 1 + m) with m >= 1; got {idx.shape}")
    n_boot = check_positive_int(n_boot, "n_boot", minimum=2)
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    nb = L.shape[0]
    m = idx.shape[1] - 1

    def inc(W):  # (R, nb) -> (R, K)
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = (W @ L) / (W @ N)
        return loss - loss[:, clean:clean + 1]

    point = inc(np.ones((1, nb)))[0]
    rng = np.random.default_rng(seed)
    W = rng.multinomial(nb, np.full(nb, 1.0 / nb), size=n_boot).astype(np.float64)
    draw = rng.integers(0, m, size=(n_boot, m))
    reps = inc(W)
    tail = _expanded_tail(confidence, nb)
    out = {k: [] for k in ("tangent", "tangent_lo", "tangent_hi", "control", "control_lo",
                           "control_hi", "control_min", "control_max", "excess", "excess_lo",
                           "excess_hi", "p_value")}
    for row in idx:
        t_pt, c_pt = point[row[0]], point[row[1:]]
        t_rep = reps[:, row[0]]
        c_rep = np.take_along_axis(reps[:, row[1:]], draw, axis=1).mean(axis=1)
        e_rep = t_rep - c_rep
        e_pt = float(t_pt - c_pt.mean())
        vals = {"tangent": (float(t_pt), t_rep), "control": (float(c_pt.mean()), c_rep),
                "excess": (e_pt, e_rep)}
        for name, (v, rep) in vals.items():
            rep = rep[np.isfinite(rep)]
            lo, hi = ((float(np.quantile(rep, tail)), float(np.quantile(rep, 1 - tail)))
                      if nb >= 2 and rep.size >= 2 else (float("nan"), float("nan")))
            out[name].append(v)
            out[f"{name}_lo"].append(lo)
            out[f"{name}_hi"].append(hi)
        out["control_min"].append(float(c_pt.min()))
        out["control_max"].append(float(c_pt.max()))
        good = e_rep[np.isfinite(e_rep)]
        if nb >= 2 and good.size >= 2:
            null = good - good.mean()
            p = min(1.0, max(float(np.mean(np.abs(null) >= abs(e_pt))), 1.0 / n_boot))
        else:
            p = float("nan")
        out["p_value"].append(p)
    arr = {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
    return DoseResponse(targets=to_float64(targets, "targets").ravel(), n_batches=nb,
                        n_controls=m, n_boot=n_boot, **arr)


def curve_at(targets: ArrayLike, control: ArrayLike, v: float) -> float:
    """The controls' dose-response read at removed variance ``v``.

    A quadratic through the origin fitted to ``(targets, control)`` (a line through the origin
    with one level).

    Beyond ``max(targets)`` this is an extrapolation: a description, never a verdict.
    """
    x = to_float64(targets, "targets").ravel()
    y = to_float64(control, "control").ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size == 0:
        return float("nan")
    X = np.stack([x, x * x], axis=1) if x.size >= 2 else x[:, None]
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    return float(coef[0] * v + (coef[1] * v * v if coef.size > 1 else 0.0))

"""Causal controls matched on the confound: removed activation variance (issue 10, item 5).

A PCA proxy Q_T is, by construction, the rank-r subspace whose mean-ablation removes the most
activation variance, so a causal test against rank-r controls that remove far less variance
proves nothing about geometry. :func:`variance_matched_controls` builds controls from random
directions of the complement of span(Q), as many as it takes (the last one scaled) to remove
exactly the variance Q removes.

Conventions:

- mean-ablation along a basis B ``(d, k)``: ``h' = h - (h - mu) B B^T`` (rows h, mean mu);
- removed variance: ``tr(Sigma) - tr(Cov(h'))``; for orthonormal B it is ``tr(B^T Sigma B)``;
  along one unit direction v scaled by s it is ``(1 - (1 - s^2)^2) v^T Sigma v``, and it adds up
  over orthogonal directions (see :func:`removed_variance`).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.controls import variance_matched_controls, removed_variance
    >>> cov = np.diag([9.0, 4.0] + [1.0] * 18)
    >>> Q = np.eye(20)[:, :2]                         # removes 13
    >>> mc = variance_matched_controls(Q, cov, n=5, seed=0)
    >>> bool(np.allclose(mc.removed_variance, 13.0)), mc.bases.shape[0]
    (True, 5)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import RankError, ShapeError
from tangentlab.measure._validate import as_basis, as_moment, check_positive_int, to_float64
from tangentlab.typing import ArrayLike, Seed

__all__ = [
    "MatchedControls",
    "variance_matched_controls",
    "removed_variance",
    "mean_ablate",
    "CausalContrast",
    "causal_contrast",
]


@dataclass(frozen=True)
class MatchedControls:
    """Variance-matched controls for a basis Q.

    Attributes:
        bases: ``(n, d, r_max)``: control j uses its first ``ranks[j]`` columns (orthogonal, unit
            except the last, which is scaled by ``scales[j]``); the rest are zero.
        ranks: ``(n,)`` directions per control (the last one partial).
        scales: ``(n,)`` the scale s in (0, 1] of each control's last direction.
        removed_variance: ``(n,)`` variance each control's mean-ablation removes.
        target: ``tr(Q^T Sigma Q)``, the variance Q's mean-ablation removes.
        seed: the seed used.
    """

    bases: np.ndarray
    ranks: np.ndarray
    scales: np.ndarray
    removed_variance: np.ndarray
    target: float
    seed: Any

    def to_dict(self) -> dict[str, Any]:
        """Summary for JSON (bases left out: they are large)."""
        return {"ranks": self.ranks.tolist(), "scales": self.scales.tolist(),
                "removed_variance": self.removed_variance.tolist(), "target": self.target,
                "seed": self.seed, "shape": list(self.bases.shape)}


def removed_variance(B: ArrayLike, cov: ArrayLike) -> float | np.ndarray:
    """Variance removed by mean-ablating along B: ``tr(Sigma) - tr((I - BB^T) Sigma (I - BB^T))``.

    Args:
        B: ``(d, k)`` (columns need not be orthonormal or non-zero) or a stack ``(n, d, k)``.
        cov: activation covariance ``(d, d)``.

    Returns a float, or ``(n,)`` for a stack. Computed as ``2 tr(B^T S B) - tr(B^T B B^T S B)``
    (no cancellation against ``tr(Sigma)``).
    """
    S = as_moment(cov, name="cov")
    arr = to_float64(B, "B")
    single = arr.ndim == 2
    if single:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1] != S.shape[0]:
        raise ShapeError(f"B must be (d, k) or (n, d, k) with d={S.shape[0]}; got {arr.shape}")
    SB = np.einsum("ij,njk->nik", S, arr)
    BtSB = np.einsum("nik,nil->nkl", arr, SB)
    BtB = np.einsum("nik,nil->nkl", arr, arr)
    out = 2 * np.einsum("nkk->n", BtSB) - np.einsum("nkl,nlk->n", BtB, BtSB)
    return float(out[0]) if single else out


def mean_ablate(H: ArrayLike, B: ArrayLike, mean: ArrayLike | None = None) -> np.ndarray:
    """``h' = h - (h - mu) B B^T`` for rows H ``(n, d)`` and B ``(d, k)``; mu defaults to H's mean."""
    from tangentlab.measure._validate import as_points, as_vector

    X = as_points(H, name="H")
    Bm = to_float64(B, "B")
    if Bm.ndim != 2 or Bm.shape[0] != X.shape[1]:
        raise ShapeError(f"B must have shape ({X.shape[1]}, k); got {Bm.shape}")
    mu = X.mean(0) if mean is None else as_vector(mean, name="mean", dim=X.shape[1])
    return X - ((X - mu) @ Bm) @ Bm.T


def variance_matched_controls(Q: ArrayLike, cov: ArrayLike, n: int, seed: Seed) -> MatchedControls:
    """Controls from the complement of span(Q) that remove exactly Q's activation variance.

    Args:
        Q: ``(d, r)`` orthonormal basis (e.g. the top-r activation PCA subspace).
        cov: activation covariance ``Sigma``, ``(d, d)`` (of the rows to be ablated).
        n: number of controls.
        seed: seed (anything ``numpy.random.default_rng`` takes: an int or a sequence of ints).

    For each control, the complement of span(Q) is randomly rotated (Haar) and its directions
    v_1, v_2, ... are taken in order until ``sum v_j^T Sigma v_j`` reaches ``tr(Q^T Sigma Q)``;
    the last direction is scaled by ``s = sqrt(1 - sqrt(1 - f))`` with f the fraction of its
    variance still needed, so that the mean-ablation removes exactly the target.

    Raises RankError if the whole complement holds less variance than the target (then no
    control inside it can match: compare against full-space controls or lower r).
    """
    S = as_moment(cov, name="cov")
    d = S.shape[0]
    Q = as_basis(Q, d=d)
    r = Q.shape[1]
    n = check_positive_int(n, "n")
    target = float(np.sum(Q * (S @ Q)))
    full, _ = np.linalg.qr(Q, mode="complete")
    P = full[:, r:]  # (d, d - r)
    comp_var = float(np.sum(P * (S @ P)))
    if not target <= comp_var * (1 - 1e-12):
        raise RankError(
            f"the complement of span(Q) holds variance {comp_var:.6g}, less than Q's "
            f"{target:.6g}: no control inside it can remove as much; use full-space controls "
            "or a smaller rank"
        )
    rng = np.random.default_rng(seed)
    dirs = []
    ranks = np.empty(n, dtype=np.int64)
    scales = np.empty(n)
    for j in range(n):
        R, tri = np.linalg.qr(rng.standard_normal((d - r, d - r)))
        R = R * np.sign(np.diag(tri))
        V = P @ R  # (d, d - r) Haar-rotated orthonormal complement basis
        var = np.einsum("dk,dk->k", V, S @ V)
        cum = np.cumsum(var)
        k = int(np.searchsorted(cum, target, side="left"))  # index of the last direction
        k = min(k, d - r - 1)
        before = float(cum[k - 1]) if k > 0 else 0.0
        f = min(max((target - before) / var[k], 0.0), 1.0) if var[k] > 0 else 1.0
        s = float(np.sqrt(1.0 - np.sqrt(1.0 - f)))
        Bj = V[:, :k + 1].copy()
        Bj[:, k] *= s
        dirs.append(Bj)
        ranks[j] = k + 1
        scales[j] = s
    r_max = int(ranks.max())
    bases = np.zeros((n, d, r_max))
    for j, Bj in enumerate(dirs):
        bases[j, :, :Bj.shape[1]] = Bj
    return MatchedControls(bases=bases, ranks=ranks, scales=scales,
                           removed_variance=removed_variance(bases, S), target=target,
                           seed=seed if isinstance(seed, int) else list(np.ravel(seed)))


@dataclass(frozen=True)
class CausalContrast:
    """Loss change of ablating Q_T against ablating controls, with intervals over batches.

    ``tangent`` is the mean per-batch loss increase when Q_T is ablated; ``control_mean`` the
    mean over controls of theirs; ``difference = tangent - control_mean`` and ``ratio = tangent /
    control_mean``. Each ``*_ci_*`` is an expanded percentile interval whose replicates resample
    batches and redraw the controls (with replacement), like
    :func:`~tangentlab.measure.batch_control_test`. ``p_value`` is the two-sided bootstrap
    p-value of ``difference = 0`` (twice the smaller tail share, floor ``1 / n_boot``).
    ``tangent_per_variance`` and ``control_per_variance`` divide by the removed variances when
    given (NaN otherwise).
    """

    tangent: float
    tangent_ci_low: float
    tangent_ci_high: float
    control_mean: float
    control_ci_low: float
    control_ci_high: float
    difference: float
    difference_ci_low: float
    difference_ci_high: float
    ratio: float
    p_value: float
    tangent_per_variance: float
    control_per_variance: float
    n_batches: int
    n_controls: int
    n_boot: int
    confidence: float
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict of floats and ints (for JSON)."""
        from dataclasses import asdict

        return asdict(self)


def causal_contrast(tangent_losses: ArrayLike, control_losses: ArrayLike, *, n_boot: int = 1000,
                    confidence: float = 0.95, seed: int = 0,
                    tangent_removed: float | None = None,
                    control_removed: ArrayLike | None = None) -> CausalContrast:
    """Compare per-batch loss increases of ablating Q_T and ablating each control.

    Args:
        tangent_losses: ``(B,)`` loss increase per test batch with Q_T mean-ablated.
        control_losses: ``(B, n)`` the same for each of n controls (e.g. variance-matched ones,
            so that the confound "removed variance" is equal).
        n_boot: bootstrap replicates (each resamples the B batches with replacement and redraws
            the n controls).
        confidence: two-sided level of the intervals, in (0, 1).
        seed: seed of the bootstrap.
        tangent_removed: variance Q_T's ablation removes (for the per-unit numbers).
        control_removed: ``(n,)`` the controls' removed variances.
    """
    from tangentlab.errors import InsufficientSamplesError, ValidationError
    from tangentlab.measure.batch_test import _expanded_alpha

    t = to_float64(tangent_losses, "tangent_losses").ravel()
    c = to_float64(control_losses, "control_losses")
    if c.ndim != 2 or c.shape[0] != t.shape[0]:
        raise ShapeError(f"control_losses must be (B, n) with B={t.shape[0]}; got {c.shape}")
    if t.size < 2:
        raise InsufficientSamplesError("causal_contrast needs at least 2 batches")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(c))):
        from tangentlab.errors import NonFiniteError

        raise NonFiniteError("loss changes hold NaN or Inf; repair those batches")
    n_boot = check_positive_int(n_boot, "n_boot", minimum=2)
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    B, n = c.shape
    rng = np.random.default_rng([int(seed), 20261203])
    W = rng.multinomial(B, np.full(B, 1.0 / B), size=n_boot).astype(np.float64) / B
    idx = rng.integers(0, n, size=(n_boot, n))
    t_rep = W @ t
    c_all = W @ c  # (n_boot, n)
    c_rep = np.take_along_axis(c_all, idx, axis=1).mean(1)
    tm, cm = float(t.mean()), float(c.mean())
    diff = tm - cm
    # centre the redrawn-control replicates on the point's draw (see batch_control_test)
    c_rep = c_rep + (cm - float(c_all.mean()))
    d_rep = t_rep - c_rep
    tail = _expanded_alpha(confidence, B)

    def pct(x):
        lo, hi = np.quantile(x, [tail, 1 - tail])
        return float(lo), float(hi)

    # two-sided p-value of difference = 0: the replicates' deviations, shifted to the null
    null = d_rep - d_rep.mean()
    p = min(1.0, max(float(np.mean(np.abs(null) >= abs(diff))), 1.0 / n_boot))
    nan = float("nan")
    per_t = tm / float(tangent_removed) if tangent_removed else nan
    if control_removed is not None:
        cr = to_float64(control_removed, "control_removed").ravel()
        per_c = float(np.mean(c.mean(0) / cr)) if cr.shape == (n,) else nan
    else:
        per_c = nan
    return CausalContrast(
        tangent=tm, tangent_ci_low=pct(t_rep)[0], tangent_ci_high=pct(t_rep)[1],
        control_mean=cm, control_ci_low=pct(c_rep)[0], control_ci_high=pct(c_rep)[1],
        difference=diff, difference_ci_low=pct(d_rep)[0], difference_ci_high=pct(d_rep)[1],
        ratio=tm / cm if cm != 0 else float("inf"), p_value=float(p),
        tangent_per_variance=per_t, control_per_variance=per_c, n_batches=B, n_controls=n,
        n_boot=n_boot, confidence=float(confidence), seed=int(seed),
    )

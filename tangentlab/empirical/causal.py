"""The causal check's forward passes: the loss under ablation and steering edits at one site.

:func:`causal_losses` builds the stacked edit variants and runs them through
:func:`tangentlab.empirical.capture.edited_losses`, one test batch at a time, keeping the loss of
every variant per batch (for the bootstrap over batches). Variants, in order:

1. clean (no edit);
2. mean-ablation of span(Q) (the tangent proxy);
3. mean-ablation of each *complement* control (Haar rank-r subspaces of span(Q)'s complement);
4. mean-ablation of each *variance-matched* control (a subspace that removes as much activation
   variance as Q; zero-padded to a common rank, its last column possibly scaled);
5. for each step size α: a shift by α·rms along Q's first direction, then along each complement
   control's first direction.

Every variant's basis is zero-padded to one rank ``r_max`` (a zero column edits nothing). The
activation variance an edit removes is computed exactly for the edit as applied,
:func:`tangentlab.measure.removed_variance` (tr Σ − tr((I − BBᵀ)Σ(I − BBᵀ))). The rows are built by :func:`tangentlab.empirical.metrics.causal_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CausalLosses", "causal_losses", "pad_bases"]


@dataclass(frozen=True)
class CausalLosses:
    """Per-batch loss sums of every edit variant, and where each variant sits.

    Attributes:
        loss_sums: (n_batches, K) summed loss; ``counts`` (n_batches, K) targets.
        removed_variance: (K,) activation variance each edit removes (0 for clean and steering).
        index_tangent: column of the tangent ablation; ``index_complement`` (m,) and
            ``index_matched`` (n,) the controls' columns; ``index_steer``: per step size, (tangent
            column, controls' columns (m,)).
        steer_sizes: the step sizes α.
    """

    loss_sums: Any
    counts: Any
    removed_variance: Any
    index_tangent: int
    index_complement: Any
    index_matched: Any
    index_steer: tuple
    steer_sizes: tuple


def pad_bases(bases: Sequence[Any], r_max: int):
    """Stack bases (each (d, r_i), r_i ≤ r_max) into (K, d, r_max), zero-padding the columns."""
    import numpy as np

    d = np.asarray(bases[0]).shape[0]
    out = np.zeros((len(bases), d, r_max))
    for i, B in enumerate(bases):
        B = np.asarray(B, dtype=np.float64)
        out[i, :, : B.shape[1]] = B
    return out


def causal_losses(lm, site: str, Q, complement, matched, *, rms: float, mu, cov,
                  batches: Sequence, steer_sizes: Sequence[float]) -> CausalLosses:
    """Loss of every edit variant (module docstring) on each of ``batches`` (EvalBatch records).

    ``Q``: (d, r) tangent basis; ``complement``: (m, d, r) complement controls; ``matched``:
    (n, d, r_n) variance-matched controls (n may be 0); ``rms``: RMS activation norm at the site
    (the steering unit); ``mu``: (d,) mean activation (the ablation's fill value); ``cov``: (d, d)
    activation covariance (for the removed variance).
    """
    import numpy as np

    from tangentlab.empirical.capture import edited_losses
    from tangentlab.measure import removed_variance

    Q = np.asarray(Q, dtype=np.float64)
    d, r = Q.shape
    complement = list(np.asarray(complement, dtype=np.float64))
    matched = list(np.asarray(matched, dtype=np.float64)) if len(matched) else []
    r_max = max([r] + [M.shape[1] for M in matched])
    ablate = [Q] + complement + matched
    bases = [np.zeros((d, r))] + ablate
    shifts = [np.zeros(d)] * (1 + len(ablate))
    index_steer = []
    for alpha in steer_sizes:
        i0 = len(bases)
        for S in [Q] + complement:
            bases.append(np.zeros((d, r)))
            shifts.append(alpha * rms * S[:, 0])
        index_steer.append((i0, np.arange(i0 + 1, i0 + 1 + len(complement))))
    B = pad_bases(bases, r_max)
    Sh = np.stack(shifts)
    rv = np.asarray(removed_variance(B, cov), dtype=np.float64)
    L, N = [], []
    for batch in batches:
        lsum, n = edited_losses(lm, site, batch.input_ids, batch.labels, bases=B, shifts=Sh, mu=mu)
        L.append(lsum)
        N.append(n)
    m = len(complement)
    return CausalLosses(
        loss_sums=np.stack(L).astype(np.float64), counts=np.stack(N).astype(np.float64),
        removed_variance=rv, index_tangent=1, index_complement=np.arange(2, 2 + m),
        index_matched=np.arange(2 + m, 2 + m + len(matched)), index_steer=tuple(index_steer),
        steer_sizes=tuple(float(a) for a in steer_sizes))

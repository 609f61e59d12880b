"""The causal check's forward passes: the loss under ablation and steering edits at one site.

:func:`causal_losses` builds the stacked edit variants (clean; mean-ablate span(Q); mean-ablate
each control; for each step size, shift along the first direction of Q and of each control) and
runs them through :func:`tangentlab.empirical.capture.edited_losses`. The rows are built by
:func:`tangentlab.empirical.metrics.causal_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CausalLosses", "causal_losses"]


@dataclass(frozen=True)
class CausalLosses:
    """Mean loss per target of each edit variant, ``loss`` (K,), and ``n_targets`` (clean)."""

    loss: Any
    n_targets: int
    n_subspaces: int


def causal_losses(lm, site: str, Q, controls, *, rms: float, mu, batches: Sequence,
                  steer_sizes: Sequence[float]) -> CausalLosses:
    """Loss of every edit variant over ``batches`` (EvalBatch records).

    ``Q``: (d, r) tangent basis; ``controls``: (m-1, d, r); ``rms``: RMS activation norm at the
    site (steering step unit); ``mu``: (d,) mean activation (the ablation's fill value).
    """
    import numpy as np

    from tangentlab.empirical.capture import edited_losses

    d, r = Q.shape
    subspaces = [Q] + list(controls)  # tangent first
    bases, shifts = [np.zeros((d, r))], [np.zeros(d)]
    bases += subspaces
    shifts += [np.zeros(d)] * len(subspaces)
    for alpha in steer_sizes:
        for S in subspaces:
            bases.append(np.zeros((d, r)))
            shifts.append(alpha * rms * S[:, 0])
    tot = np.zeros(len(bases))
    cnt = np.zeros(len(bases))
    for batch in batches:
        lsum, n = edited_losses(lm, site, batch.input_ids, batch.labels, bases=np.stack(bases),
                                shifts=np.stack(shifts), mu=mu)
        tot += lsum
        cnt += n
    return CausalLosses(loss=tot / np.maximum(cnt, 1), n_targets=int(cnt[0]),
                        n_subspaces=len(subspaces))

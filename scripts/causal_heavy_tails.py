#!/usr/bin/env python3
"""The causal double match under heavy-tailed rows (issue 33): false "supported" and power.

    python scripts/causal_heavy_tails.py [--sims 100] [--tails 0.5] [--rows 64]
        [--cases concave-ratio:1,convex:1,convex:1.5] [--unscaled-noise]

Runs ``tests/empirical/causal_sim.simulate`` (the pipeline's moments, variants, edit, rows and
rule; only the forward pass is a known per-row cost) for seeds 0..sims-1 and prints, per case
(cost shape : cost ratio inside span(Q_T); 1 = a null), the statuses and the mean excess over the
controls as a share of their cost. ``--unscaled-noise`` patches the edit back to the design
before issue 33 (the double match's noise one scale for every row) to compare.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _unscaled_noise():
    import torch

    import tangentlab.empirical.loading.capture as cap

    def edit(hv, *, mu, bases, shifts, weight=None, z=None, noise=None, whiten=None):
        coef = torch.einsum("kbtd,kdr->kbtr", hv - mu, bases)
        delta = -torch.einsum("kbtr,kdr->kbtd", coef, bases) + shifts[:, None, None, :]
        if noise is not None:
            delta = delta + torch.einsum("btr,kdr->kbtd", z, noise)
        return hv + (delta if weight is None else weight * delta)

    cap.edit_activations = edit


def main(argv=None) -> int:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=100)
    ap.add_argument("--tails", type=float, default=0.5, help="lognormal sigma of the row scale")
    ap.add_argument("--rows", type=int, default=64, help="rows per batch (8 batches)")
    ap.add_argument("--cases", default="concave-log:1,concave-ratio:1,convex:1,convex:1.5,linear:1.5")
    ap.add_argument("--unscaled-noise", action="store_true")
    args = ap.parse_args(argv)
    if args.unscaled_noise:
        _unscaled_noise()
    from tests.empirical.causal_sim import simulate

    for case in args.cases.split(","):
        shape, ratio = case.split(":")
        statuses, share = collections.Counter(), []
        for seed in range(args.sims):
            rows, out, _ = simulate(seed, shape=shape, per_token=True, tails=args.tails,
                                    cost_ratio=float(ratio), rows=args.rows)
            statuses[out.status] += 1
            share.append(rows["ablation_excess_both"]["value"]
                         / abs(rows["ablation_loss_matched_both_mean"]["value"]))
        s = np.asarray(share)
        print(f"tails={args.tails} rows={args.rows} {shape} x{ratio}: {dict(statuses)}; excess/"
              f"controls {s.mean():+.3f} (sd {s.std(ddof=1):.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

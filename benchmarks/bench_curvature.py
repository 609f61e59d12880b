"""Benchmark: II and sectional curvature of the random immersion, torch.func vs geomstats.

Both compute, for the random immersion ``RandomImmersion(m=2, native_dim=5)`` (the graph of a
small random MLP R² -> R³), at the same parameter points:

- ours: ``tangentlab.synthetic._geometry.immersion_geometry`` (nested ``torch.func`` jacobians,
  vmapped over points; intrinsic Riemann tensor from the metric, II from the Hessian);
- geomstats 2.8 with the autograd backend: an ``ImmersedSet`` with the same immersion written in
  ``geomstats.backend``; ``PullbackMetric.second_fundamental_form`` and
  ``PullbackMetric.sectional_curvature`` (generic Christoffel/Riemann code by autodiff).

geomstats is slow per point, so it is timed on a subset of ``--gs-points`` points (default 16)
and its time is **extrapolated linearly** to all ``--points`` points (default 256); the largest
difference is taken over that subset. Run: ``python benchmarks/bench_curvature.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

os.environ["GEOMSTATS_BACKEND"] = "autograd"  # must precede the first geomstats import


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=256)
    ap.add_argument("--gs-points", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from tangentlab.synthetic._geometry import immersion_geometry
    from tangentlab.synthetic.manifolds import RandomImmersion

    torch.set_num_threads(1)
    M = RandomImmersion(m=2, native_dim=5, hidden=16, scale=1.0, seed=args.seed)
    theta = np.random.default_rng(args.seed).uniform(-1, 1, size=(args.points, 2))

    immersion_geometry(M.phi, theta[:4])  # warm-up (first-call dispatch costs)
    t0 = time.perf_counter()
    geo = immersion_geometry(M.phi, theta)
    ours_s = time.perf_counter() - t0
    ours_K = geo.riemann[:, 0, 1, 0, 1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import geomstats.backend as gs
        from geomstats.geometry.base import ImmersedSet
        from geomstats.geometry.euclidean import Euclidean

    W1, b1, W2 = (M.W1.numpy(), M.b1.numpy(), M.W2.numpy())

    class GraphOfMLP(ImmersedSet):
        def __init__(self):
            super().__init__(dim=2)

        def _define_embedding_space(self):
            return Euclidean(dim=5)

        def immersion(self, point):
            hidden = gs.tanh(gs.einsum("hm,...m->...h", W1, point) + b1)
            return gs.concatenate([point, M.scale * gs.einsum("oh,...h->...o", W2, hidden)],
                                  axis=-1)

    space = GraphOfMLP()
    sub = theta[: args.gs_points]
    e0, e1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    space.metric.sectional_curvature(e0, e1, sub[0])  # warm-up
    t0 = time.perf_counter()
    gs_K = np.array([float(space.metric.sectional_curvature(e0, e1, p)) for p in sub])
    gs_II = np.array([np.asarray(space.metric.second_fundamental_form(p)) for p in sub])
    gs_s_sub = time.perf_counter() - t0
    gs_s = gs_s_sub * args.points / len(sub)

    # geomstats' II is the normal part of the Hessian in chart coordinates, shape (D, m, m):
    # put it in our normal frame and orthonormal tangent frame to compare.
    gs_A = np.einsum("nda,ndij,nib,njc->nabc", geo.normal[: len(sub)], gs_II,
                     geo.inv_sqrt_metric[: len(sub)], geo.inv_sqrt_metric[: len(sub)])
    dK = float(np.max(np.abs(gs_K - ours_K[: len(sub)])))
    dII = float(np.max(np.abs(gs_A - geo.ii[: len(sub)])))
    print(f"points: {args.points} (geomstats timed on {len(sub)}, extrapolated linearly)")
    print(f"ours (torch.func, II + Riemann + sectional): {ours_s:.3f} s")
    print(f"geomstats (autograd, II + sectional):        {gs_s:.3f} s "
          f"({gs_s_sub:.3f} s measured for {len(sub)} points)")
    print(f"speed-up: {gs_s / ours_s:.1f}x")
    print(f"largest |ΔK|: {dK:.3e}; largest |ΔII|: {dII:.3e}; |K| range "
          f"[{np.abs(ours_K).min():.3g}, {np.abs(ours_K).max():.3g}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())

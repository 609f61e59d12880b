"""Benchmark: testing a subspace against matched-rank controls, from C or from the rows.

Runs, in one process, on N gradient-like rows of dimension d (float64) and ``n`` controls of
rank r:

- (a) ours: stream the rows into a :class:`tangentlab.measure.MomentAccumulator` once, then
  evaluate the tested subspace and every control on ``C = G^T G / N`` with
  :func:`tangentlab.measure.energy_fractions` (d x d x r work per control);
- (b) the direct way: project the N x d matrix onto each control in turn, ``||G Q_j||_F^2 /
  ||G||_F^2`` (one pass over the rows per control);
- (b') the direct way batched: all controls in one matrix product ``G [Q_0 ... Q_n]``, the
  strongest direct baseline.

It prints the times, the ratios (b)/(a) and (b')/(a), and the largest relative difference of the
energies. Cost model (multiply-adds): (a) N d^2 once (+ n d^2 r), (b) n N d r, so the speed-up
is about n r / d for compute-bound products, more when (b) is memory bound (skinny products
re-read the N x d matrix n times).

Usage::

    python benchmarks/bench_controls.py                 # N=200000, d=512, 100 controls, r=8
    python benchmarks/bench_controls.py --n-rows 20000  # quick run (or TANGENTLAB_BENCH_N=20000)
    python benchmarks/bench_controls.py --rank 32 --threads 2

Torch does the heavy products in all three ways (same library, same thread count); numpy's BLAS
is held to one thread while torch runs (environment.md: BLAS and torch threads fight on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-rows", type=int, default=int(os.environ.get("TANGENTLAB_BENCH_N", 200_000)))
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--controls", type=int, default=100)
    ap.add_argument("--chunk", type=int, default=8192, help="rows per accumulator update")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from tangentlab.measure import (
        MomentAccumulator,
        energy_fractions,
        normal_controls,
        random_subspace,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    N, d, r, n = args.n_rows, args.dim, args.rank, args.controls
    print(f"N={N} d={d} r={r} controls={n} chunk={args.chunk} torch_threads={torch.get_num_threads()}")

    # data and subspaces (not timed): anisotropic Gaussian rows, float64
    gen = torch.Generator().manual_seed(args.seed)
    scales = torch.exp(torch.linspace(0.0, -3.0, d, dtype=torch.float64))
    G = torch.randn(N, d, generator=gen, dtype=torch.float64) * scales
    Q = random_subspace(d, r, args.seed)
    bases = np.concatenate([Q[None], normal_controls(Q, n, args.seed + 1)])  # (1 + n, d, r)
    bases_t = torch.from_numpy(bases)

    with threadpool_limits(limits=1, user_api="blas"):
        # (a) ours: one streaming pass into C, then every subspace on C
        t0 = time.perf_counter()
        acc = MomentAccumulator(d)
        for start in range(0, N, args.chunk):
            acc.update(G[start:start + args.chunk])
        C = acc.second_moment()
        t1 = time.perf_counter()
        e_ours = energy_fractions(bases, C)
        t2 = time.perf_counter()
        t_acc, t_eval = t1 - t0, t2 - t1
        t_a = t2 - t0

        # (b) direct: one pass over the rows per subspace
        t0 = time.perf_counter()
        total = float((G * G).sum())
        e_direct = np.array([float((G @ bases_t[j]).pow(2).sum()) / total
                             for j in range(bases.shape[0])])
        t_b = time.perf_counter() - t0

        # (b') direct, batched into one product
        t0 = time.perf_counter()
        total = float((G * G).sum())
        flat = bases_t.permute(1, 0, 2).reshape(d, -1)
        e_batched = ((G @ flat).pow(2).reshape(N, -1, r).sum(dim=(0, 2)) / total).numpy()
        t_bb = time.perf_counter() - t0

    rel = lambda x, y: float(np.max(np.abs(x - y) / np.abs(y)))  # noqa: E731
    print(f"(a)  ours: accumulate C {t_acc:.3f} s + evaluate {n + 1} subspaces {t_eval:.4f} s "
          f"= {t_a:.3f} s")
    print(f"(b)  direct, one projection per subspace: {t_b:.3f} s")
    print(f"(b') direct, all subspaces in one product: {t_bb:.3f} s")
    print(f"ratio (b)/(a)  = {t_b / t_a:.2f}x")
    print(f"ratio (b')/(a) = {t_bb / t_a:.2f}x")
    print(f"evaluation only, C given: (b)/(a-eval) = {t_b / t_eval:.0f}x")
    print(f"largest relative difference (a) vs (b):  {rel(e_ours, e_direct):.2e}")
    print(f"largest relative difference (a) vs (b'): {rel(e_ours, e_batched):.2e}")
    print(f"cost model n*r/d = {n * r / d:.2f} (compute-bound speed-up of (a) over (b))")
    ok = rel(e_ours, e_direct) < 1e-8 and rel(e_ours, e_batched) < 1e-8
    print("identical to 1e-8 relative:", "yes" if ok else "NO")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

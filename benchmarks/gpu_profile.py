"""Where the device statistics spend their time: each part of one site-batch, timed alone.

Feeds :class:`gpu_check.Statistics` (the core ``measure`` runs, as ``gpu_check.py`` builds it:
5 buckets, fixed + refit proxies of rank 8 with 200 complement and 200 full-space controls, the
𝟙-constrained streams, the forced cosines) with random float32 rows of ``measure``'s batch
shape (8 x 1023 rows) at each ``--d``, and prints per site-batch:

- the whole ``Statistics.add`` (milliseconds, after warm-up, the mean of ``--reps``);
- each part alone: the bucketed moments, the plain energy group, ``G @ U``, the constrained
  group, the forced cosines;
- the float64 and float32 matrix-product rates of the device (TFLOP/s), for the cost model;
- with ``--trace``, torch.profiler's top operators by device time and by host time.

Usage::

    python benchmarks/gpu_profile.py [--d 768 4096] [--reps 5] [--trace]

Runs on the CPU too (slowly: use ``--d 64 --rows 512``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d", type=int, nargs="+", default=[768, 4096])
    ap.add_argument("--rows", type=int, default=8 * 1023)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args(argv)

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def timed(fn, reps=args.reps) -> float:
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return 1e3 * (time.perf_counter() - t0) / reps

    for d in args.d:
        profile_width(d, args, dev, timed, sync)
    return 0


def profile_width(d: int, args, dev: str, timed, sync) -> None:
    """Time ``Statistics.add`` and its parts at width ``d`` on ``dev``; print them."""
    import torch
    from gpu_check import Statistics, make_proxies

    from tangentlab.measure.constrained import forced_cosine_parts

    ones, proxies = make_proxies(d)
    U = torch.from_numpy(ones.basis).to(dev, torch.float64)
    labels = [f"b{i}" for i in range(5)]
    g = torch.Generator(device=dev).manual_seed(0)
    G32 = torch.randn(args.rows, d, device=dev, generator=g)
    H32 = torch.randn(args.rows, d, device=dev, generator=g)
    stats = Statistics(d, ["s"], labels, proxies, U, torch.float64)
    G, H = G32.double(), H32.double()
    bucket = torch.arange(G.shape[0], device=dev) % 5
    whole = timed(lambda: stats.add("s", G32, H32))
    parts = {
        "bucketed moments": lambda: stats.accs["s"].update_indexed(G, bucket),
        "plain energy group (5 buckets)": lambda: stats.groups["s"][0].add(G, bucket),
        "G @ U": lambda: G @ U,
        "constrained group": lambda: stats.groups["s"][1].add(G @ U),
        "forced cosines": lambda: forced_cosine_parts(G, H),
        "cast float32 -> float64": lambda: (G32.double(), H32.double()),
    }
    print(f"d={d}, {args.rows} rows on {dev}: Statistics.add {whole:.1f} ms per site-batch")
    for name, fn in parts.items():
        print(f"  {name:<34} {timed(fn):8.2f} ms")
    M = stats.groups["s"][0]._bases.shape[1]
    for dt in (torch.float64, torch.float32):
        a = torch.randn(args.rows, d, device=dev, dtype=dt)
        b = torch.randn(d, M, device=dev, dtype=dt)
        ms = timed(lambda a=a, b=b: a @ b)
        print(f"  matmul ({args.rows} x {d}) @ ({d} x {M}) {str(dt)[6:]}: {ms:.2f} ms, "
              f"{2 * args.rows * d * M / ms / 1e9:.1f} TFLOP/s")
    if args.trace:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
        with profile(activities=acts) as prof:
            for _ in range(2):
                stats.add("s", G32, H32)
            sync()
        key = "cuda_time_total" if dev == "cuda" else "cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=40))
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10,
                                        max_name_column_width=40))


if __name__ == "__main__":
    sys.exit(main())

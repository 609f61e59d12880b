"""Peak memory of ``measure``'s statistics, per site and per rank: computed, then measured.

Computed from the data structures ``collect_fit_half`` / ``collect_test_half`` keep for one site
at one checkpoint (float64, 8 bytes), with the default :class:`MeasureConfig` (5 frequency
buckets, a 200-control pool of rank 8, fixed + refit proxies, 4096 sample rows, 64 eval batches
of 4 x 128 tokens):

- gradient moments: one accumulator per bucket plus the total, each mean (d) + centred sum (d^2);
- activation moments: one accumulator (d + d^2);
- the update's temporaries: a batch's centred outer-product sum, the merge's outer product of
  the mean shift and the sums being formed (about 4 d^2);
- control pools: (K + 1) d r per proxy, for the plain and the 1-constrained tests;
- activation samples: the fixed sample and the test-half rows, 4096 x d each;
- frequency geometry: per-token sums (U x d) and the one-per-window rows (<= fit rows x d);
- per-batch energies: B x (K + 1) scalars per proxy and bucket (what used to be B d^2).

Then it measures one case with ``resource`` (the process's peak resident memory grows by the
moment accumulators and control pools built for real at d = 768 and 2048) and shows that feeding
4 or 16 batches leaves the peak unchanged: the statistics are O(d^2), not O(batches x d^2).

Usage::

    python benchmarks/bench_memory.py            # table + measurement (about 20 s)
    python benchmarks/bench_memory.py --table    # the table only
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys

MB = 1 << 20


def components(d: int, *, buckets: int = 5, pool: int = 200, r: int = 8, proxies: int = 2,
               sample_rows: int = 4096, fit_rows: int = 32 * 4 * 127, tokens: int = 4096,
               test_batches: int = 32) -> dict[str, float]:
    """Bytes of each structure of one site at one checkpoint (defaults: MeasureConfig's)."""
    f = 8
    return {
        "grad moments (6 groups)": (buckets + 1) * (d * d + d) * f,
        "act moments": (d * d + d) * f,
        "update temporaries": 4 * d * d * f,
        "control pools": 2 * proxies * (pool + 1) * d * r * f,
        "samples (fit + test)": 2 * sample_rows * d * f,
        "geometry (tokens + rows)": (tokens + fit_rows) * d * f,
        "per-batch energies": 2 * proxies * (buckets + 1) * test_batches * (pool + 3) * f,
    }


def table() -> None:
    print("Per site, one checkpoint, default MeasureConfig (MB, float64):")
    names = list(components(768))
    print(f"  {'component':<28}" + "".join(f"{f'd={d}':>12}" for d in (768, 2048, 4096)))
    for n in names:
        print(f"  {n:<28}" + "".join(f"{components(d)[n] / MB:>12.1f}" for d in (768, 2048, 4096)))
    tot = {d: sum(components(d).values()) / MB for d in (768, 2048, 4096)}
    print(f"  {'total per site':<28}" + "".join(f"{tot[d]:>12.1f}" for d in (768, 2048, 4096)))
    shared = {d: d * (d - 1) * 8 / MB for d in (768, 2048, 4096)}
    print(f"  {'+ per rank: basis of 1-perp':<28}" + "".join(f"{shared[d]:>12.1f}" for d in shared))
    print("Per rank with S sites: S x total + the basis + the model + one batch's captured\n"
          "activations and gradients. Data-parallel: rank 0 folds the other ranks' partial\n"
          "statistics in one at a time (about 3 x the moment rows at the peak); checkpoint-parallel:\n"
          "each rank holds one checkpoint at a time.")


def _measure_child(d: int, n_batches: int) -> None:
    """Build the O(d^2) statistics for real; print the peak RSS growth in MB."""
    import numpy as np
    import torch

    from tangentlab.measure import MomentAccumulator, batch_energies, normal_controls

    torch.set_num_threads(1)
    # warm up every code path at a small size first (library pages, allocator pools)
    w = np.random.default_rng(1).standard_normal((64, 64))
    MomentAccumulator(64, groups=["a"]).update(torch.from_numpy(w), groups=np.array(["a"] * 64, dtype=object))
    batch_energies(np.linalg.qr(w[:, :8])[0], normal_controls(np.linalg.qr(w[:, :8])[0], 4, 0), [w])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    labels = [f"b{i}" for i in range(5)]
    grad = MomentAccumulator(d, groups=labels)
    act = MomentAccumulator(d)
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((d, 8)))[0]
    pools = [normal_controls(Q, 200, s) for s in range(4)]
    energies = None
    for _ in range(n_batches):
        G = torch.from_numpy(rng.standard_normal((256, d)))
        grad.update(G, groups=np.asarray(labels, dtype=object)[np.arange(256) % 5])
        act.update(G)
        be = batch_energies(Q, pools[0], [G])
        energies = be if energies is None else energies.concat(be)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"{(peak - base) / 1024:.1f}")


def measured() -> None:
    print("Measured (peak RSS growth while building the gradient moments (6 groups), the\n"
          "activation moments and 4 control pools, 256 rows per batch):")
    for d in (768, 2048):
        c = components(d)
        predicted = (c["grad moments (6 groups)"] + c["act moments"] + c["update temporaries"]
                     + c["control pools"]) / MB
        got = {}
        for nb in (4, 16):
            r = subprocess.run([sys.executable, __file__, "--child", str(d), str(nb)],
                               capture_output=True, text=True, check=True)
            got[nb] = float(r.stdout.strip().splitlines()[-1])
        print(f"  d={d}: predicted {predicted:.1f} MB; measured {got[4]:.1f} MB after 4 batches, "
              f"{got[16]:.1f} MB after 16 batches")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _measure_child(*args.child)
        return 0
    table()
    if not args.table:
        measured()
    return 0


if __name__ == "__main__":
    sys.exit(main())

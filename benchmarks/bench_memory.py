"""Device memory of ``measure``'s statistics, per site: computed, then measured.

Computed by :func:`tangentlab.measure.cost_model.device_bytes_per_site` from the structures the
device-resident core keeps for one site at one checkpoint, with the default
:class:`MeasureConfig` (5 frequency buckets, a 200-control pool and 200 full-space controls of
rank 8, fixed + refit proxies, 4096 sample rows, 64 eval batches of 4 x 128 tokens), at d = 768,
2048 and 4096: O(d^2 + batches x controls) per site. The geometry occurrences (O(tokens x d)
over the fit half) go to the host batch by batch and never accumulate on the device.

Then it measures one case: the bucketed gradient moments, the activation moments and two energy
streams built for real at d = 768 and 2048, fed 4 or 16 batches, on the GPU when there is one
(``torch.cuda.max_memory_allocated``), else on the CPU (peak resident memory): the peak does not
grow with the number of batches.

Usage::

    python benchmarks/bench_memory.py            # table + measurement (about 20 s)
    python benchmarks/bench_memory.py --table    # the table only
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys

MB = 1 << 20
DS = (768, 2048, 4096)


def components(d: int) -> dict[str, float]:
    """Bytes of each device structure of one site at one checkpoint (MeasureConfig defaults)."""
    from tangentlab.measure.cost_model import StatsShape, device_bytes_per_site

    return device_bytes_per_site(StatsShape(d=d))


def table() -> None:
    print("Device bytes per site, one checkpoint, default MeasureConfig (MB, float64):")
    names = list(components(DS[0]))
    print(f"  {'component':<36}" + "".join(f"{f'd={d}':>12}" for d in DS))
    for n in names:
        print(f"  {n:<36}" + "".join(f"{components(d)[n] / MB:>12.1f}" for d in DS))
    tot = {d: sum(components(d).values()) for d in DS}
    print(f"  {'total per site (MB)':<36}" + "".join(f"{tot[d] / MB:>12.1f}" for d in DS))
    print(f"  {'total per site (bytes)':<36}" + "".join(f"{tot[d]:>12.0f}" for d in DS))
    shared = {d: d * (d - 1) * 8 / MB for d in DS}
    print(f"  {'+ per rank: basis of 1-perp':<36}" + "".join(f"{shared[d]:>12.1f}" for d in DS))
    print("Per rank with S sites: S x total + the basis + the model + one batch's captured\n"
          "activations and gradients; float32-compensated halves every item but doubles the\n"
          "running sums (sum + compensation).")


def _measure_child(d: int, n_batches: int) -> None:
    """Build the statistics for real; print the peak memory growth in MB."""
    import numpy as np
    import torch

    from tangentlab.measure import EnergyStream, MomentAccumulator, normal_controls

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)
    # warm up every code path at a small size first (library pages, allocator pools)
    w = torch.randn(64, 64, dtype=torch.float64, device=dev)
    q = np.linalg.qr(np.random.default_rng(1).standard_normal((64, 8)))[0]
    MomentAccumulator(64, groups=["a"]).update_indexed(w, torch.zeros(64, dtype=torch.int64))
    EnergyStream(q, normal_controls(q, 4, 0)).add(w)
    if dev == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.max_memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    labels = [f"b{i}" for i in range(5)]
    grad = MomentAccumulator(d, groups=labels)
    act = MomentAccumulator(d)
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.standard_normal((d, 8)))[0]
    streams = [EnergyStream(Q, normal_controls(Q, 200, s), n_groups=5) for s in range(2)]
    idx = torch.arange(256, device=dev) % 5
    for _ in range(n_batches):
        G = torch.randn(256, d, dtype=torch.float64, device=dev)
        grad.update_indexed(G, idx)
        act.update(G)
        for st in streams:
            st.add(G, idx)
    for st in streams:
        st.finish()
    if dev == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"{dev} {(peak - base) / MB:.1f}")


def measured() -> None:
    print("Measured (peak memory growth while building the gradient moments (6 groups), the\n"
          "activation moments and 2 bucketed energy streams of 200 controls, 256 rows a batch):")
    for d in DS[:2]:
        c = components(d)
        predicted = (c["grad moments (buckets + total)"] + c["act moments"]
                     + c["update temporaries (~4 d^2)"] + c["bases (plain + 1-constrained)"] / 2
                     + c["row projections (n x M, one batch)"] / 2) / MB
        got = {}
        for nb in (4, 16):
            # a fixed mmap threshold: glibc's dynamic one lets freed per-batch temporaries
            # fragment the heap, so the peak RSS would grow with batches that hold nothing
            env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
            r = subprocess.run([sys.executable, __file__, "--child", str(d), str(nb)],
                               capture_output=True, text=True, check=True, env=env)
            got[nb] = r.stdout.strip().splitlines()[-1].split()
        print(f"  d={d}: predicted {predicted:.1f} MB; measured on {got[4][0]} {got[4][1]} MB "
              f"after 4 batches, {got[16][1]} MB after 16 batches")


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

"""The cost model's tables (``tangentlab.measure.cost_model``): FLOPs, bytes, predicted ratios, memory.

Prints, for d = 768, 2048 and 4096 (Pythia-160m, -1.4b and -6.9b shapes) with 4 sites and the
default ``MeasureConfig``:

1. FLOPs and bytes per eval token of the statistics against the model's forward+backward;
2. the predicted measure/plain ratio and statistics share on this CPU (its rates timed now,
   about a second: run it on a quiet machine), an H100-class GPU (full-rate float64) and a
   consumer GPU (1/64-rate float64), in float64 and in compensated float32;
3. device bytes per site and the largest d whose 4 sites fit next to each Pythia size on a
   24 GB and an 80 GB GPU.

Usage: python benchmarks/cost_model.py [--no-calibrate] [--host 768 2048] [--tokens 32768]
"""

from __future__ import annotations

import argparse
import sys

from tangentlab.measure.cost_model import (
    DEVICES,
    PYTHIA,
    StatsShape,
    calibrate_cpu,
    device_bytes_per_site,
    largest_d,
    model_bytes,
    model_cost,
    predict,
    stats_bytes,
    stats_flops,
)

SHAPES = {768: "160m", 2048: "1.4b", 4096: "6.9b"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-calibrate", action="store_true", help="leave out this CPU's row")
    ap.add_argument("--host", type=int, nargs="*", default=[], metavar="D",
                    help="also time the per-checkpoint host work (measure.host_cost) at these d "
                         "(e.g. --host 768 2048; minutes at large d) and add it to the predicted "
                         "ratios, spread over --tokens eval tokens per checkpoint")
    ap.add_argument("--tokens", type=int, default=32768,
                    help="eval tokens per checkpoint for --host (default: MeasureConfig's 64 x 4 "
                         "x 128)")
    args = ap.parse_args(argv)
    print("| d (model) | statistics GFLOP/token | statistics MB/token | model fwd+bwd GFLOP/token "
          "| model MB/token | FLOP ratio stats/plain |")
    print("|---|---:|---:|---:|---:|---:|")
    for d, size in SHAPES.items():
        s, m = StatsShape(d=d), PYTHIA[size]
        f, b, mc = stats_flops(s)["per_token"], stats_bytes(s)["per_token"], model_cost(m)
        print(f"| {d} ({m.name}) | {f / 1e9:.3f} | {b / 1e6:.2f} | {mc['plain_flops'] / 1e9:.2f} "
              f"| {mc['plain_bytes'] / 1e6:.2f} | {f / mc['plain_flops']:.3f} |")
    devices = dict(DEVICES)
    if not args.no_calibrate:
        cpu = calibrate_cpu()
        devices = {"cpu": cpu, **devices}
        print(f"\nthis CPU, timed: fp32 {cpu.fp32 / 1e9:.1f} GFLOP/s, fp64 {cpu.fp64 / 1e9:.1f} "
              f"GFLOP/s, copy {cpu.bandwidth / 1e9:.1f} GB/s")
    print("\npredicted measure/plain (statistics share of the measure)")
    print("| device | stats dtype | " + " | ".join(f"d = {d}" for d in SHAPES) + " |")
    print("|---|---|" + "---:|" * len(SHAPES))
    for dev in devices.values():
        for item, label in ((8, "float64"), (4, "float32-compensated")):
            cells = []
            for d, size in SHAPES.items():
                p = predict(PYTHIA[size], StatsShape(d=d, itemsize=item), dev)
                cells.append(f"{p['ratio']:.2f}x ({100 * p['stats_share']:.0f}%)")
            print(f"| {dev.name} | {label} | " + " | ".join(cells) + " |")
    if args.host:
        from tangentlab.measure.host_cost import host_seconds

        print(f"\nper-checkpoint host work (4 sites, timed here; the same on any device), and the "
              f"prediction with it spread over {args.tokens} tokens per checkpoint")
        print("| d | host s per checkpoint: total (parts) | " + " | ".join(
            f"{dev.name}, float64" for dev in devices.values()) + " |")
        print("|---:|---|" + "---:|" * len(devices))
        for d in args.host:
            size = SHAPES.get(d)
            h = host_seconds(StatsShape(d=d))
            parts = ", ".join(f"{k} {v:.2f}" for k, v in h.items() if k != "total")
            cells = []
            for dev in devices.values():
                if size is None:
                    cells.append("n/a")
                    continue
                p = predict(PYTHIA[size], StatsShape(d=d), dev, host_s=h["total"],
                            tokens=args.tokens)
                cells.append(f"{p['ratio']:.2f}x ({100 * p['stats_share']:.0f}%)")
            print(f"| {d} | {h['total']:.2f} ({parts}) | " + " | ".join(cells) + " |")
    print("\ndevice memory of the statistics, per site (MB, float64)")
    comps = {d: device_bytes_per_site(StatsShape(d=d)) for d in SHAPES}
    print("| component | " + " | ".join(f"d = {d}" for d in SHAPES) + " |")
    print("|---|" + "---:|" * len(SHAPES))
    for name in comps[768]:
        print(f"| {name} | " + " | ".join(f"{comps[d][name] / 2**20:.1f}" for d in SHAPES) + " |")
    print("| **total per site** | " + " | ".join(
        f"**{sum(comps[d].values()) / 2**20:.1f}**" for d in SHAPES) + " |")
    print("\nlargest d whose 4 sites' statistics fit next to the model (float32 weights, one "
          "512-token batch's backward)")
    print("| model (d) | model GB | 24 GB GPU: largest d | 80 GB GPU: largest d |")
    print("|---|---:|---:|---:|")
    for m in PYTHIA.values():
        mb = model_bytes(m)
        cells = []
        for gpu in (24e9, 80e9):
            left = gpu - mb
            cells.append(str(largest_d(left, StatsShape(d=m.d))) if left > 0 else "model does not fit")
        print(f"| {m.name} ({m.d}) | {mb / 1e9:.1f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

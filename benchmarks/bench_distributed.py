"""Benchmark: the same measurement and the same training on 1 rank and on 2 ranks (gloo, CPU).

Two parts, each repeated ``--repeats`` times (default 3), one torch thread per rank
(``OMP_NUM_THREADS=1``, ``threads=1``), through the real CLI (``--nproc N``, torch's elastic
launcher on loopback):

- **measure**: ``tangentlab empirical measure TRAJECTORY --nproc 1`` and ``--nproc 2`` on one
  trajectory (12 checkpoints: checkpoint-parallel on 2 ranks). Prints each run's measurement
  time (rank 0, from the end of the one-off set-up — imports, first model, eval data — to the
  last row: ``manifest.json`` ``distributed.measure_s``), the set-up time, and
  the whole command's wall time (with interpreter start and launch), the throughput ratio
  (target >= 1.6x) and the largest relative difference between the two ``results.csv``.
- **train**: ``tangentlab empirical train --nproc 1`` and ``--nproc 2`` at the same global batch
  (DDP). Prints the training loop's steps/s (``manifest.json`` ``timings_s.train``), the ratio
  (target >= 1.5x) and the largest relative loss difference at equal steps.

Figures are meaningful only on a quiet machine: the script prints ``uptime`` first and warns when
the 1-minute load is above 0.5 (other jobs on 2 cores slow a rank 15x and hide any ratio).

Usage::

    python benchmarks/bench_distributed.py                     # both parts, 3 repeats
    python benchmarks/bench_distributed.py --part measure --repeats 1
    python benchmarks/bench_distributed.py --trajectory RUN    # measure an existing run

Sizes: the measured trajectory is a decoder trained here (d=64, 2 layers, 120 steps, 12
checkpoints); each checkpoint is measured on 32 eval batches of 8 x 64 tokens with the default statistics
(200-control pool, 1000 bootstrap replicates). Training: d=128, 4 layers, batch 16 x 128, 40
steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEASURE = {"n_batches": 32, "batch_size": 8, "seq_len": 64, "sample_rows": 1024, "threads": 1,
           "causal_checkpoints": 2, "causal_batches": 2}
TRAJECTORY = {"d_model": 64, "n_layers": 2, "n_heads": 2, "steps": 120, "measure_every": 0,
              "n_checkpoints": 12, "threads": 1}
TRAIN = {"d_model": 128, "n_layers": 4, "n_heads": 4, "vocab_size": 2048, "seq_len": 128,
         "batch_size": 16, "steps": 40, "warmup_steps": 5, "n_checkpoints": 2,
         "measure_every": 0, "threads": 1, "max_docs": 40}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                "HF_HUB_OFFLINE": "1", "TANGENTLAB_QUIET": "1"})
    return env


def _cli(args: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tangentlab", *args], capture_output=True,
                       text=True, env=_env())
    if r.returncode:
        sys.stderr.write(r.stderr)
        raise SystemExit(f"command failed: tangentlab {' '.join(args)}")
    return time.perf_counter() - t0


def _sets(d: dict) -> list[str]:
    return [x for k, v in d.items() for x in ("--set", f"{k}={v}")]


def _rows(path: Path) -> list[dict]:
    with open(path / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _largest_difference(a: list[dict], b: list[dict]) -> float:
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        for k in ra:
            if ra[k] == rb[k]:
                continue
            try:
                x, y = float(ra[k]), float(rb[k])
            except ValueError:
                return math.inf
            if not (math.isnan(x) and math.isnan(y)):
                worst = max(worst, abs(x - y) / max(abs(x), 1e-300))
    return worst


def _spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f})"


def bench_measure(work: Path, trajectory: Path | None, repeats: int) -> None:
    if trajectory is None:
        trajectory = work / "trajectory"
        print(f"training the benchmark trajectory in {trajectory} ...", flush=True)
        _cli(["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--out",
              str(trajectory), "--device", "cpu", *_sets(TRAJECTORY)])
    ratios, cmd_ratios = [], []
    for rep in range(repeats):
        walls, cmds, outs = {}, {}, {}
        for n in (1, 2):
            out = work / f"measure_{rep}_{n}"
            cmds[n] = _cli(["empirical", "measure", str(trajectory), "--out", str(out),
                            "--device", "cpu", "--nproc", str(n), *_sets(MEASURE)])
            man = json.loads((out / "manifest.json").read_text())
            walls[n], outs[n] = man["distributed"]["measure_s"], out
            setup = man["distributed"]["wall_s"] - walls[n]
            mode = man["distributed"]["mode"]
            timings = {k: round(v, 2) for k, v in man.get("timings_s", {}).items()}
            print(f"  measure run {rep + 1}, {n} rank(s) [{mode}]: measurement {walls[n]:.2f} s "
                  f"(after a set-up of {setup:.2f} s), command {cmds[n]:.2f} s; rank-0 "
                  f"components {timings}", flush=True)
        diff = _largest_difference(_rows(outs[1]), _rows(outs[2]))
        ratios.append(walls[1] / walls[2])
        cmd_ratios.append(cmds[1] / cmds[2])
        print(f"measure run {rep + 1}: throughput ratio 2 ranks / 1 rank = {ratios[-1]:.3f} "
              f"(whole command {cmd_ratios[-1]:.3f}); largest relative difference of "
              f"results.csv {diff:.3g}", flush=True)
    print(f"MEASURE throughput ratio (target >= 1.6): {_spread(ratios)}; whole command "
          f"{_spread(cmd_ratios)}")


def _train_log(run: Path) -> dict[int, float]:
    lines = (run / "train_log.csv").read_text().splitlines()[1:]
    return {int(x.split(",")[0]): float(x.split(",")[1]) for x in lines}


def bench_train(work: Path, repeats: int) -> None:
    ratios = []
    for rep in range(repeats):
        rates, logs = {}, {}
        for n in (1, 2):
            out = work / f"train_{rep}_{n}"
            cmd = _cli(["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--out",
                        str(out), "--device", "cpu", "--nproc", str(n), *_sets(TRAIN)])
            man = json.loads((out / "manifest.json").read_text())
            t = man["timings_s"]["train"]
            rates[n], logs[n] = TRAIN["steps"] / t, _train_log(out)
            print(f"  train run {rep + 1}, {n} rank(s): {rates[n]:.3f} steps/s (loop {t:.2f} s, "
                  f"command {cmd:.2f} s); components {({k: round(v, 2) for k, v in man['timings_s'].items()})}",
                  flush=True)
        rel = {s: abs(logs[1][s] - logs[2][s]) / abs(logs[1][s]) for s in logs[1]}
        diff = max(rel.values())
        first = min((s for s, v in rel.items() if v > 1e-5), default=None)
        ratios.append(rates[2] / rates[1])
        print(f"train run {rep + 1}: steps/s ratio 2 ranks / 1 rank = {ratios[-1]:.3f}; largest "
              f"relative loss difference {diff:.3g} (steps 1-5: "
              f"{', '.join(f'{rel[s]:.1e}' for s in sorted(rel)[:5])}; first step above 1e-5: "
              f"{first})", flush=True)
    print(f"TRAIN steps/s ratio (target >= 1.5): {_spread(ratios)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["both", "measure", "train"], default="both")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trajectory", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores; uptime: {up}")
    if load > 0.5:
        print(f"WARNING: 1-minute load {load:.2f} > 0.5: the machine is not quiet, the ratios "
              "below are not the benchmark's figures")
    work = Path(tempfile.mkdtemp(prefix="bench_distributed_"))
    try:
        if args.part in ("both", "measure"):
            bench_measure(work, args.trajectory, args.repeats)
        if args.part in ("both", "train"):
            bench_train(work, args.repeats)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

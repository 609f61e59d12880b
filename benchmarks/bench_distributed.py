"""Benchmark: the same measurement and the same training on 1 rank and on 2 ranks (gloo, CPU).

Two parts, each repeated ``--repeats`` times (default 3), every run started on loopback through
torch's elastic launcher (what ``--nproc N`` uses):

- **train** (DDP): ``train_model`` on 1 and on 2 ranks at the same global batch, the model of
  ``--width`` (default 256: the ``medium`` preset, see ``WIDTHS``). For every run it prints, per
  rank and per step (median and quartiles, the first step left out as warm-up): ``data`` (the
  batch), ``forward``, ``backward`` (its compute), ``allreduce_wait`` (from the last gradient
  bucket being ready to the end of the last all-reduce) with the bytes reduced, ``optimizer``,
  ``logging`` (the loss collective, on the steps that reduce it) and ``other`` (the rest of the
  step: progress bar, callbacks, checkpoint writes). Then the loop's steps/s (``timings_s.train``
  less the checkpoint writes, rank 0), the ratio 2 ranks / 1 rank (target >= 1.5x), the ratio of
  the per-step medians, the **whole command's** ratio (wall time of the launch, interpreter
  start, imports, data and checkpoints included) and the largest relative loss difference.
- **measure**: ``tangentlab empirical measure TRAJECTORY --nproc 1`` and ``--nproc 2`` on one
  trajectory (12 checkpoints: checkpoint-parallel on 2 ranks): measurement time after set-up,
  the whole command's time, the ratio (target >= 1.6x) and the largest relative difference of
  the two ``results.csv``.

Every run is preceded by ``uptime``. Figures are meaningful only on a quiet machine: when the
1-minute load is above 0.5 before either run of a pair, the pair's ratio is withheld (the
splits are still printed) unless ``--force``.

Threads: each rank of 2 uses ``cores // 2`` torch threads (1 on 2 cores); the 1-rank run uses
``--one-rank-threads`` (default 1, what the presets' ``threads = 1`` gives a user; 0 = every
core, ``cores // 1``). Both are printed.

Each fix of issue 22 can be switched off to measure its effect (all on by default):
``--full-batch`` (every rank builds the whole global batch), ``--data-everywhere`` (every rank
trains the tokenizer), ``--bucket-mb 100`` (one gradient bucket: the all-reduce after the
backward), ``--log-every 1`` (a loss collective and host sync every step).

Usage::

    python benchmarks/bench_distributed.py --part train                # d = 256, 3 repeats
    python benchmarks/bench_distributed.py --part train --width 128 256 512 --repeats 1
    python benchmarks/bench_distributed.py --part train --log-every 1 --bucket-mb 100 --full-batch
    python benchmarks/bench_distributed.py --part measure --repeats 1
    python benchmarks/bench_distributed.py --trajectory RUN           # measure an existing run

Sizes: training uses the ``small`` preset's data shape (vocabulary 4096, batch 16 x 128 tokens,
AdamW) with the width's layers and heads (``WIDTHS``), 40 docs of the Wikipedia sample, 2
checkpoints. The measured trajectory is a decoder trained here (d=64, 2 layers, 120 steps, 12
checkpoints); each checkpoint is measured on 32 eval batches of 8 x 64 tokens with the default
statistics (200-control pool, 1000 bootstrap replicates).
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
#: --width: layers and heads (head size 32-64) and the steps of one benchmark run. 128 is the
#: ``small`` preset's model, 256 the ``medium`` preset's.
WIDTHS = {128: {"n_layers": 4, "n_heads": 4, "steps": 40},
          256: {"n_layers": 6, "n_heads": 4, "steps": 24},
          512: {"n_layers": 8, "n_heads": 8, "steps": 12}}
DEFAULT_WIDTH = 256
#: The preset each width's runs start from (its model is the width's; others: ``small``).
PRESET_OF = {128: "small", 256: "medium"}
TRAIN = {"max_docs": 40, "warmup_steps": 5, "n_checkpoints": 2, "late_checkpoints": 0,
         "measure_every": 0}
PHASES = ("data", "forward", "backward", "allreduce_wait", "optimizer", "logging", "other")
LOAD_LIMIT = 0.5


def _env(threads: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t = str(threads)
    env.update({"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "OPENBLAS_NUM_THREADS": t,
                "HF_HUB_OFFLINE": "1", "TANGENTLAB_QUIET": "1"})
    return env


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: Seconds a run waits at most for the 1-minute load to settle below LOAD_LIMIT (``--settle``).
SETTLE_S = 150.0
_SETTLE = {"s": SETTLE_S}  # what this run uses (--settle)


def _uptime(what: str) -> float:
    """Wait up to SETTLE_S for the load to settle, print ``uptime``; return the 1-minute load.

    The benchmark's own previous run leaves the 1-minute load near 1-2 on two cores (it decays
    with a 60 s time constant), so each run first waits, polling every 5 s, until the load is
    at most LOAD_LIMIT or SETTLE_S has passed; the wait is printed. Another job on the machine
    keeps the load up, and the pair's ratio is then withheld as before.
    """
    start = time.monotonic()
    while os.getloadavg()[0] > LOAD_LIMIT and time.monotonic() - start < _SETTLE["s"]:
        time.sleep(5.0)
    waited = time.monotonic() - start
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"  [{what}] uptime: {up} (waited {waited:.0f} s for the load to settle)", flush=True)
    return os.getloadavg()[0]


def _run(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.stderr.write(r.stderr[-4000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    return time.perf_counter() - t0


def _cli(args: list[str], threads: int = 1) -> float:
    return _run([sys.executable, "-m", "tangentlab", *args], _env(threads))


def _sets(d: dict) -> list[str]:
    return [x for k, v in d.items() for x in ("--set", f"{k}={v}")]


def _spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f})"


def _ratio_line(label: str, ratios: list[float], withheld: list[bool], force: bool) -> str:
    shown = [r for r, w in zip(ratios, withheld, strict=True) if force or not w]
    if not shown:
        return (f"{label}: withheld (the 1-minute load was above {LOAD_LIMIT} before every "
                "pair; --force prints it)")
    note = "" if len(shown) == len(ratios) else f" ({len(ratios) - len(shown)} loaded pair(s) left out)"
    forced = " [FORCED: loaded machine]" if force and any(withheld) else ""
    return f"{label}: {_spread(shown)}{note}{forced}"


# -- measure -----------------------------------------------------------------------------------


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


def bench_measure(work: Path, trajectory: Path | None, repeats: int, force: bool) -> None:
    if trajectory is None:
        trajectory = work / "trajectory"
        print(f"training the benchmark trajectory in {trajectory} ...", flush=True)
        _cli(["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--out",
              str(trajectory), "--device", "cpu", *_sets(TRAJECTORY)])
    ratios, cmd_ratios, withheld = [], [], []
    for rep in range(repeats):
        walls, cmds, outs, loaded = {}, {}, {}, False
        for n in (1, 2):
            out = work / f"measure_{rep}_{n}"
            loaded |= _uptime(f"measure run {rep + 1}, {n} rank(s)") > LOAD_LIMIT
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
        withheld.append(loaded)
        shown = (f"throughput ratio 2 ranks / 1 rank = {ratios[-1]:.3f} (whole command "
                 f"{cmd_ratios[-1]:.3f})" if force or not loaded else
                 f"ratio withheld (load above {LOAD_LIMIT}; --force prints it)")
        print(f"measure run {rep + 1}: {shown}; largest relative difference of results.csv "
              f"{diff:.3g}", flush=True)
    print(_ratio_line("MEASURE throughput ratio (target >= 1.6)", ratios, withheld, force))
    print(_ratio_line("MEASURE whole-command ratio", cmd_ratios, withheld, force))


# -- train -------------------------------------------------------------------------------------


def train_overrides(width: int, steps: int | None = None) -> dict:
    """The benchmark's training overrides (on the ``small`` preset) at ``width``."""
    if width not in WIDTHS:
        raise SystemExit(f"--width must be one of {', '.join(map(str, WIDTHS))}; got {width}")
    shape = WIDTHS[width]
    return {**TRAIN, "preset": PRESET_OF.get(width, "small"), "d_model": width, "n_layers": shape["n_layers"], "n_heads": shape["n_heads"],
            "steps": steps or shape["steps"]}


def _worker(spec_path: str) -> int:
    """One rank of a benchmark training run (started by torch's launcher): train, save timings."""
    from tangentlab import distributed

    spec = json.loads(Path(spec_path).read_text())

    def rank_main(args) -> int:  # noqa: ARG001
        from tangentlab.empirical import train_model
        from tangentlab.empirical.training.train_step import DDPOptions, RecordingStepTimer

        timer = RecordingStepTimer()
        overrides = dict(spec["overrides"])
        train_model("decoder", spec["out"], preset=overrides.pop("preset"), device="cpu",
                    overrides=overrides, ddp_options=DDPOptions(**spec["options"]),
                    step_timer=timer)
        rank = distributed.current().rank
        Path(spec["timings"], f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "threads": timer.threads, "steps": timer.steps}))
        return 0

    return distributed.run_rank(rank_main, argparse.Namespace(device="cpu"))


def _train_once(work: Path, tag: str, n: int, overrides: dict, options: dict,
                threads: int) -> dict:
    from tangentlab.distributed import free_port

    out, timings = work / f"train_{tag}_{n}", work / f"timings_{tag}_{n}"
    timings.mkdir()
    spec = work / f"spec_{tag}_{n}.json"
    spec.write_text(json.dumps({"out": str(out), "timings": str(timings), "options": options,
                                "overrides": {**overrides, "threads": threads}}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(Path(__file__).resolve()), "--worker", str(spec)]
    wall = _run(cmd, _env(threads))
    man = json.loads((out / "manifest.json").read_text())
    t = man["timings_s"]
    loop = t["train"] - t.get("checkpoints", 0.0)
    ranks = [json.loads((timings / f"rank{r}.json").read_text()) for r in range(n)]
    lines = (out / "train_log.csv").read_text().splitlines()[1:]
    return {"wall": wall, "loop": loop, "rate": overrides["steps"] / loop, "ranks": ranks,
            "log": {int(x.split(",")[0]): float(x.split(",")[1]) for x in lines},
            "components": {k: round(v, 2) for k, v in t.items()}}


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def print_split(ranks: list[dict]) -> float:
    """Print each rank's per-step phases (ms, first step left out); return rank 0's median step."""
    med0 = math.nan
    for rec in ranks:
        steps = rec["steps"][1:] or rec["steps"]
        parts = []
        for phase in PHASES:
            if phase == "other":
                xs = [s["step"] - sum(s.get(p, 0.0) for p in PHASES[:-1]) for s in steps]
            else:
                xs = [s[phase] for s in steps if phase in s]
            if not xs:
                continue
            q1, q2, q3 = _quartiles([1e3 * x for x in xs])
            count = "" if len(xs) == len(steps) else f" x{len(xs)}"
            parts.append(f"{phase} {q2:.1f} [{q1:.1f}-{q3:.1f}]{count}")
        q1, q2, q3 = _quartiles([1e3 * s["step"] for s in steps])
        mb = [s["allreduce_bytes"] / 2**20 for s in steps if "allreduce_bytes" in s]
        nb = [s["allreduce_buckets"] for s in steps if "allreduce_buckets" in s]
        reduced = (f"; all-reduced {statistics.median(mb):.2f} MB/step in "
                   f"{statistics.median(nb):.0f} bucket(s)" if mb else "")
        print(f"    rank {rec['rank']} ({rec['threads']} thread(s)), ms/step median [q1-q3] over "
              f"{len(steps)} steps: step {q2:.1f} [{q1:.1f}-{q3:.1f}]; {'; '.join(parts)}"
              f"{reduced}", flush=True)
        if rec["rank"] == 0:
            med0 = q2
    return med0


def bench_train(work: Path, widths: list[int], repeats: int, options: dict, one_rank_threads: int,
                steps: int | None, force: bool) -> None:
    cores = _cores()
    threads = {1: one_rank_threads or cores, 2: max(1, cores // 2)}
    print(f"train: {cores} cores; 1 rank uses {threads[1]} torch thread(s), each of 2 ranks "
          f"{threads[2]}; DDP options {options}", flush=True)
    summary = []
    for width in widths:
        ov = train_overrides(width, steps)
        print(f"width d = {width}: {ov['n_layers']} layers, {ov['n_heads']} heads, {ov['steps']} "
              f"steps, batch 16 x 128 (preset {ov['preset']} and {TRAIN})", flush=True)
        ratios, step_ratios, cmd_ratios, withheld = [], [], [], []
        for rep in range(repeats):
            got, loaded = {}, False
            for n in (1, 2):
                loaded |= _uptime(f"d={width} train run {rep + 1}, {n} rank(s)") > LOAD_LIMIT
                got[n] = _train_once(work, f"{width}_{rep}", n, ov, options, threads[n])
                g = got[n]
                print(f"  d={width} run {rep + 1}, {n} rank(s): {g['rate']:.3f} steps/s (loop "
                      f"{g['loop']:.2f} s without checkpoint writes), whole command "
                      f"{g['wall']:.2f} s; rank-0 components {g['components']}", flush=True)
                g["median_step"] = print_split(g["ranks"])
            a, b = got[1]["log"], got[2]["log"]
            rel = {s: abs(a[s] - b[s]) / abs(a[s]) for s in a}
            first = min((s for s, v in rel.items() if v > 1e-5), default=None)
            ratios.append(got[2]["rate"] / got[1]["rate"])
            step_ratios.append(got[1]["median_step"] / got[2]["median_step"])
            cmd_ratios.append(got[1]["wall"] / got[2]["wall"])
            withheld.append(loaded)
            shown = (f"steps/s ratio 2 ranks / 1 rank = {ratios[-1]:.3f} (per-step medians "
                     f"{step_ratios[-1]:.3f}, whole command {cmd_ratios[-1]:.3f})"
                     if force or not loaded else
                     f"ratio withheld (load above {LOAD_LIMIT}; --force prints it)")
            print(f"d={width} train run {rep + 1}: {shown}; largest relative loss difference "
                  f"{max(rel.values()):.3g} (first step above 1e-5: {first})", flush=True)
        summary.append((width, ratios, step_ratios, cmd_ratios, withheld))
    for width, ratios, step_ratios, cmd_ratios, withheld in summary:
        print(_ratio_line(f"TRAIN d={width} steps/s ratio (target >= 1.5)", ratios, withheld, force))
        print(_ratio_line(f"TRAIN d={width} per-step median ratio", step_ratios, withheld, force))
        print(_ratio_line(f"TRAIN d={width} whole-command ratio (launch included)", cmd_ratios,
                          withheld, force))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["both", "measure", "train"], default="both")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trajectory", type=Path, default=None)
    ap.add_argument("--width", type=int, nargs="+", default=[DEFAULT_WIDTH],
                    help=f"training widths d_model among {sorted(WIDTHS)} (default {DEFAULT_WIDTH})")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: WIDTHS)")
    ap.add_argument("--one-rank-threads", type=int, default=1,
                    help="torch threads of the 1-rank run (0: every core)")
    ap.add_argument("--full-batch", action="store_true",
                    help="every rank builds the whole global batch (DDPOptions.shard_batch off)")
    ap.add_argument("--data-everywhere", action="store_true",
                    help="every rank builds tokenizer and stream (DDPOptions.rank0_data off)")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help="DDP bucket size in MB (default torch's 25; 100 = one bucket)")
    ap.add_argument("--log-every", type=int, default=50,
                    help="steps between loss reductions (1 = every step)")
    ap.add_argument("--force", action="store_true", help="print ratios on a loaded machine")
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help="seconds each run waits at most for the 1-minute load to fall to "
                         f"{LOAD_LIMIT} (0: no wait)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker)
    _SETTLE["s"] = max(0.0, args.settle)
    options = {"shard_batch": not args.full_batch, "rank0_data": not args.data_everywhere,
               "bucket_mb": args.bucket_mb, "log_every": args.log_every}
    print(f"machine: {_cores()} cores; 1-minute load must be <= {LOAD_LIMIT} before each run for "
          "its ratio to be printed" + (" (--force: printed anyway)" if args.force else ""))
    work = Path(tempfile.mkdtemp(prefix="bench_distributed_"))
    try:
        if args.part in ("both", "train"):
            bench_train(work, args.width, args.repeats, options, args.one_rank_threads,
                        args.steps, args.force)
        if args.part in ("both", "measure"):
            bench_measure(work, args.trajectory, args.repeats, args.force)
    finally:
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

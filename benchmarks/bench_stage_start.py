"""Benchmark: starting worker processes that load a model, from a fork server or by ``spawn``.

Runs, in one process, ``--stages`` one-process pools one after another, each running one task
that does what every model stage and ``--nproc`` rank does first (imports torch and
``transformers.modeling_utils``, builds a tiny ``transformers`` model):

- (a) ours: pools on :func:`tangentlab._runtime.fork_server` (the children fork from a server
  that imported :data:`tangentlab._runtime.FORK_SERVER_PRELOAD` once);
- (b) the baseline: pools on ``multiprocessing.get_context("spawn")`` (a fresh interpreter per
  process, which imports everything again: what the stages and ranks did before).

Each child reports its own CPU seconds (a forked or spawned child's clock starts at zero); the
fork server's own CPU (its one-time preload) is read from ``/proc`` and added to (a). It prints
both totals, their ratio, the per-child CPU of each way, and the wall seconds. (a) is run first,
so the disk cache it warms also serves (b).

Usage::

    python benchmarks/bench_stage_start.py              # 4 stages
    python benchmarks/bench_stage_start.py --stages 8
"""

from __future__ import annotations

import argparse
import os
import time


def _task() -> float:
    """What a model stage starts with; returns this process's CPU seconds so far."""
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16,
                               bos_token_id=0, eos_token_id=0))
    return time.process_time()


def _server_cpu() -> float:
    """CPU seconds of this process's fork server so far (0 where it never started)."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(ctx, stages: int) -> tuple[list[float], float]:
    from concurrent.futures import ProcessPoolExecutor

    cpu, t0 = [], time.perf_counter()
    for _ in range(stages):
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            cpu.append(pool.submit(_task).result())
    return cpu, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=int, default=4)
    args = ap.parse_args(argv)
    import multiprocessing

    from tangentlab._runtime import fork_server

    ours, ours_wall = _run(fork_server(), args.stages)
    server = _server_cpu()
    base, base_wall = _run(multiprocessing.get_context("spawn"), args.stages)
    a, b = sum(ours) + server, sum(base)
    print(f"(a) fork server: {a:.1f} CPU-s = server preload {server:.1f} + children "
          f"{' + '.join(f'{c:.1f}' for c in ours)}; wall {ours_wall:.1f} s")
    print(f"(b) spawn:       {b:.1f} CPU-s = children {' + '.join(f'{c:.1f}' for c in base)}; "
          f"wall {base_wall:.1f} s")
    print(f"ratio (b)/(a): CPU {b / a:.2f}, wall {base_wall / ours_wall:.2f} ({args.stages} stages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A rank program for tests/test_distributed.py, run under ``torch.distributed.run``.

``python -m torch.distributed.run ... tests/dist_worker.py MODE OUT``:

- ``collectives``: exercises every :class:`tangentlab.distributed.World` collective; rank 0
  writes what it saw to ``OUT`` (JSON), the other ranks write nothing;
- ``fail-rank-1``: rank 1 raises a ConfigError after a barrier, the others wait in a collective;
- ``kill-rank-1``: rank 1 kills itself with SIGKILL part-way;
- ``train``: a tiny DDP training run into ``OUT/run`` with a recording step timer and
  ``DDPOptions(log_every=3)``, counting the loss collectives and the tokenizer trainings of each
  rank; every rank writes ``OUT/rank{r}.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


def _collectives(args) -> int:
    import numpy as np

    from tangentlab import distributed
    from tangentlab.errors import ConfigError

    w = distributed.current()
    r = w.rank
    # a sum whose value depends on the order of addition: rank-specific magnitudes
    part = np.array([[1e16 if r == 0 else 1.0, (r + 1) * 0.1]], dtype=np.float64)
    total = w.sum_float64(part)
    rows = np.arange((r + 1) * 2 * 3, dtype=np.float64).reshape(-1, 3) + 100 * r
    cat = w.concat(rows)
    flags = w.concat(np.array([r % 2 == 0] * (r + 1)))
    obj = w.broadcast_object({"seed": 7, "rank": r})
    gathered = w.all_gather_object(("rank", r))
    n = w.sum_int(r + 1)
    share = w.shard(list(range(10)))
    shares = w.all_gather_object(share)
    folded = w.fold_to_main([r], lambda a, b: a + b)  # rank 0 only; others None
    assert (folded is None) == (not w.is_main)
    if not w.is_main:
        return 0
    if os.path.exists(args.out):
        raise ConfigError("output exists")
    with open(args.out, "w") as f:
        json.dump({
            "size": w.size, "backend": w.backend, "device": w.device,
            "sum": total.tolist(), "concat": cat.tolist(), "flags": flags.tolist(),
            "broadcast": obj, "gathered": gathered, "sum_int": n, "shares": shares, "folded": folded,
        }, f)
    return 0


def _fail(args) -> int:
    from tangentlab import distributed
    from tangentlab.errors import ConfigError

    w = distributed.current()
    w.barrier()
    if w.rank == 1:
        if args.mode == "kill-rank-1":
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        raise ConfigError("rank one saw bad input: unknown site 'blocks.99.resid_post'")
    w.barrier()  # never completes: rank 1 is gone
    time.sleep(30)
    with open(args.out, "w") as f:
        f.write("partial\n")
    return 0


def _train(args) -> int:
    from pathlib import Path

    from tangentlab import distributed
    from tangentlab.empirical import train_model
    from tangentlab.empirical.loading import tokenizer as tok
    from tangentlab.empirical.training.train_step import DDPOptions, RecordingStepTimer

    calls = {"sum_float64": 0, "train_tokenizer": 0}
    world_cls = distributed.World
    real_sum, real_tok = world_cls.sum_float64, tok.train_tokenizer

    def counted_sum(self, array):
        calls["sum_float64"] += 1
        return real_sum(self, array)

    def counted_tok(*a, **k):
        calls["train_tokenizer"] += 1
        return real_tok(*a, **k)

    world_cls.sum_float64, tok.train_tokenizer = counted_sum, counted_tok
    timer = RecordingStepTimer()
    run = train_model("decoder", Path(args.out) / "run", preset="tiny", device="cpu",
                      overrides={"measure_every": 0, "steps": 6, "n_checkpoints": 2},
                      ddp_options=DDPOptions(log_every=3), step_timer=timer)
    w = distributed.current()
    from safetensors.numpy import load_file

    weights = load_file(str(run / "checkpoints" / "step_000006" / "model.safetensors"))
    # the gradients DDP reduces: every parameter once (tied embeddings are one parameter)
    grad_bytes = 4 * sum(v.size for k, v in weights.items() if k != "lm_head.weight")
    with open(Path(args.out) / f"rank{w.rank}.json", "w") as f:
        json.dump({"calls": calls, "steps": timer.steps, "threads": timer.threads,
                   "grad_bytes": grad_bytes}, f)
    return 0


def main() -> int:
    from tangentlab import distributed

    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("out")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    func = {"collectives": _collectives, "train": _train}.get(args.mode, _fail)
    return distributed.run_rank(func, args)


if __name__ == "__main__":
    sys.exit(main())

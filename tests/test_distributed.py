"""tangentlab.distributed: sharding, devices, the single-process world, and real gloo ranks.

The multi-rank tests start ``tests/dist_worker.py`` under ``torch.distributed.run`` on a free
loopback port (gloo, CPU), as a user's torchrun would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tangentlab import distributed
from tangentlab.distributed import World, choose_mode, shard_bounds, strip_nproc
from tangentlab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@given(st.integers(0, 200), st.integers(1, 9))
def test_shards_are_contiguous_balanced_and_cover_everything(n, size):
    bounds = [shard_bounds(n, size, r) for r in range(size)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # rank order = item order
    lengths = [hi - lo for lo, hi in bounds]
    assert max(lengths) - min(lengths) <= 1


def test_shard_bounds_rejects_a_rank_outside_the_world():
    with pytest.raises(ConfigError, match="rank 2 of 2"):
        shard_bounds(5, 2, 2)


def test_choose_mode():
    assert choose_mode(10, 8, 1) == "single"
    assert choose_mode(10, 8, 3) == "checkpoint"  # more checkpoints than ranks
    assert choose_mode(3, 8, 3) == "data"
    assert choose_mode(1, 8, 2) == "data"
    with pytest.raises(ConfigError, match="more n_batches"):
        choose_mode(1, 2, 3)


def test_single_process_world_is_the_identity():
    w = World()
    a = np.arange(6.0).reshape(2, 3)
    assert w.is_main and not w.distributed
    np.testing.assert_array_equal(w.sum_float64(a), a)
    np.testing.assert_array_equal(w.concat(a), a)
    assert w.broadcast_object({"x": 1}) == {"x": 1}
    assert w.all_gather_object(3) == [3]
    assert w.sum_int(4) == 4
    assert w.shard([1, 2, 3]) == [1, 2, 3]
    assert w.fold_to_main([5], lambda a, b: a + b) == [5]
    assert distributed.current() == World() and not distributed.launched()


def test_resolve_device():
    assert distributed.resolve_device("cpu") == "cpu"
    assert distributed.resolve_device("CPU") == "cpu"
    assert distributed.resolve_device("auto") in {"cpu", "cuda", "mps"}
    with pytest.raises(ConfigError, match="auto, cpu, cuda, cuda:N or mps"):
        distributed.resolve_device("tpu")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            distributed.resolve_device("cuda:1")
    assert distributed.backend_for("cuda:0") == "nccl" and distributed.backend_for("cpu") == "gloo"


def test_strip_nproc():
    assert strip_nproc(["a", "--nproc", "2", "--out", "x", "--nproc=3"]) == ["a", "--out", "x"]


def test_device_flag_accepts_indexed_cuda_and_mps():
    from tangentlab.cli import build_parser

    p = build_parser()
    for dev in ("cuda:1", "mps", "cpu", "auto"):
        args = p.parse_args(["empirical", "measure", "T", "--out", "O", "--device", dev])
        assert args.device == dev and args.nproc == 1


def _torchrun(nproc: int, logs: Path, *args: str, timeout: int = 180, **env_extra: str):
    """``torchrun`` of tests/dist_worker.py; the elastic agent's rank folders go to ``logs``
    (without ``--log-dir`` it leaves a ``torchelastic_*`` folder in the system temp directory)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", TANGENTLAB_QUIET="1", **env_extra)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(distributed.free_port()),
           "--log-dir", str(logs), str(ROOT / "tests" / "dist_worker.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
def test_collectives_on_three_gloo_ranks(tmp_path):
    out = tmp_path / "seen.json"
    r = _torchrun(3, tmp_path / "elastic", "collectives", str(out))
    assert r.returncode == 0, r.stderr
    seen = json.loads(out.read_text())
    assert (seen["size"], seen["backend"], seen["device"]) == (3, "gloo", "cpu")
    # rank order: (1e16 + 1) + 1 == 1e16; any other order gives 1e16 + 2
    assert seen["sum"][0][0] == 1e16
    assert seen["sum"][0][1] == (0.1 + 0.2) + 0.30000000000000004
    expected = np.concatenate([np.arange((r + 1) * 6.0).reshape(-1, 3) + 100 * r for r in range(3)])
    np.testing.assert_array_equal(seen["concat"], expected)
    assert seen["flags"] == [True, False, False, True, True, True]
    assert seen["broadcast"] == {"seed": 7, "rank": 0}
    assert seen["gathered"] == [["rank", 0], ["rank", 1], ["rank", 2]]
    assert seen["sum_int"] == 6
    assert seen["shares"] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert seen["folded"] == [0, 1, 2]  # point-to-point, folded in rank order


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fail-rank-1", "kill-rank-1"])
def test_a_failing_rank_ends_every_rank_with_one_line(tmp_path, mode):
    out = tmp_path / "never.txt"
    r = _torchrun(2, tmp_path / "elastic", mode, str(out))
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tangentlab: error:")]
    assert len(lines) == 1, r.stderr
    if mode == "fail-rank-1":  # rank 0 prints rank 1's message
        assert "unknown site 'blocks.99.resid_post' (on rank 1 of 2)" in lines[0]
    else:
        assert "another rank stopped part-way" in lines[0]
    assert not out.exists()


_STOPPED_RANK = """
import os, signal, sys
from types import SimpleNamespace
from tangentlab.distributed import run_rank

def command(args):
    if sys.argv[1] == "ctrl-c":
        raise KeyboardInterrupt
    os.kill(os.getpid(), signal.SIGTERM)  # what torch's agent sends every rank
    signal.pause()

run_rank(command, SimpleNamespace(device="cpu"))
"""


@pytest.mark.parametrize("how, launcher_got, line", [
    ("ctrl-c", "", "stopped by SIGINT"),
    ("sigterm", "SIGTERM", "stopped by SIGTERM"),
    ("sigterm", "", "another rank stopped part-way without a message (killed or out of memory?)"),
])
def test_a_stopped_rank_0_names_the_signal_a_failing_one_would_not(tmp_path, how, launcher_got,
                                                                  line):
    """Rank 0 stopped by Ctrl-C, or by the agent after the launcher got SIGTERM (the launcher
    writes ``LAUNCHER_SIGNAL`` beside the reported marker), says so; stopped by the agent with
    no such word from the launcher, it cannot tell why (a peer may have been killed). Before,
    a Ctrl-C read "another rank stopped part-way" too."""
    reported = tmp_path / "rank-0-reported"
    if launcher_got:
        (tmp_path / distributed.LAUNCHER_SIGNAL).write_text(launcher_got)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{distributed.REPORTED_ENV: str(reported)})
    r = subprocess.run([sys.executable, "-c", _STOPPED_RANK, how], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [f"tangentlab: error: {line}; no results were written"]
    assert reported.exists()  # so the launcher prints no second line


def test_autocast_region_keeps_float64_statistics():
    import torch

    from tangentlab.empirical.measurement.parallel import autocast

    a32 = torch.ones(4, 4)
    a64 = torch.ones(4, 4, dtype=torch.float64)
    with autocast("cpu", "bf16"):
        assert (a32 @ a32).dtype == torch.bfloat16  # the forward's products run in bf16
        assert (a64 @ a64).dtype == torch.float64  # float64 statistics are never cast
    with autocast("cpu", None):
        assert (a32 @ a32).dtype == torch.float32
    with pytest.raises(ConfigError, match="needs a GPU"):
        autocast("cpu", "fp16")
    with pytest.raises(ConfigError, match="bf16, fp16"):
        autocast("cpu", "int8")


@pytest.mark.slow
def test_ddp_training_reduces_the_loss_every_n_steps_and_times_each_phase(tmp_path):
    """Two gloo ranks, 6 steps, log_every=3: two loss collectives (not one per step), the
    tokenizer trained on rank 0 only, and every step's phases recorded with the bytes reduced.
    Rank 0 pauses 2 s before it renames the last checkpoint into place, and rank 1 reads that
    checkpoint as soon as ``train_model`` returns: a rank that returned before rank 0 finished
    writing fails here every time (CI once lost that race at random)."""
    r = _torchrun(2, tmp_path / "elastic", "train", str(tmp_path),
                  TANGENTLAB_TEST_PAUSE_AT="checkpoint:6", TANGENTLAB_TEST_PAUSE_SECONDS="2")
    assert r.returncode == 0, r.stderr
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in range(2)]
    for rank, rec in enumerate(ranks):
        assert rec["calls"]["sum_float64"] == 2, rec["calls"]  # steps 3 and 6, not 1..6
        assert rec["calls"]["train_tokenizer"] == (1 if rank == 0 else 0), rec["calls"]
        assert rec["threads"] == 1  # OMP_NUM_THREADS=1 and the tiny preset's threads = 1
        steps = rec["steps"]
        assert len(steps) == 6
        for k, s in enumerate(steps, 1):
            for phase in ("data", "forward", "backward", "allreduce_wait", "optimizer"):
                assert s[phase] >= 0.0, (k, phase, s)
            assert ("logging" in s) == (k in (3, 6)), (k, s)
            assert s["allreduce_bytes"] == rec["grad_bytes"]  # every gradient, once per step
            assert s["allreduce_buckets"] >= 1
            parts = sum(s[p] for p in ("data", "forward", "backward", "allreduce_wait",
                                       "optimizer", "logging") if p in s)
            assert parts <= s["step"] * (1 + 1e-9)
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["ddp_options"]["log_every"] == 3 and man["ddp_options"]["shard_batch"] is True
    losses = (tmp_path / "run" / "train_log.csv").read_text().splitlines()[1:]
    assert [int(x.split(",")[0]) for x in losses] == [1, 2, 3, 4, 5, 6]

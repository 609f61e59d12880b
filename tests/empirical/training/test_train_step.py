"""tangentlab.empirical.training.train_step: batch shards, the deferred loss log, the no-op timer."""

from __future__ import annotations

import math

import pytest
import torch

from tangentlab.distributed import World
from tangentlab.empirical.loading.data import make_batch
from tangentlab.empirical.measurement.parallel import n_targets
from tangentlab.empirical.training import train_step
from tangentlab.empirical.training.train_step import (
    NO_TIMER,
    DDPOptions,
    LossLog,
    RecordingStepTimer,
    shard_batch,
)
from tangentlab.errors import ConfigError

STREAM = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@pytest.mark.parametrize("size", [2, 3])
def test_a_ranks_shard_is_its_rows_of_the_global_batch(arch, size):
    kw = {"batch_size": 7, "seq_len": 16, "arch": arch, "seed": 5, "mask_id": 50,
          "vocab_size": 51, "mlm_probability": 0.3, "special_ids": [0]}
    for step in (0, 9):
        full_x, full_y, _ = make_batch(STREAM, step, **kw)
        xs, ys = [], []
        for rank in range(size):
            x, y, n = shard_batch(STREAM, step, World(rank=rank, size=size), **kw)
            assert n == n_targets(full_y, arch)  # the whole batch's targets, on every rank
            xs.append(x)
            ys.append(y)
        assert torch.equal(torch.cat(xs), full_x) and torch.equal(torch.cat(ys), full_y)


def test_shard_batch_refuses_fewer_rows_than_ranks():
    with pytest.raises(ConfigError, match="batch_size >= --nproc"):
        shard_batch(STREAM, 0, World(rank=0, size=3), batch_size=2, seq_len=8, arch="decoder",
                    seed=0)


def test_loss_log_returns_the_pending_steps_in_order_and_empties():
    log = LossLog(World())
    assert log.flush() == []
    for step, v in [(1, 2.0), (2, float("nan")), (3, 1.5)]:
        log.add(step, torch.tensor(v, dtype=torch.float32), {"lr": 0.1 * step})
    assert len(log) == 3
    rows = log.flush()
    assert [s for s, _, _ in rows] == [1, 2, 3] and len(log) == 0
    assert rows[0][1] == 2.0 and math.isnan(rows[1][1]) and rows[2][2] == {"lr": 0.1 * 3}
    assert train_step.first_non_finite(rows) == (2, rows[1][1])
    assert train_step.first_non_finite(rows[:1]) is None


def test_the_default_timer_reads_no_clock(monkeypatch):
    def no_clock():
        raise AssertionError("the no-op timer read the clock")

    monkeypatch.setattr(train_step.time, "perf_counter", no_clock)
    assert not NO_TIMER.records
    NO_TIMER.begin_step(0)
    with NO_TIMER.section("forward"), NO_TIMER.section("backward"):
        pass
    NO_TIMER.add("allreduce_bytes", 8)
    NO_TIMER.end_step()
    assert NO_TIMER.section("a") is NO_TIMER.section("b")  # one shared no-op context


def test_recording_timer_adds_phases_within_a_step():
    t = RecordingStepTimer()
    t.add("forward", 1.0)  # outside a step: ignored
    t.begin_step(0)
    t.add("backward", 0.5)
    t.add("backward", 0.25)
    t.end_step()
    assert len(t.steps) == 1 and t.steps[0]["backward"] == 0.75 and "forward" not in t.steps[0]
    assert t.steps[0]["step"] >= 0 and t.threads == torch.get_num_threads()


def test_ddp_options_refuse_impossible_settings():
    with pytest.raises(ConfigError, match="log_every must be >= 1"):
        DDPOptions(log_every=0)
    with pytest.raises(ConfigError, match="bucket_mb must be > 0"):
        DDPOptions(bucket_mb=0)
    assert DDPOptions().record()["log_every"] == 50


def test_callbacks_say_when_they_need_the_loss():
    class Every:
        every = 5

    assert train_step.callback_due(object(), 3, 10)  # no `every`: every step
    assert train_step.callback_due(Every(), 5, 12) and train_step.callback_due(Every(), 12, 12)
    assert not train_step.callback_due(Every(), 6, 12)

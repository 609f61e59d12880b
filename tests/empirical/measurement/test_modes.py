"""The execution modes of measure_trajectory (empirical/measurement/modes.py), without a model or a launch."""

from __future__ import annotations

from types import SimpleNamespace

from tangentlab.distributed import World
from tangentlab.empirical.measurement.modes import (
    CheckpointParallel,
    DataParallel,
    SingleProcess,
    execution_mode,
)


class _Partial:
    def __init__(self, saved):
        self.saved = set(saved)

    def has(self, i):
        return i in self.saved


class _Rank1(World):
    """Rank 1 of 2 whose broadcasts return rank 0's answer (here: always True)."""

    def broadcast_object(self, obj):
        return True


def _setup(n_batches: int):
    return SimpleNamespace(eval_data=SimpleNamespace(batches=[SimpleNamespace(half="fit")] * n_batches))


def test_one_process_measures_every_checkpoint_and_changes_nothing():
    mode = execution_mode(World(), _setup(4), 5)
    assert isinstance(mode, SingleProcess) and mode.name == "single" and mode.mine == [0, 1, 2, 3, 4]
    assert mode.share is None
    calls = []
    got = mode.fixed_proxies(lambda *a, skip: calls.append(skip) or ({"s": 1}, {}), None, None,
                             [], "cpu", None, None, skip=frozenset({2}))
    assert got == ({"s": 1}, {}) and calls == [frozenset({2})]
    assert mode.previous_refits(None, None, None, [], None, None) == {}
    assert mode.saved(_Partial({3}), 3) and not mode.saved(_Partial({3}), 1)
    assert mode.gather([1], [2], [3]) == ([1], [2], [3])


def test_checkpoint_parallel_takes_a_contiguous_share():
    mode = execution_mode(World(rank=1, size=2), _setup(4), 6)
    assert isinstance(mode, CheckpointParallel) and mode.name == "checkpoint"
    assert mode.mine == World(rank=1, size=2).shard(list(range(6))) == [3, 4, 5]
    first = CheckpointParallel(World(size=2), [0, 1, 2])
    assert first.previous_refits(None, None, None, [], None, None) == {}  # nothing before it


def test_data_parallel_asks_rank_0_whether_a_checkpoint_was_saved():
    mode = DataParallel(_Rank1(rank=1, size=2), [0, 1])
    assert mode.name == "data" and mode.saved(_Partial(set()), 0)  # rank 0 said True
    assert DataParallel.fixed_proxies is CheckpointParallel.fixed_proxies

"""The three ways a trajectory is measured: one process, checkpoint-parallel, data-parallel.

:func:`execution_mode` picks one (:func:`tangentlab.distributed.choose_mode`) and returns an
:class:`ExecutionMode` whose methods are the only places the modes differ, so the measuring
loop (``empirical.measurement.protocol``) has one body for all three:

- :meth:`~ExecutionMode.fixed_proxies`: the fit window's pre-pass (one process fits alone; the
  parallel modes gather the window's samples on rank 0, which fits and broadcasts);
- :attr:`~ExecutionMode.mine`: the checkpoints this rank measures (all of them, or its
  contiguous share in checkpoint mode);
- :meth:`~ExecutionMode.previous_refits`: the refit proxies a checkpoint-parallel rank carries
  over from the checkpoint before its share (nothing otherwise);
- :meth:`~ExecutionMode.saved`: whether a checkpoint was saved by an earlier attempt (every
  rank asks rank 0 in data mode);
- :meth:`~ExecutionMode.gather`: every rank's results on rank 0 (checkpoint mode).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ExecutionMode", "SingleProcess", "CheckpointParallel", "DataParallel",
           "execution_mode"]


@dataclass
class ExecutionMode:
    """One process (the base: what :class:`SingleProcess` does).

    Attributes:
        world: the :class:`tangentlab.distributed.World` (one rank, or one of torchrun's).
        mine: the checkpoint indices this rank measures.
        share: the data-parallel share of the eval batches (``None`` in the other modes).
    """

    world: Any
    mine: list[int]
    share: Any = None
    name = "single"

    def fixed_proxies(self, single: Callable, setup, schedule, cks, dev: str, timer,
                      load: Callable, skip=frozenset()) -> tuple[dict, dict[int, dict]]:
        """``(fixed {site: proxy}, kept fit halves {index: {site: SiteStats}})``.

        ``single(setup, schedule, cks, dev, timer, skip=)`` is the one-process pre-pass.
        """
        return single(setup, schedule, cks, dev, timer, skip=skip)

    def previous_refits(self, setup, schedule, fixed, cks, timer, load: Callable) -> dict:
        """The refit proxies carried into this rank's first checkpoint (none here)."""
        return {}

    def saved(self, partial, index: int) -> bool:
        """Whether checkpoint ``index`` was saved by an earlier, interrupted attempt."""
        return partial.has(index)

    def gather(self, rows: list, info: list, per_ck: list) -> tuple[list, list, list]:
        """Every rank's results on rank 0, in checkpoint order (here: as they are)."""
        return rows, info, per_ck


@dataclass
class SingleProcess(ExecutionMode):
    """One process measures every checkpoint."""


@dataclass
class CheckpointParallel(ExecutionMode):
    """Ranks take contiguous blocks of whole checkpoints; rank 0 gathers them at the end."""

    name = "checkpoint"

    def fixed_proxies(self, single, setup, schedule, cks, dev, timer, load, skip=frozenset()):
        """The window's samples gathered on rank 0, fitted there and broadcast."""
        from tangentlab.empirical.measurement.parallel import fixed_proxies

        return fixed_proxies(self.world, self.name, self.share, setup, schedule, cks, timer,
                             load, skip=skip)

    def previous_refits(self, setup, schedule, fixed, cks, timer, load):
        """The refit proxies of the checkpoint before this rank's first (a forward-only pass)."""
        from tangentlab.empirical.measurement.parallel import previous_refits

        if not self.mine or self.mine[0] == 0:
            return {}
        return previous_refits(setup, schedule, fixed, cks[self.mine[0] - 1], timer, load)

    def gather(self, rows, info, per_ck):
        """Every rank's checkpoints on rank 0, in checkpoint order (empty lists elsewhere)."""
        from tangentlab.empirical.measurement.parallel import gather_checkpoints

        return gather_checkpoints(self.world, rows, info, per_ck)


@dataclass
class DataParallel(ExecutionMode):
    """Ranks split each checkpoint's eval batches; rank 0 merges and computes every row."""

    name = "data"
    fixed_proxies = CheckpointParallel.fixed_proxies

    def saved(self, partial, index):
        """Rank 0's answer on every rank (every rank skips a checkpoint rank 0 has saved)."""
        return bool(self.world.broadcast_object(partial.has(index)))


def execution_mode(world, setup, n_checkpoints: int) -> ExecutionMode:
    """The mode for ``n_checkpoints`` over ``world`` (see :func:`tangentlab.distributed.choose_mode`)."""
    from tangentlab import distributed
    from tangentlab.empirical.measurement.parallel import DataShare, checkpoint_share

    name = distributed.choose_mode(n_checkpoints, len(setup.eval_data.batches), world.size)
    mine = checkpoint_share(world, name, n_checkpoints)
    if name == "data":
        return DataParallel(world, mine, DataShare(world, setup.eval_data, setup.plans))
    return CheckpointParallel(world, mine) if name == "checkpoint" else SingleProcess(world, mine)

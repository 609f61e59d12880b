"""Process-wide runtime knobs: torch threads, BLAS threads and library chatter.

One small module with no tangentlab imports, so that training, loading and measuring can all
use it without importing each other (this is what keeps ``empirical`` free of import cycles).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["FORK_SERVER_PRELOAD", "fork_server", "die_with_parent", "torch_threads",
           "threads_per_rank", "single_blas_thread", "single_thread", "quiet_transformers"]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Torch intra-op threads = ``n`` inside the block (0 = unchanged), restored after."""
    import torch

    old = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def threads_per_rank(cores: int | None = None, local_size: int | None = None) -> int:
    """Torch intra-op threads for one rank: this node's cores shared by its ranks (at least 1).

    ``cores`` defaults to the CPUs this process may run on, ``local_size`` to torchrun's
    ``LOCAL_WORLD_SIZE`` (else ``WORLD_SIZE``, else 1). Two ranks on two cores: 1 thread each;
    one rank on two cores: 2.

    >>> threads_per_rank(cores=2, local_size=2), threads_per_rank(cores=2, local_size=1)
    (1, 2)
    >>> threads_per_rank(cores=2, local_size=3)
    1
    """
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    if local_size is None:
        try:
            local_size = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE")
                             or 1)
        except ValueError:
            local_size = 1
    return max(1, int(cores) // max(1, int(local_size)))


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """numpy's BLAS limited to one thread inside the block.

    On two cores, BLAS threads and torch threads fight: a d×d metric step went from 0.6 s to
    18 s. Measurement code runs its numpy statistics inside this block while torch runs.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def quiet_transformers() -> None:
    """Silence transformers' per-save shard bars and info warnings (our own bar reports progress)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


class single_thread:
    """Context manager: torch and BLAS on one thread (the toys are tiny; threads only contend).

    Restores the previous torch thread count on exit.
    """

    def __enter__(self):
        import torch
        from threadpoolctl import threadpool_limits

        self._n = torch.get_num_threads()
        torch.set_num_threads(1)
        self._limits = threadpool_limits(limits=1)
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self._n)
        self._limits.restore_original_limits()
        return False


#: What the fork server of tangentlab's worker processes (reproduce stages, ``--nproc`` ranks)
#: imports once: ``transformers.modeling_utils`` alone costs about 10 CPU-seconds on the 2-core
#: machines (it imports ``torch._dynamo``), which each fresh interpreter paid again.
FORK_SERVER_PRELOAD = ("numpy", "scipy.stats", "torch", "transformers.modeling_utils")


def fork_server():
    """``multiprocessing``'s fork-server context, whose server imports :data:`FORK_SERVER_PRELOAD`.

    Its children start with those imported and nothing else run. The server starts with the
    first process asked of it and lives as long as this process, so what the preloaded libraries
    read from the environment as they were imported (``HF_HUB_OFFLINE``, thread counts) is this
    process's at that moment: callers hand their children the current environment themselves.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORK_SERVER_PRELOAD))
    return ctx


def die_with_parent() -> None:
    """This worker process dies (SIGKILL) as soon as the process that asked for it dies.

    That process is ``tangentlab reproduce`` (the stage runner's workers,
    :mod:`tangentlab.pipeline.stages`, call this first) or the end-to-end battery's pool, so
    killing it never leaves a worker running on behind it. Its death is seen two ways:

    - a daemon thread waits on its sentinel (``multiprocessing.parent_process()``: a pipe whose
      write end only that process holds) and kills this process when the pipe reports
      end-of-file. This covers a stage forked by ``multiprocessing``'s fork server, whose parent
      is the server: the server exits only after an interpreter shutdown with torch loaded
      (seconds, in which a killed run's training stage went on writing checkpoints);
    - Linux: the parent-death signal (``PR_SET_PDEATHSIG``) for the direct parent.

    A process that died before this is called (a kill while the worker was still starting) is
    caught at once, before the worker does anything: before, such a worker ran its stage into the
    run directory after the run had stopped, then waited forever for more work.
    """
    import multiprocessing
    import signal
    import sys
    import threading

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if not parent.is_alive():  # it died before we looked
        os.kill(os.getpid(), signal.SIGKILL)

    def die_when_it_does() -> None:
        parent.join()
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_when_it_does, name="tangentlab-die-with-parent",
                     daemon=True).start()

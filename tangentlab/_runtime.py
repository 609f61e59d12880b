"""Process-wide runtime knobs: torch threads, BLAS threads and library chatter.

One small module with no tangentlab imports, so that training, loading and measuring can all
use it without importing each other (this is what keeps ``empirical`` free of import cycles).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["torch_threads", "single_blas_thread", "single_thread", "quiet_transformers"]


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

"""Runs on several processes with ``torch.distributed``: the world, sharding, ordered collectives.

A command becomes distributed in one of two ways, both through torch's elastic launcher:

- ``tangentlab empirical measure ... --nproc N`` (or ``train``): :mod:`tangentlab.commands.launch`
  starts ``N`` ranks of the same command on this node, on loopback;
- ``torchrun --nproc-per-node N -m tangentlab empirical measure ...`` (any node count).

Each rank runs the command through :func:`run_rank`, which sets up the process group from the
environment torchrun provides (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), chooses the backend (NCCL when the rank's device is CUDA, gloo otherwise) and the
rank's local device, and reports failures. Code asks :func:`current` for the :class:`World`, which
for a plain single process is ``World()`` (rank 0 of 1; every collective is then the identity), so
one code path serves both.

Determinism rules that every user of this module keeps:

- **Sharding is contiguous and balanced** (:func:`shard_bounds`): rank r of W takes items
  ``[r·n//W, (r+1)·n//W)``. Concatenating the ranks' results in rank order therefore gives the
  single-process order, which keeps order-dependent statistics (first occurrences, samples) exact.
- **Floating-point sums are reduced in a fixed order** (:meth:`World.sum_float64`): every rank's
  partial sum is all-gathered and added in rank order, so the result never depends on which rank
  arrived first, and every rank holds the same bits. It may differ from the single-process sum by
  rounding only (the partial sums group the terms differently), about 1e-16 relative per term.
- **Rank 0 writes** (:attr:`World.is_main`); the other ranks write nothing.

Failures: a rank that raises records one line in the process group's key-value store (the first
record wins) and exits non-zero; torch's agent then stops the other ranks, and rank 0 prints the
first failure as one line ``tangentlab: error: ...`` (its own error, another rank's, or a note
that a rank stopped without a message). Results are built in temporary folders and renamed by
rank 0 only at the end, so a failed run leaves no partial results.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError, TangentlabError

__all__ = [
    "World", "DistributedError", "current", "launched", "is_main_process", "init", "ensure",
    "shutdown", "resolve_device", "backend_for", "shard_bounds", "shard", "choose_mode",
    "free_port", "fault_point", "run_rank", "DEVICE_CHOICES_HELP", "REPORTED_ENV",
    "LAUNCHER_SIGNAL",
]

#: What ``--device`` accepts (documented in every command's help).
DEVICE_CHOICES_HELP = "auto | cpu | cuda | cuda:N | mps (under torchrun each rank takes cuda:LOCAL_RANK)"

_ERROR_KEY = "tangentlab/first_failure"
#: The variable naming the file rank 0 creates once it printed the run's error line (set by
#: ``--nproc``'s launcher, :mod:`tangentlab.commands.launch`, which then prints none).
REPORTED_ENV = "TANGENTLAB_RANK0_REPORTED"
#: The file beside that one where the launcher writes the signal that stopped it (SIGTERM, SIGINT).
LAUNCHER_SIGNAL = "launcher-signal"
_TIMEOUT_S = int(os.environ.get("TANGENTLAB_DIST_TIMEOUT", "1800"))


class DistributedError(TangentlabError, RuntimeError):
    """Another rank failed or stopped, or the process group could not be set up."""


@dataclass(frozen=True)
class World:
    """The processes of one run and their collectives.

    The processes of one run: ``rank`` of ``size``, this rank's ``local_rank`` on its node,
    the ``backend`` (``None`` for a plain single process) and this rank's ``device``.

    Every collective below is the identity when ``size == 1``, so callers need no special case.

    >>> w = World()
    >>> w.is_main, w.size, w.shard(list(range(5)))
    (True, 1, [0, 1, 2, 3, 4])
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        """Whether this rank writes files and prints (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether there is more than one rank."""
        return self.size > 1

    # -- sharding --------------------------------------------------------------------------

    def bounds(self, n: int) -> tuple[int, int]:
        """This rank's contiguous share ``[lo, hi)`` of ``n`` items (see :func:`shard_bounds`)."""
        return shard_bounds(n, self.size, self.rank)

    def shard(self, items: Sequence[Any]) -> list[Any]:
        """This rank's contiguous share of ``items``."""
        lo, hi = self.bounds(len(items))
        return list(items[lo:hi])

    # -- collectives -----------------------------------------------------------------------

    def barrier(self) -> None:
        """Wait until every rank is here."""
        if self.distributed:
            _collective(lambda dist: dist.barrier())

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """``obj`` from rank ``src`` on every rank (pickled; for small objects and arrays)."""
        if not self.distributed:
            return obj
        box = [obj if self.rank == src else None]
        _collective(lambda dist: dist.broadcast_object_list(box, src=src, device=self._comm_device()))
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        _collective(lambda dist: dist.all_gather_object(out, obj))
        return out

    def gather_object(self, obj: Any, dst: int = 0) -> list[Any] | None:
        """Every rank's ``obj`` in rank order on rank ``dst``; None on the other ranks."""
        if not self.distributed:
            return [obj]
        out: list[Any] | None = [None] * self.size if self.rank == dst else None
        _collective(lambda dist: dist.gather_object(obj, out, dst=dst))
        return out

    def fold_to_main(self, obj: Any, fold: Callable[[Any, Any], Any]) -> Any:
        """``fold(...fold(fold(obj_0, obj_1), obj_2)..., obj_{W-1})`` on rank 0, None elsewhere.

        Rank 0 receives one rank's object at a time (point-to-point, in rank order), so it holds
        at most the running result and one incoming object, never all W of them.
        """
        if not self.distributed:
            return obj
        acc = obj
        for src in range(1, self.size):
            if self.rank == src:
                _collective(lambda dist, s=src: dist.send_object_list([obj], dst=0))  # noqa: B023
            elif self.rank == 0:
                box: list[Any] = [None]
                _collective(lambda dist, s=src, b=box: dist.recv_object_list(b, src=s))
                acc = fold(acc, box[0])
                box[0] = None
        return acc if self.rank == 0 else None

    def all_gather_arrays(self, array) -> list:
        """Every rank's numpy ``array``, in rank order, sent as tensors (no pickling).

        The first axis may differ between ranks; the other axes and the dtype must agree.
        """
        import numpy as np
        import torch

        a = np.ascontiguousarray(array)
        if not self.distributed:
            return [a]
        if a.dtype == object:
            return [np.asarray(x) for x in self.all_gather_object(a)]
        as_bool = a.dtype == np.bool_
        t = torch.from_numpy(a.astype(np.uint8) if as_bool else a).to(self._comm_device())
        n = torch.tensor([t.shape[0] if t.ndim else 1], dtype=torch.int64, device=t.device)
        sizes = [torch.zeros_like(n) for _ in range(self.size)]
        _collective(lambda dist: dist.all_gather(sizes, n))
        lengths = [int(s.item()) for s in sizes]
        width = max(lengths)
        flat = t.reshape(-1) if t.ndim == 0 else t
        pad = torch.zeros((width,) + tuple(flat.shape[1:]), dtype=flat.dtype, device=flat.device)
        pad[: flat.shape[0]] = flat
        bufs = [torch.empty_like(pad) for _ in range(self.size)]
        _collective(lambda dist: dist.all_gather(bufs, pad))
        out = []
        for buf, k in zip(bufs, lengths, strict=True):
            x = buf[:k].cpu().numpy()
            if a.ndim == 0:
                x = x.reshape(())
            out.append(x.astype(np.bool_) if as_bool else x)
        return out

    def concat(self, array, axis: int = 0):
        """The ranks' arrays concatenated along axis 0 in rank order (the one-process order)."""
        import numpy as np

        if axis != 0:
            raise ConfigError("World.concat concatenates along axis 0 only")
        parts = self.all_gather_arrays(array)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def sum_float64(self, array):
        """The float64 sum over ranks of ``array`` (any shape, the same on every rank).

        Added in rank order, ``((a_0 + a_1) + a_2) + ...``, on every rank, whatever arrives first.
        """
        import numpy as np
        import torch

        a = np.asarray(array, dtype=np.float64)
        if not self.distributed:
            return a.copy()
        # the shape is the same on every rank: one all_gather, no exchange of sizes
        t = torch.from_numpy(np.ascontiguousarray(a).reshape(-1)).to(self._comm_device())
        bufs = [torch.empty_like(t) for _ in range(self.size)]
        _collective(lambda dist: dist.all_gather(bufs, t))
        total = bufs[0].cpu().numpy().astype(np.float64)  # a new array
        for b in bufs[1:]:
            total += b.cpu().numpy()
        return total.reshape(a.shape)

    def sum_int(self, value: int) -> int:
        """The exact sum over ranks of an integer."""
        import numpy as np

        return int(sum(int(x[0]) for x in self.all_gather_arrays(np.asarray([value], dtype=np.int64))))

    def _comm_device(self):
        import torch

        return torch.device(self.device) if self.backend == "nccl" else torch.device("cpu")


def _collective(op: Callable[[Any], Any]) -> Any:
    """Run one collective; a peer that vanished becomes a :class:`DistributedError`."""
    import torch.distributed as dist

    try:
        return op(dist)
    except TangentlabError:
        raise
    except (RuntimeError, OSError, ValueError) as exc:  # gloo/NCCL: connection closed, timeout
        text = _one_line(exc)
        if "closed by peer" in text or "reset by peer" in text or "Broken pipe" in text:
            text = "the connection to a peer closed"
        raise DistributedError(f"another rank stopped part-way ({text[:200]})") from exc


_WORLD = World()


def current() -> World:
    """The world of this process (``World()`` unless :func:`init` set up a process group)."""
    return _WORLD


def is_main_process() -> bool:
    """Whether this process is rank 0 (or the only process), even before :func:`init`."""
    if _WORLD.distributed:
        return _WORLD.is_main
    return not launched() or int(os.environ.get("RANK", "0")) == 0


def launched() -> bool:
    """Whether this process is one rank of a launch with more than one process."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


# -- devices and backends ----------------------------------------------------------------------


def resolve_device(spec: str = "auto", local_rank: int | None = None) -> str:
    """The torch device string for ``spec`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``).

    ``auto`` picks CUDA, else MPS, else the CPU. Under a distributed launch (``local_rank`` given,
    or ``LOCAL_RANK`` in the environment with ``WORLD_SIZE`` > 1) ``cuda`` and ``auto`` resolve to
    ``cuda:LOCAL_RANK``, so each rank uses its own GPU.

    Raises:
        ConfigError: an unknown spec, or a device this machine does not have.
    """
    import torch

    if local_rank is None and launched():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    spec = (spec or "auto").strip().lower()
    cuda_ok = torch.cuda.is_available()
    mps_ok = bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    if spec == "auto":
        spec = "cuda" if cuda_ok else ("mps" if mps_ok else "cpu")
    if spec == "cpu":
        return "cpu"
    if spec == "mps":
        if not mps_ok:
            raise ConfigError("device 'mps' was requested but this machine has no Apple GPU; use --device cpu")
        if local_rank:
            raise ConfigError("device 'mps' has one GPU; run one process (drop --nproc)")
        return "mps"
    if spec == "cuda" or (spec.startswith("cuda:") and spec[5:].isdigit()):
        if not cuda_ok:
            raise ConfigError(f"device {spec!r} was requested but no CUDA GPU is available; use --device cpu")
        count = torch.cuda.device_count()
        if spec == "cuda":
            index = local_rank or 0
        else:
            index = int(spec[5:])
            if local_rank:
                raise ConfigError(
                    f"device {spec!r} names one GPU but this is local rank {local_rank}; under "
                    "a distributed launch use --device cuda (each rank takes cuda:LOCAL_RANK)")
        if index >= count:
            raise ConfigError(f"device cuda:{index} does not exist; this machine has {count} GPU(s)")
        return f"cuda:{index}" if (spec != "cuda" or local_rank is not None) else "cuda"
    raise ConfigError(f"device must be auto, cpu, cuda, cuda:N or mps; got {spec!r}")


def backend_for(device: str) -> str:
    """NCCL for CUDA devices, gloo for everything else."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


# -- process group -----------------------------------------------------------------------------


def init(device: str = "auto") -> World:
    """Set up the process group from torchrun's environment (no-op for a single process).

    Returns the :class:`World`, also available afterwards from :func:`current`.
    """
    global _WORLD
    import datetime

    if not launched():
        _WORLD = World(device=resolve_device(device, local_rank=None))
        return _WORLD
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank=local_rank)
    backend = backend_for(dev)
    if dev.startswith("cuda"):
        torch.cuda.set_device(torch.device(dev))
    if not dist.is_initialized():
        try:
            dist.init_process_group(backend=backend, init_method="env://", rank=rank,
                                    world_size=size,
                                    timeout=datetime.timedelta(seconds=_TIMEOUT_S))
        except (RuntimeError, ValueError, OSError) as exc:
            raise DistributedError(f"could not set up the {backend} process group: {_one_line(exc)}") from exc
    _WORLD = World(rank=rank, size=size, local_rank=local_rank, backend=backend, device=dev)
    return _WORLD


def ensure(device: str = "auto") -> World:
    """The current world, set up first under a launch that has no process group yet."""
    if launched() and not _WORLD.distributed:
        return init(device)
    return _WORLD


def shutdown() -> None:
    """Leave the process group (if any) and return to the single-process world."""
    global _WORLD
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    _WORLD = World()


# -- sharding ----------------------------------------------------------------------------------


def shard_bounds(n: int, size: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share ``[lo, hi)`` of ``n`` items split over ``size`` ranks.

    Shares differ in length by at most one, cover ``range(n)`` exactly once, and are in rank
    order. A rank's share is empty when ``n < size``.

    Examples:
        >>> [shard_bounds(5, 2, r) for r in range(2)]
        [(0, 2), (2, 5)]
    """
    if size < 1 or not 0 <= rank < size or n < 0:
        raise ConfigError(f"cannot shard {n} items for rank {rank} of {size}")
    return rank * n // size, (rank + 1) * n // size


def shard(items: Sequence[Any], world: World | None = None) -> list[Any]:
    """``world``'s (default: :func:`current`) contiguous share of ``items``."""
    return (world or current()).shard(items)


def choose_mode(n_checkpoints: int, n_batches: int, size: int) -> str:
    """How a trajectory is split over ``size`` ranks: single, checkpoint or data.

    ``single``: one rank; ``checkpoint``: more checkpoints than ranks, so ranks take whole
    checkpoints (at least one each, and no statistics cross ranks); else ``data``: ranks split
    each checkpoint's eval batches (at least one batch per rank).
    """
    if size <= 1:
        return "single"
    if n_checkpoints > size:
        return "checkpoint"
    if n_batches < size:
        raise ConfigError(
            f"{size} ranks cannot split {n_checkpoints} checkpoint(s) of {n_batches} eval "
            f"batches: use at most {max(n_checkpoints, n_batches)} processes or more n_batches")
    return "data"


# -- failure reporting -------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _store():
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            return dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store: failures are then reported locally only
        return None
    return None


def _record_failure(rank: int, code: int, message: str) -> None:
    """Record the first failure of the run in the process group's store (first writer wins)."""
    store = _store()
    if store is None:
        return
    with contextlib.suppress(Exception):
        store.compare_set(_ERROR_KEY, "", f"{rank}\t{code}\t{message}")


def _first_failure() -> tuple[int, int, str] | None:
    store = _store()
    if store is None:
        return None
    try:
        if not store.check([_ERROR_KEY]):
            return None
        rank, code, message = store.get(_ERROR_KEY).decode().split("\t", 2)
        return int(rank), int(code), message
    except Exception:  # noqa: BLE001
        return None


class _Terminated(BaseException):
    """SIGTERM from torch's agent (another rank failed) or from the user."""


def _on_sigterm(signum, frame):  # noqa: ARG001
    raise _Terminated()


def run_rank(func: Callable[[Any], int], args: Any) -> int:
    """Run one CLI command as one rank of a torchrun launch; returns the rank's exit code.

    Sets up the process group (device from ``args.device``), silences stdout and progress on
    ranks other than 0, and on failure prints exactly one line from rank 0.
    """
    code = 0
    quiet_env = None
    try:
        world = init(getattr(args, "device", "auto") or "auto")
    except TangentlabError as exc:
        if int(os.environ.get("RANK", "0")) == 0:
            sys.stderr.write(f"tangentlab: error: {_one_line(exc)}\n")
            _mark_reported()
        return 2
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    if not world.is_main:
        quiet_env = os.environ.get("TANGENTLAB_QUIET")
        os.environ["TANGENTLAB_QUIET"] = "1"
    try:
        with contextlib.redirect_stdout(sys.stdout if world.is_main else open(os.devnull, "w")):  # noqa: SIM115
            code = int(func(args) or 0)
        world.barrier()  # nobody leaves before everyone finished (rank 0 renamed its results)
    except BaseException as exc:  # noqa: BLE001 - every failure ends the rank with one line
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = _failure_code(exc)
        if not isinstance(exc, (_Terminated, KeyboardInterrupt, DistributedError)):  # failures
            _record_failure(world.rank, code, _one_line(exc) if isinstance(exc, TangentlabError)
                            else f"{type(exc).__name__}: {_one_line(exc)}")
        if world.is_main:
            first = _first_failure()
            if first is None:
                message = ("another rank stopped part-way without a message (killed or out of "
                           "memory?); no results were written")
                ctrl_c = "SIGINT" if isinstance(exc, KeyboardInterrupt) else ""
                if sig := _launcher_signal() or ctrl_c:  # the launcher's signal, or the user's
                    message = f"stopped by {sig}; no results were written"
                elif isinstance(exc, DistributedError):
                    message = f"{_one_line(exc)}; no results were written"
            else:
                r, code, message = first
                if r != 0:
                    message = f"{message} (on rank {r} of {world.size})"
            sys.stderr.write(f"tangentlab: error: {message}\n")
            sys.stderr.flush()
            _mark_reported()
            if code not in (1, 2, 3):  # 1-3: rank 0 has printed the line
                code = 1
            if os.environ.get("TANGENTLAB_DEBUG"):
                import traceback

                traceback.print_exception(exc)
        code = code or 1
    finally:
        if quiet_env is None and not world.is_main:
            os.environ.pop("TANGENTLAB_QUIET", None)
        with contextlib.suppress(Exception):
            signal.signal(signal.SIGTERM, previous)
        if code == 0:
            shutdown()
    if code:
        # leave without tearing the group down collectively: the peers may be gone
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _mark_reported() -> None:
    """Tell `--nproc`'s launcher that rank 0 printed the run's error line (no-op under torchrun)."""
    path = os.environ.get(REPORTED_ENV)
    if path:
        with contextlib.suppress(OSError), open(path, "w"):
            pass


def _launcher_signal() -> str:
    """The signal that stopped `--nproc`'s launcher ("" if none, or not under it)."""
    path = os.environ.get(REPORTED_ENV)
    with contextlib.suppress(OSError):
        return Path(path).with_name(LAUNCHER_SIGNAL).read_text() if path else ""
    return ""


def _failure_code(exc: BaseException) -> int:
    if isinstance(exc, TangentlabError):
        return 2
    if isinstance(exc, _Terminated):
        return 143
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, SystemExit):
        return int(exc.code or 0) if isinstance(exc.code, int) else 1
    return 3


def fault_point(name: str, index: int) -> None:
    """Test hook: SIGKILL this rank when ``TANGENTLAB_FAULT`` is ``name:index:rank`` (else a no-op).

    How the kill-and-resume tests stop one rank part-way.

    When ``TANGENTLAB_FAULT_AFTER`` holds a glob pattern, the rank first waits (up to 300 s)
    until a file matches it, so that a test can order the kill after another rank's write
    instead of relying on timing.
    """
    spec = os.environ.get("TANGENTLAB_FAULT")
    if spec and spec == f"{name}:{int(index)}:{current().rank}":
        after = os.environ.get("TANGENTLAB_FAULT_AFTER")
        if after:
            import glob
            import time

            deadline = time.monotonic() + 300.0
            while not glob.glob(after) and time.monotonic() < deadline:
                time.sleep(0.05)
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


# -- launching ---------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def strip_nproc(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N``."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            out.append(a)
    return out

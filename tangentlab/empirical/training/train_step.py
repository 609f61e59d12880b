"""One training step, its optional per-phase timing, and the deferred loss log (DDP and one process).

:func:`tangentlab.empirical.training.train.train_model` runs its loop through this module:

- :class:`DDPOptions`: how a multi-rank run trains (each switch separately, so that
  ``benchmarks/bench_distributed.py`` can measure its effect). None of them changes the global
  batch, the data order or the loss definition; they change where the work happens and when the
  ranks wait for each other.
- :class:`StepTimer`: per-phase timing hooks. The default (:data:`NO_TIMER`) does nothing: no
  clock is read, no communication hook is registered, and the training loop runs the same code
  it would run without hooks (a ``with`` on a shared no-op context per phase).
  :class:`RecordingStepTimer` records, per step: ``data``, ``forward``, ``backward`` (the
  backward's compute), ``allreduce_wait`` (from the last gradient bucket being ready to the end
  of the last all-reduce: what the backward waits for the ranks), ``allreduce_bytes``,
  ``allreduce_buckets``,
  ``optimizer`` and ``logging`` (the loss collective, on the steps that reduce it).
- :class:`LossLog`: each step's loss stays on the device; every ``log_every`` steps (and before
  every checkpoint and due callback) the pending losses are reduced in **one** collective and
  read on the host. The logged values are the same bits as a per-step reduction's.
- :func:`shard_batch`: this rank's rows of the global batch of a step, built without building
  the other ranks' rows where the draws allow it (decoder), the same numbers as
  :func:`tangentlab.empirical.loading.data.make_batch` sliced.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any

from tangentlab.errors import ConfigError

__all__ = [
    "DDPOptions", "StepTimer", "NO_TIMER", "RecordingStepTimer", "LossLog", "shard_batch",
    "wrap_ddp", "first_non_finite", "build_optimizers", "Stepper", "callback_due",
]


@dataclass(frozen=True)
class DDPOptions:
    """How a multi-rank (DDP) training run works; the defaults are the fast ones.

    Attributes:
        shard_batch: each rank builds only its rows of the global batch (False: every rank
            builds the whole batch and slices it, as before issue 22).
        rank0_data: rank 0 alone loads the corpus, trains the tokenizer and encodes the stream,
            then broadcasts them (False: every rank builds them, rank 0's copy is broadcast).
        bucket_mb: DDP gradient bucket size in MB (None: torch's 25 MB, with its 1 MB first
            bucket, so the last layers' all-reduce starts while the backward goes on; a size
            above the model's gradients puts them in one bucket, all-reduced after the backward).
        bucket_view: ``gradient_as_bucket_view`` (gradients are views into the buckets: no copy).
        log_every: steps between reductions of the logged loss (1: a collective and a host sync
            every step, as before issue 22). Checkpoint steps, the last step and due callbacks
            always reduce first.
    """

    shard_batch: bool = True
    rank0_data: bool = True
    bucket_mb: float | None = None
    bucket_view: bool = True
    log_every: int = 50

    def __post_init__(self) -> None:
        """Refuse settings that cannot work (a typed error, saying what would)."""
        if int(self.log_every) < 1:
            raise ConfigError(f"DDPOptions.log_every must be >= 1; got {self.log_every}")
        if self.bucket_mb is not None and not self.bucket_mb > 0:
            raise ConfigError(f"DDPOptions.bucket_mb must be > 0 or None; got {self.bucket_mb}")

    def record(self) -> dict[str, Any]:
        """The options as a JSON-ready dict (for manifests and benchmark output)."""
        return {"shard_batch": self.shard_batch, "rank0_data": self.rank0_data,
                "bucket_mb": self.bucket_mb, "bucket_view": self.bucket_view,
                "log_every": int(self.log_every)}


class StepTimer:
    """Timing hooks of the training loop; this base class does nothing (see :data:`NO_TIMER`).

    ``records`` is False: the loop registers no communication hook and reads no clock.
    """

    records = False
    _NOOP = contextlib.nullcontext()

    def begin_step(self, step: int) -> None:
        """A new step starts (0-based)."""

    def end_step(self) -> None:
        """The step is done."""

    def section(self, name: str):  # noqa: ARG002
        """A context manager timing the block as phase ``name`` of the current step."""
        return self._NOOP

    def add(self, name: str, value: float) -> None:
        """Add ``value`` to quantity ``name`` of the current step."""


#: The default timer: every hook is a no-op.
NO_TIMER = StepTimer()


class RecordingStepTimer(StepTimer):
    """Records each step's phases: ``steps`` is a list of ``{phase: seconds or bytes}``.

    ``threads``: torch's intra-op threads when the first step began.

    >>> t = RecordingStepTimer()
    >>> t.begin_step(0)
    >>> with t.section("forward"):
    ...     pass
    >>> t.add("allreduce_bytes", 8.0); t.end_step()
    >>> rec = t.steps[0]
    >>> " ".join(sorted(rec)), rec.get("allreduce_bytes")
    ('allreduce_bytes forward step', 8.0)
    """

    records = True

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self._cur: dict[str, float] | None = None
        self._t0 = 0.0
        self.threads: int | None = None

    def begin_step(self, step: int) -> None:
        """Start recording step ``step`` (its wall time is ``step``: begin to end)."""
        if self.threads is None:
            import torch

            self.threads = torch.get_num_threads()
        self._cur = {}
        self._t0 = time.perf_counter()

    def end_step(self) -> None:
        """Close the current step's record."""
        if self._cur is not None:
            self._cur["step"] = time.perf_counter() - self._t0
            self.steps.append(self._cur)
        self._cur = None

    @contextlib.contextmanager
    def section(self, name: str):
        """Time the block as phase ``name`` (seconds add up within a step)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t)

    def add(self, name: str, value: float) -> None:
        """Add ``value`` to ``name`` of the current step (ignored outside a step)."""
        if self._cur is not None:
            self._cur[name] = self._cur.get(name, 0.0) + float(value)


class _CommProbe:
    """A DDP communication hook (all-reduce, averaged) that notes launch and end times, bytes."""

    def __init__(self, world_size: int) -> None:
        self.size = world_size
        self.reset()

    def reset(self) -> None:
        self.launched: list[float] = []
        self.finished: list[float] = []
        self.nbytes = 0

    def allreduce(self, bucket):
        """Average ``bucket`` over the ranks (what DDP's built-in hook does), timed."""
        import torch.distributed as dist

        buf = bucket.buffer()
        self.launched.append(time.perf_counter())
        self.nbytes += buf.numel() * buf.element_size()
        fut = dist.all_reduce(buf.div_(self.size), async_op=True).get_future()

        def done(f):
            self.finished.append(time.perf_counter())
            return f.value()[0]

        return fut.then(done)

    def wait_s(self) -> float:
        """Seconds from the last bucket's launch (the backward's compute done) to the last end."""
        if not self.launched or not self.finished:
            return 0.0
        return max(0.0, max(self.finished) - max(self.launched))


def _probe_hook(state: _CommProbe, bucket):
    """The DDP communication hook: ``state`` is the :class:`_CommProbe`."""
    return state.allreduce(bucket)


def wrap_ddp(model, world, options: DDPOptions, timer: StepTimer = NO_TIMER):
    """``model`` in DistributedDataParallel per ``options`` (itself in one process).

    Returns ``(module, probe)``: ``probe`` is the communication hook recording all-reduce times
    and bytes when ``timer.records`` (None otherwise: DDP's built-in all-reduce runs).
    """
    if not world.distributed:
        return model, None
    from torch.nn.parallel import DistributedDataParallel

    gpu = world.device.startswith("cuda")
    kwargs: dict[str, Any] = {"device_ids": [world.device] if gpu else None,
                              "gradient_as_bucket_view": bool(options.bucket_view)}
    if options.bucket_mb is not None:
        kwargs["bucket_cap_mb"] = float(options.bucket_mb)
    # our models' buffers (position ids, causal masks) never change: no per-forward buffer sync
    try:
        ddp = DistributedDataParallel(model, forward_sync_buffers=False, **kwargs)
    except TypeError:  # torch before forward_sync_buffers
        ddp = DistributedDataParallel(model, broadcast_buffers=False, **kwargs)
    probe = None
    if timer.records:
        probe = _CommProbe(world.size)
        ddp.register_comm_hook(probe, _probe_hook)
    return ddp, probe


def shard_batch(stream, step: int, world, *, batch_size: int, seq_len: int, arch: str,
                seed: int, mask_id: int | None = None, vocab_size: int | None = None,
                mlm_probability: float = 0.15, special_ids=()):
    """This rank's rows of step ``step``'s global batch, and the global number of targets.

    Returns ``(input_ids, labels, n_targets)``: ``input_ids`` and ``labels`` (rows, seq_len) are
    rows ``world.bounds(batch_size)`` of :func:`~tangentlab.empirical.loading.data.make_batch` (the same
    numbers); ``n_targets`` is the number of predicted tokens of the whole batch. A decoder
    draws the window starts of every row (one small draw) and gathers only its own windows; an
    encoder draws the MLM masks of the whole batch (the draws are sequential), then keeps its rows.
    """
    from tangentlab.empirical.loading.data import _random_starts, make_batch

    if batch_size < world.size:
        raise ConfigError(f"batch_size {batch_size} is smaller than the {world.size} ranks; use "
                          "batch_size >= --nproc")
    lo, hi = world.bounds(batch_size)
    if arch == "decoder":
        import torch

        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))  # = make_batch's
        starts = _random_starts(g, stream.numel(), batch_size, seq_len)[lo:hi]
        ids = stream[starts[:, None] + torch.arange(seq_len)[None, :]]
        return ids, ids.clone(), batch_size * (seq_len - 1)
    inputs, labels, _ = make_batch(stream, step, batch_size=batch_size, seq_len=seq_len,
                                   arch=arch, seed=seed, mask_id=mask_id, vocab_size=vocab_size,
                                   mlm_probability=mlm_probability, special_ids=special_ids)
    return inputs[lo:hi], labels[lo:hi], int((labels != -100).sum())


class LossLog:
    """Losses kept on the device and reduced over the ranks in one collective per flush.

    ``add(step, loss, extra)`` keeps a detached scalar tensor (one process: the float32 loss;
    several ranks: this rank's float64 part of the global mean); :meth:`flush` returns
    ``[(step, loss, extra), ...]`` for the pending steps, each loss the rank-order float64 sum of
    the parts (:meth:`~tangentlab.distributed.World.sum_float64`: one all-gather for all the
    pending steps, the same bits as one per step), or the float32 loss as a Python float.

    >>> import torch
    >>> from tangentlab.distributed import World
    >>> log = LossLog(World())
    >>> log.add(1, torch.tensor(2.5), {"lr": 0.1}); log.add(2, torch.tensor(2.25), {"lr": 0.1})
    >>> log.flush()
    [(1, 2.5, {'lr': 0.1}), (2, 2.25, {'lr': 0.1})]
    """

    def __init__(self, world) -> None:
        self.world = world
        self._steps: list[tuple[int, dict]] = []
        self._values: list = []

    def __len__(self) -> int:
        """The number of pending steps."""
        return len(self._steps)

    def add(self, step: int, loss, extra: dict | None = None) -> None:
        """Keep step ``step``'s loss (a scalar tensor, detached here) until the next flush."""
        self._steps.append((int(step), dict(extra or {})))
        self._values.append(loss.detach())

    def flush(self) -> list[tuple[int, float, dict]]:
        """The pending steps' losses as floats (a collective on several ranks: all call it)."""
        if not self._steps:
            return []
        import torch

        stacked = torch.stack(self._values)
        if self.world.distributed:
            values = [float(v) for v in self.world.sum_float64(stacked.double().cpu().numpy())]
        else:
            values = [float(v) for v in stacked.cpu().tolist()]
        out = [(s, v, extra) for (s, extra), v in zip(self._steps, values, strict=True)]
        self._steps, self._values = [], []
        return out


def first_non_finite(rows: list[tuple[int, float, dict]]) -> tuple[int, float] | None:
    """The first ``(step, loss)`` of ``rows`` whose loss is not finite, or None."""
    for step, value, _ in rows:
        if not math.isfinite(value):
            return step, value
    return None


def build_optimizers(model, cfg) -> list:
    """The optimizers of ``cfg.optimizer`` for ``model``.

    AdamW on every parameter, or Muon on the 2-D hidden weights with AdamW on the embeddings,
    head, biases and norms (the split of
    :func:`~tangentlab.empirical.measurement.update_energy.optimizer_groups`, which reads a
    checkpoint's optimizer state back with it).
    """
    import torch

    from tangentlab.empirical.measurement.update_energy import optimizer_groups

    groups = optimizer_groups(model, cfg.optimizer)
    if cfg.optimizer == "adamw":
        return [torch.optim.AdamW(groups[0], lr=cfg.lr, betas=(0.9, 0.95),
                                  weight_decay=cfg.weight_decay)]
    return [
        torch.optim.Muon(groups[0], lr=cfg.lr, weight_decay=cfg.weight_decay,
                         adjust_lr_fn="match_rms_adamw"),
        torch.optim.AdamW(groups[1], lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay),
    ]


class Stepper:
    """One optimizer step of the training loop: ``logged, lr = stepper(step)``.

    Builds the step's batch (this rank's rows under DDP), runs the forward, the backward (with
    DDP's all-reduce) and the optimizers at learning rate ``lr_at(step)``, each phase inside
    ``timer.section``. Returns the detached loss to log (one process: the float32 mean loss;
    several ranks: this rank's float64 part of the global mean, see :class:`LossLog`) and the
    learning rate. One process computes the Hugging Face models' own loss; several ranks
    compute Σ (shard token losses) / (global targets) × ranks, whose DDP-averaged gradient is
    the global mean loss's (:func:`tangentlab.empirical.measurement.parallel.shard_loss`).
    """

    def __init__(self, *, model, ddp, probe, optimizers, scaler, world, cfg, device: str,
                 autocast: str | None, options: DDPOptions, timer: StepTimer, stream,
                 batch_args: dict, lr_at) -> None:
        self.model, self.ddp, self.probe = model, ddp, probe
        self.optimizers, self.scaler, self.world, self.cfg = optimizers, scaler, world, cfg
        self.device, self.autocast, self.options, self.timer = device, autocast, options, timer
        self.stream, self.batch_args, self.lr_at = stream, batch_args, lr_at

    def batch(self, step: int):
        """``(input_ids, labels, global targets or None)`` of this rank for ``step``."""
        from tangentlab.empirical.loading.data import make_batch
        from tangentlab.empirical.measurement import parallel

        world = self.world
        if world.distributed and self.options.shard_batch:  # this rank's rows only
            return shard_batch(self.stream, step, world, **self.batch_args)
        x, y, _ = make_batch(self.stream, step, **self.batch_args)
        if not world.distributed:
            return x, y, None
        n_all = parallel.n_targets(y, self.batch_args["arch"])  # the whole batch, then a share
        x, y = parallel.shard_rows(world, x, y)
        return x, y, n_all

    def __call__(self, step: int):
        """Run step ``step`` (0-based); returns ``(loss to log, learning rate)``."""
        import torch

        from tangentlab.empirical.measurement import parallel

        timer, world, dev = self.timer, self.world, self.device
        with timer.section("data"):
            x, y, n_all = self.batch(step)
            x, y = x.to(dev), y.to(dev)
            lr = self.lr_at(step)
            for o in self.optimizers:
                for g in o.param_groups:
                    g["lr"] = lr
        with timer.section("forward"):
            if world.distributed:
                with parallel.autocast(dev, self.autocast):
                    part = parallel.shard_loss(self.ddp, x, y, self.cfg.arch, n_all)
                loss = part * world.size  # DDP averages gradients over the ranks
                logged = part.detach().double()
            else:
                with parallel.autocast(dev, self.autocast):
                    out = self.model(input_ids=x, labels=y)
                loss = out.loss.float()
                logged = loss.detach()
        with timer.section("optimizer"):
            for o in self.optimizers:
                o.zero_grad(set_to_none=True)
        if self.probe is not None:
            self.probe.reset()
        with timer.section("backward"):
            self.scaler.scale(loss).backward()  # the identity unless fp16
        if self.probe is not None:  # the backward's wait for the all-reduce, apart
            wait = self.probe.wait_s()
            timer.add("allreduce_wait", wait)
            timer.add("backward", -wait)
            timer.add("allreduce_bytes", self.probe.nbytes)
            timer.add("allreduce_buckets", len(self.probe.launched))
        with timer.section("optimizer"):
            if self.scaler.is_enabled():
                for o in self.optimizers:
                    self.scaler.unscale_(o)
            if self.cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            for o in self.optimizers:
                self.scaler.step(o)  # o.step() unless fp16 (which skips a step with inf grads)
            self.scaler.update()
        return logged, lr


def callback_due(cb, step: int, final_step: int) -> bool:
    """Whether callback ``cb`` acts at ``step``: always, unless it says ``every`` (an int)."""
    every = getattr(cb, "every", None)
    if not isinstance(every, int):
        return True
    return every > 0 and (step % every == 0 or step == final_step)

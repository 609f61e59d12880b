"""Training and measuring on several ranks: what ``train`` and ``measure`` add under torchrun.

The process group, sharding and ordered collectives live in :mod:`tangentlab.distributed`; this
module holds what is specific to our models.

**DDP training** keeps the single-process run's global batch and data order: every rank draws
the whole batch of step s (:func:`tangentlab.empirical.train.make_batch` is a pure function of
the seed and the step) and takes its contiguous share of the rows (:func:`shard_rows`). Each rank's
loss is the sum of its shard's token losses divided by the *global* number of targets
(:func:`shard_loss`), times the world size because ``DistributedDataParallel`` averages the
gradients over ranks. The averaged gradient is then exactly the gradient of the global mean loss,
whatever the shares' sizes (an MLM batch has different numbers of masked tokens per row). Losses
and gradients differ from the single process by float32 rounding only (the sums are grouped by
rank), which ``tests/empirical/test_distributed_train.py`` bounds at 1e-5 relative.
"""

from __future__ import annotations

from typing import Any

from tangentlab.errors import ConfigError

__all__ = [
    "world_record",
    "wrap_ddp",
    "shard_rows",
    "n_targets",
    "shard_loss",
]


def world_record(world, device: str) -> dict[str, Any]:
    """The manifest's ``distributed`` entry: world size, backend and every rank's device
    (``device``: this rank's). A collective: every rank must call it.
    """
    devices = world.all_gather_object(str(device))
    return {"world_size": world.size, "backend": world.backend,
            "rank_devices": {str(r): d for r, d in enumerate(devices)}}


def wrap_ddp(model, world):
    """``model`` wrapped in ``DistributedDataParallel`` (parameters broadcast from rank 0), or
    ``model`` itself in a single process."""
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [world.device] if world.device.startswith("cuda") else None
    # our models' buffers (position ids, causal masks) never change: no per-forward buffer sync
    try:
        return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)
    except TypeError:  # torch before forward_sync_buffers
        return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)


def shard_rows(world, *tensors):
    """This rank's contiguous share of the rows (first axis) of each tensor."""
    n = int(tensors[0].shape[0])
    if n < world.size:
        raise ConfigError(
            f"batch_size {n} is smaller than the {world.size} ranks; use batch_size >= --nproc")
    lo, hi = world.bounds(n)
    return tuple(t[lo:hi] for t in tensors)


def n_targets(labels, arch: str) -> int:
    """The number of predicted tokens of a whole batch: decoder positions with a next token,
    encoder masked positions (labels != -100)."""
    lab = labels[:, 1:] if arch == "decoder" else labels
    return int((lab != -100).sum())


def shard_loss(module, inputs, labels, arch: str, total_targets: int):
    """Σ (token losses of this shard) / ``total_targets``, a float32 scalar tensor with graph.

    The same cross-entropy as the Hugging Face models' own loss (logits upcast to float32,
    next-token shift for the decoder, -100 ignored), reduced as a sum so that shards add up.
    """
    import torch.nn.functional as F

    logits = module(input_ids=inputs).logits.float()
    if arch == "decoder":
        logits, labels = logits[:, :-1], labels[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")
    return loss / max(1, int(total_targets))

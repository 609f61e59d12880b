"""Training and measuring on several ranks: what ``train`` and ``measure`` add under torchrun.

The process group, sharding and ordered collectives live in :mod:`tangentlab.distributed`; this
module holds what is specific to our models.

**DDP training** keeps the single-process run's global batch and data order: each rank takes
its contiguous share of the rows of step s's batch (a pure function of the seed and the step),
built alone (:func:`tangentlab.empirical.training.train_step.shard_batch`, the default) or sliced from
the whole batch (:func:`shard_rows`). The DDP wrapper the training loop uses is
:func:`tangentlab.empirical.training.train_step.wrap_ddp` (:func:`wrap_ddp` here is no longer called). Each rank's
loss is the sum of its shard's token losses divided by the *global* number of targets
(:func:`shard_loss`), times the world size because ``DistributedDataParallel`` averages the
gradients over ranks. The averaged gradient is then exactly the gradient of the global mean loss,
whatever the shares' sizes (an MLM batch has different numbers of masked tokens per row). Losses
and gradients differ from the single process by float32 rounding only (the sums are grouped by
rank), which ``tests/empirical/training/test_distributed_train.py`` bounds at 1e-5 relative.
"""

from __future__ import annotations

from typing import Any

from tangentlab.errors import ConfigError

__all__ = [
    "AUTOCAST_DTYPES",
    "autocast",
    "world_record",
    "wrap_ddp",
    "shard_rows",
    "n_targets",
    "shard_loss",
]


#: ``--autocast`` choices: the dtype of the autocast region of the forward pass.
AUTOCAST_DTYPES = ("bf16", "fp16")


def autocast(device: str, kind: str | None):
    """A ``torch.autocast`` region for the forward pass, or a no-op.

    A ``torch.autocast`` region for the forward (and its backward) on ``device`` in ``kind``
    (``bf16`` | ``fp16``), or a no-op for None / empty.

    Autocast runs the matrix products in the low precision and keeps reductions, softmax,
    normalization and the residual additions in float32, so residual-stream sites (and their
    gradients) stay float32; every statistic is then accumulated in float64 as always. A site
    that is itself a matrix product's output (``attn_out``, ``mlp_out``) is captured in ``kind``.
    """
    import contextlib

    if not kind:
        return contextlib.nullcontext()
    if kind not in AUTOCAST_DTYPES:
        raise ConfigError(f"autocast must be one of {', '.join(AUTOCAST_DTYPES)}; got {kind!r}")
    import torch

    dtype = torch.bfloat16 if kind == "bf16" else torch.float16
    dev_type = str(device).split(":")[0]
    if dev_type == "cpu" and kind == "fp16":
        raise ConfigError("autocast fp16 needs a GPU; on the CPU use --autocast bf16")
    return torch.autocast(device_type=dev_type, dtype=dtype)


def world_record(world, device: str) -> dict[str, Any]:
    """The manifest's ``distributed`` entry.

    The manifest's ``distributed`` entry: world size, backend and every rank's device
    (``device``: this rank's). A collective: every rank must call it.
    """
    devices = world.all_gather_object(str(device))
    return {"world_size": world.size, "backend": world.backend,
            "rank_devices": {str(r): d for r, d in enumerate(devices)}}


#: DDP gradient bucket size (MB) on CPU (gloo): ranks that share the cores have no idle core on
#: which to overlap small all-reduces with the backward, so the gradients go in one bucket after
#: it (benchmarks/bench_distributed.py --part train: 2-rank speed-up medians 1.58 and 1.73
#: against 1.61 with torch's buckets, within the run-to-run spread). GPUs keep torch's default
#: (25 MB), which overlaps communication with the backward.
CPU_BUCKET_MB = 100


def wrap_ddp(model, world):
    """``model`` in DistributedDataParallel, or itself in one process.

    ``model`` wrapped in ``DistributedDataParallel`` (parameters broadcast from rank 0), or
    ``model`` itself in a single process.
    """
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    gpu = world.device.startswith("cuda")
    ids = [world.device] if gpu else None
    buckets = {} if gpu else {"bucket_cap_mb": CPU_BUCKET_MB}
    # our models' buffers (position ids, causal masks) never change: no per-forward buffer sync
    try:
        return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False,
                                       gradient_as_bucket_view=True, **buckets)
    except TypeError:  # torch before forward_sync_buffers
        return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False,
                                       gradient_as_bucket_view=True, **buckets)


def shard_rows(world, *tensors):
    """This rank's contiguous share of the rows (first axis) of each tensor."""
    n = int(tensors[0].shape[0])
    if n < world.size:
        raise ConfigError(
            f"batch_size {n} is smaller than the {world.size} ranks; use batch_size >= --nproc")
    lo, hi = world.bounds(n)
    return tuple(t[lo:hi] for t in tensors)


def n_targets(labels, arch: str) -> int:
    """The number of predicted tokens of a whole batch.

    The number of predicted tokens of a whole batch: decoder positions with a next token,
    encoder masked positions (labels != -100).
    """
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


# ---------------------------------------------------------------------------------------------
# Measurement: data-parallel (ranks split each checkpoint's eval batches) and checkpoint-parallel
# (ranks take whole checkpoints). :func:`tangentlab.distributed.choose_mode` picks one.
# ---------------------------------------------------------------------------------------------


def output_directory(out_dir, world):
    """Rank 0's atomic output folder; nothing on the other ranks.

    Rank 0: :func:`tangentlab.runs.atomic_directory` (built under a temporary name, renamed
    at the end, removed on failure). Other ranks: no folder at all (yields None).
    """
    import contextlib

    from tangentlab.runs import atomic_directory

    return atomic_directory(out_dir) if world.is_main else contextlib.nullcontext(None)


def checkpoint_share(world, mode: str, n: int) -> list[int]:
    """The checkpoint indices this rank measures.

    The checkpoint indices this rank measures: all of them, or its contiguous share in
    checkpoint-parallel mode.
    """
    return world.shard(list(range(n))) if mode == "checkpoint" else list(range(n))


class DataShare:
    """This rank's share of the eval batches, and the merges on rank 0.

    This rank's contiguous share of the fit half and of the test half of the eval batches,
    and the merges of every rank's statistics on rank 0.

    Rank 0 folds the ranks' statistics in one at a time (:meth:`World.fold_to_main`), so it
    holds at most two partial records besides the merged one.
    Merges, all in rank order (= batch order, since shares are contiguous): moment accumulators
    (:meth:`MomentAccumulator.merge`, float64), per-token sums (float64, added rank by rank),
    counts (exact), samples, geometry rows and test activation rows (concatenated: exact),
    per-batch energies (:meth:`BatchEnergies.concat`: exact), forced-direction cosines (max
    exact, mean re-weighted). Only the float64 sums can differ from one process, by rounding.
    """

    def __init__(self, world, eval_data, plans):
        import dataclasses

        batches = list(eval_data.batches)
        fit = [i for i, b in enumerate(batches) if b.half == "fit"]
        test = [i for i, b in enumerate(batches) if b.half == "test"]
        mine = sorted(world.shard(fit) + world.shard(test))
        self.world = world
        self.n_test = len(test)
        self.eval_data = dataclasses.replace(eval_data, batches=[batches[i] for i in mine])
        self.plans = [plans[i] for i in mine]

    def fit_half(self, lm, sites, uniq, *, sample_only: bool = False):
        """The fit half over this rank's batches, merged on rank 0.

        :func:`collect_fit_half` over this rank's fit batches; the merged {site: SiteStats}
        on rank 0, None elsewhere.
        """
        from tangentlab.empirical.measurement.collect import collect_fit_half

        local = collect_fit_half(lm, sites, self.eval_data, self.plans, uniq,
                                 sample_only=sample_only)
        return self.world.fold_to_main(local, lambda a, b: merge_fit_parts([a, b], sites))

    def test_half(self, lm, sites, **kwargs):
        """The test half over this rank's batches, merged on rank 0.

        :func:`collect_test_half` over this rank's test batches; merged on rank 0, None
        elsewhere.
        """
        from tangentlab.empirical.measurement.collect import collect_test_half

        local = collect_test_half(lm, sites, self.eval_data, self.plans,
                                  n_test_batches=self.n_test, **kwargs)
        return self.world.fold_to_main(local, lambda a, b: merge_test_parts([a, b], sites))


def _sum_in_order(arrays):
    import numpy as np

    total = np.array(arrays[0], dtype=np.float64, copy=True)
    for a in arrays[1:]:
        total += a
    return total


def _concat(arrays):
    import numpy as np

    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)


def merge_fit_parts(parts, sites):
    """One {site: SiteStats} from the ranks' fit-half records (rank order)."""
    import dataclasses

    out = {}
    for site in sites:
        got = [p[site] for p in parts if site in p]
        if not got:
            continue
        act = got[0].act.copy()
        for g in got[1:]:
            act.merge(g.act)
        out[site] = dataclasses.replace(
            got[0], act=act,
            sample=_concat([g.sample for g in got]),
            sample_tokens=_concat([g.sample_tokens for g in got]),
            tok_sum=_sum_in_order([g.tok_sum for g in got]),
            tok_sq=_sum_in_order([g.tok_sq for g in got]),
            tok_n=sum(g.tok_n for g in got[1:]) + got[0].tok_n,
            geo_rows=_concat([g.geo_rows for g in got]),
            geo_tokens=_concat([g.geo_tokens for g in got]),
            geo_docs=_concat([g.geo_docs for g in got]) if got[0].geo_docs is not None else None,
            loss_sum=float(_sum_in_order([[g.loss_sum] for g in got])[0]),
            n_targets=int(sum(g.n_targets for g in got)),
        )
    return out


def merge_test_parts(parts, sites):
    """One {site: test-half result} from the ranks' :func:`collect_test_half` results."""
    from tangentlab.empirical.measurement.collect import _combine_cosines

    known = {"grad", "energies", "constrained", "forced", "test_acts", "test_act_weights",
             "loss_sum", "n_targets"}
    out = {}
    for site in sites:
        got = [p[site] for p in parts if site in p]
        if not got:
            continue
        unknown = sorted(set().union(*got) - known)
        if unknown:  # a new statistic of collect_test_half needs a merge rule here
            raise ConfigError(f"data-parallel measure cannot merge test-half fields {unknown}")
        grad = got[0]["grad"].copy()
        for g in got[1:]:
            grad.merge(g["grad"])
        merged = {}
        for name in ("energies", "constrained"):
            table = {}
            for g in got:
                for key, be in g[name].items():
                    table[key] = be if key not in table else table[key].concat(be)
            merged[name] = table
        forced: dict = {}
        for g in got:
            forced = _combine_cosines(forced, g["forced"]) if g["forced"] else forced
        out[site] = {"grad": grad, "energies": merged["energies"],
                     "constrained": merged["constrained"], "forced": forced,
                     "test_acts": _concat([g["test_acts"] for g in got]),
                     "test_act_weights": _concat([g["test_act_weights"] for g in got]),
                     "loss_sum": float(_sum_in_order([[g["loss_sum"]] for g in got])[0]),
                     "n_targets": int(sum(g["n_targets"] for g in got))}
    return out


def fixed_proxies(world, mode: str, share, setup, schedule, cks, timer, load, skip=frozenset()
                  ) -> tuple[dict, dict[int, dict]]:
    """The fixed proxy of every site, fitted on rank 0 and broadcast; and this rank's kept fit halves.

    The fixed proxy of every site, fitted on rank 0 from the fit window's samples and
    broadcast. Data mode: every rank captures its share of each window checkpoint's batches
    (sample only). Checkpoint mode: each rank collects the fit halves of its own checkpoints
    (:func:`checkpoint_share`) ahead of the main pass: the window ones always (their samples go
    to rank 0), and every one in full while a memory budget allows
    (:func:`tangentlab.empirical.measurement.collect.prefetch_fit_halves`), so that a rank whose share holds
    few window checkpoints works while rank 0 fits, and no fit half is forwarded twice.
    Returns ``(fixed {site: proxy}, kept {checkpoint index: {site: SiteStats}})``; ``skip``:
    indices already measured (a resumed run).
    """
    from tangentlab.empirical.measurement.collect import prefetch_fit_halves

    samples: dict = {s: {} for s in setup.sites}
    kept: dict[int, dict] = {}
    if mode == "data":
        for ck in [ck for ck in cks if schedule.in_window(ck.step)]:
            with timer("load"):
                lm = load(ck)
            with timer("capture"):
                got = share.fit_half(lm, setup.sites, setup.uniq, sample_only=True)
            if got is not None:
                for site in setup.sites:
                    samples[site][ck.step] = got[site].sample
    else:
        mine = checkpoint_share(world, mode, len(cks))
        got, kept = prefetch_fit_halves(
            [(i, cks[i], schedule.in_window(cks[i].step), i not in skip) for i in mine],
            load, setup.sites, setup.eval_data, setup.plans, setup.uniq, timer)
        local = {cks[i].step: by_site for i, by_site in got.items()}
        for part in world.gather_object(local) or []:
            for step, by_site in part.items():
                for site, x in by_site.items():
                    samples[site][step] = x
    fixed = None
    if world.is_main:
        with timer("proxy_fit"):
            fixed = {site: schedule.fit_fixed(samples[site], site) for site in setup.sites}
    return world.broadcast_object(fixed), kept


def previous_refits(setup, schedule, fixed, ck, timer, load) -> dict:
    """The refit proxies of the checkpoint before this rank's first.

    The refit proxies of checkpoint ``ck`` (the one before this rank's first), from a
    forward-only pass: what a single process carries over for the drift from the previous
    checkpoint.
    """
    from tangentlab.empirical.measurement.collect import collect_fit_half

    with timer("load"):
        lm = load(ck)
    with timer("capture"):
        got = collect_fit_half(lm, setup.sites, setup.eval_data, setup.plans, setup.uniq,
                               sample_only=True)
    with timer("proxy_fit"):
        return {site: schedule.proxies(fixed[site], got[site].sample, None, site=site).refit
                for site in setup.sites}


def gather_checkpoints(world, rows: list, info: list, per_ck: list):
    """Every rank's checkpoint results on rank 0, in checkpoint order.

    Every rank's checkpoint results (rows, manifest records, per-site arrays) on rank 0, in
    checkpoint order (ranks hold contiguous blocks); empty lists elsewhere.
    """
    parts = world.gather_object((rows, info, per_ck))
    if parts is None:
        return [], [], []
    return ([r for p in parts for r in p[0]], [x for p in parts for x in p[1]],
            [x for p in parts for x in p[2]])


class NoPartial:
    """The partial folder of a rank other than 0 (nothing saved).

    The partial folder of a rank other than 0: nothing saved, nothing to resume (rank 0 alone
    writes; see :class:`tangentlab.empirical.measurement.partial.PartialRun`).
    """

    def has(self, index: int) -> bool:  # noqa: ARG002
        return False

    def save(self, *args, **kwargs) -> None:
        return None

    def load(self, index: int):
        raise ConfigError(f"rank without a partial folder asked for checkpoint {index}")

    def clear(self) -> None:
        return None

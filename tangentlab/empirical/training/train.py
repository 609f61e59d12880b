"""Train a small masked-LM encoder or causal-LM decoder and save a checkpoint trajectory.

Layout of a training run directory::

    RUN/
      train_config.json          resolved TrainConfig (written first; resume checks it)
      tokenizer/                 the BPE tokenizer (HF format)
      frequency.csv              token counts on the training split
      eval.jsonl                 the held-out eval documents (what ``measure`` reads)
      checkpoints/step_000000/   HF model (config.json + model.safetensors) + tokenizer
                 step_000001/    + train_state.json; the latest also holds optimizer.pt
      train_log.csv              step, loss, lr, tokens_seen
      manifest.json              written last: the run is complete

Resume: ``resume=True`` continues from the newest complete checkpoint. A run stopped before its
first checkpoint (it holds ``train_config.json``, perhaps the tokenizer, but no checkpoint)
restarts from step 0, reusing the saved config (checked against the requested one) and whatever of
the tokenizer, frequency table and eval documents was already written. A training run directory
is locked while it is written (:func:`tangentlab.runs.run_lock`), so a second writer is refused.

Determinism and resume: the batch of step s (window starts and MLM masks) is drawn from a
``torch.Generator`` seeded with (seed, s), dropout defaults to 0, and the learning rate is a
pure function of the step. A checkpoint holds the weights, the optimizer state and the torch RNG
state, so ``resume=True`` continues from the last complete checkpoint and ends with weights
identical to an uninterrupted run (same machine, same thread count). Checkpoints are written
under a temporary name and renamed, so an interrupted write never looks complete. Only the
newest checkpoint keeps ``optimizer.pt`` (older ones are pure model snapshots).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.empirical.loading.checkpoints import list_checkpoints
from tangentlab.empirical.loading.data import make_batch
from tangentlab.empirical.training import train_step
from tangentlab.empirical.training.run_files import (
    check_resume,
    load_resume_point,
    read_log,
    save_checkpoint,
    write_inputs,
    write_log,
)
from tangentlab.empirical.training.train_config import (
    PRESETS,
    TrainConfig,
    check_inloop,
    resolve_train_config,
    weights_hash,
)
from tangentlab.empirical.training.train_step import NO_TIMER, DDPOptions, StepTimer
from tangentlab.errors import ConfigError

__all__ = ["TrainConfig", "PRESETS", "TrainState", "train_model", "check_inloop",
           "checkpoint_schedule", "list_checkpoints", "make_batch", "resolve_train_config"]


@dataclass
class TrainState:
    """What a training callback sees after each optimizer step.

    ``loss`` is the global mean loss of the step, or NaN on a step whose loss is still pending
    on the device (the loop reduces it every ``DDPOptions.log_every`` steps). A callback that
    needs the loss every ``k`` steps says so with an int attribute ``every`` (it then sees the
    loss at multiples of ``k`` and at the last step); one without ``every`` sees it every step.
    """

    step: int
    loss: float
    model: Any
    config: TrainConfig
    run_dir: Path
    tokens_seen: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def checkpoint_schedule(steps: int, n: int, late: int = 0) -> list[int]:
    """``n`` (or fewer, when steps are few) log-spaced steps in [0, steps].

    Always with 0 and steps, plus ``late`` evenly spaced steps in (steps/2, steps] (duplicates
    merged).
    """
    import numpy as np

    pts = {0, int(steps)}
    if n > 2 and steps > 1:
        for x in np.geomspace(1, steps, n - 1):
            pts.add(int(round(float(x))))
    if late > 0 and steps > 1:
        for x in np.linspace(steps / 2, steps, late + 1)[1:]:
            pts.add(int(round(float(x))))
    return sorted(pts)


def _lr_factor(step: int, cfg: TrainConfig) -> float:
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    prog = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog))


def train_model(
    arch: str,
    out_dir: str | Path,
    *,
    preset: str = "small",
    corpus: str = "wikipedia",
    device: str = "auto",
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    config_path: str | Path | None = None,
    resume: bool = False,
    callbacks: Sequence[Callable[[TrainState], None]] = (),
    autocast: str | None = None,
    ddp_options: DDPOptions | None = None,
    step_timer: StepTimer | None = None,
) -> Path:
    """Train ``arch`` (``encoder`` | ``decoder``) from scratch and save its trajectory in ``out_dir``.

    Returns the run directory. See the module docstring for its layout and :class:`TrainConfig`
    for the settings (``preset`` → ``config_path`` TOML → ``overrides`` → ``corpus``/``seed``).

    With ``resume=True``, training continues from the newest complete checkpoint, or restarts
    from step 0 when the run stopped before its first checkpoint (see the module docstring).

    ``autocast`` (``bf16`` | ``fp16``): forward passes and the loss under ``torch.autocast`` in
    that dtype; weights, gradients and optimizer states stay float32 (``fp16``, GPU only, adds a
    ``torch.amp.GradScaler``; a resumed ``fp16`` run starts its loss scale afresh). Recorded in
    the manifest (``autocast``).

    ``ddp_options`` (:class:`~tangentlab.empirical.training.train_step.DDPOptions`, default: the fast
    settings): how several ranks train; never changes the numbers beyond float32 reduction order.
    ``step_timer`` (:class:`~tangentlab.empirical.training.train_step.StepTimer`, default: a no-op):
    per-step phase timings (``benchmarks/bench_distributed.py`` passes a recording one).
    Under a launch with ``threads = 0``, each rank uses ``cores // ranks on this node`` torch
    threads (:func:`tangentlab._runtime.threads_per_rank`).

    Raises:
        ConfigError: bad config values, or ``resume`` with a config differing from the saved one.
        OutputPathError: ``out_dir`` is a file, a folder that is not empty, or a run of another
            kind; or it already holds a training run and ``resume`` is False.
        RunLockedError: another live process is writing ``out_dir``.
        DataError / UnknownNameError: unusable corpus.
        CheckpointError: ``resume`` but ``out_dir`` holds no training run, or its checkpoints
            have lost their optimizer state.
    """
    cfg = resolve_train_config(arch, preset, corpus=corpus, seed=seed, overrides=overrides,
                               config_path=config_path)
    import contextlib

    from tangentlab import crash, distributed
    from tangentlab._runtime import threads_per_rank, torch_threads
    from tangentlab.config import config_to_dict
    from tangentlab.runs import check_output_dir, run_lock

    crash.note(train_config=config_to_dict(cfg))
    main = distributed.is_main_process()  # under torchrun / --nproc rank 0 alone checks and locks
    if main:
        check_output_dir(out_dir, kind="empirical/train", existing="resume" if resume else "refuse")
    check_inloop(cfg)  # a bad in-loop site or rank fails now, not at step measure_every
    lock = (run_lock(out_dir, command=f"empirical train --arch {cfg.arch}") if main
            else contextlib.nullcontext())
    threads = cfg.threads or (threads_per_rank() if distributed.launched() else 0)
    with lock, torch_threads(threads):
        return _train(cfg, out_dir, device=device, resume=resume, callbacks=callbacks,
                      autocast=autocast, options=ddp_options or DDPOptions(),
                      timer=step_timer or NO_TIMER)


def _train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    device: str,
    resume: bool,
    callbacks: Sequence[Callable[[TrainState], None]],
    autocast: str | None = None,
    options: DDPOptions,
    timer: StepTimer,
) -> Path:
    import torch

    from tangentlab._runtime import quiet_transformers
    from tangentlab.config import config_to_dict
    from tangentlab.empirical.loading.models import resolve_device
    from tangentlab.runs import Timer

    quiet_transformers()
    from tangentlab import distributed
    from tangentlab.empirical.measurement import parallel

    world = distributed.ensure(device)  # one process, or one rank of torchrun / --nproc
    dev = world.device if world.distributed else resolve_device(device)
    dist_record = parallel.world_record(world, dev)
    parallel.autocast(dev, autocast)  # a bad choice fails before any work
    scaler = torch.amp.GradScaler(dev.split(":")[0], enabled=autocast == "fp16")
    run_dir = Path(out_dir)
    phases = Timer()
    cfg_dict = config_to_dict(cfg)
    chash = weights_hash(cfg_dict)
    existing = _checked_run_dir(run_dir, world, resume, cfg_dict, chash)
    world.barrier()  # every rank has checked the folder before rank 0 writes into it
    with phases("data"):
        split, data = _training_data(cfg, run_dir, world, resume, options)
    tokenizer, stream_np, counts, n_train_docs, n_eval_docs = data
    stream = torch.from_numpy(stream_np)
    # The run's inputs, the config first (it marks the folder as a training run). On resume,
    # whatever a stopped run had not written yet is written now; each file is atomic.
    run_dir.mkdir(parents=True, exist_ok=True)
    if world.is_main:  # rank 0 alone writes
        write_inputs(run_dir, cfg_dict, tokenizer, counts, split.eval if split else ())
    model, optimizers, ddp, probe = _model_and_optimizers(cfg, tokenizer, dev, world, options, timer)
    schedule = checkpoint_schedule(cfg.steps, cfg.n_checkpoints, cfg.late_checkpoints)
    start, tokens_seen, log_rows, resumed = _resume_point(run_dir, existing, resume, cfg, model,
                                                          optimizers, dev)
    special = [i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None]
    user_callbacks = list(callbacks)  # the same on every rank: when to reduce the logged loss
    # rank 0 alone logs, measures in-loop and writes
    callbacks = _rank_callbacks(cfg, run_dir, tokenizer, split, special, start, user_callbacks,
                                world)
    save = _checkpoint_writer(run_dir, cfg, chash, world, phases, model, tokenizer, optimizers,
                              log_rows)
    if not resumed:  # a new run, or one that stopped before its first checkpoint
        save(0, float("nan"), tokens_seen)

    model.train()
    batch_args = {"batch_size": cfg.batch_size, "seq_len": cfg.seq_len, "arch": cfg.arch,
                  "seed": cfg.seed, "mask_id": tokenizer.mask_token_id, "vocab_size": len(tokenizer),
                  "mlm_probability": cfg.mlm_probability, "special_ids": special}
    stepper = train_step.Stepper(
        model=model, ddp=ddp, probe=probe, optimizers=optimizers, scaler=scaler, world=world,
        cfg=cfg, device=dev, autocast=autocast, options=options, timer=timer, stream=stream,
        batch_args=batch_args, lr_at=lambda step: cfg.lr * _lr_factor(step, cfg))
    with phases("train"):
        _run_steps(cfg, options, timer, phases, stepper, train_step.LossLog(world), model=model,
                   run_dir=run_dir, start=start, tokens_seen=tokens_seen, schedule=schedule,
                   callbacks=callbacks, user_callbacks=user_callbacks, log_rows=log_rows,
                   save=save)
    model.eval()
    if world.is_main:
        _write_train_manifest(run_dir, cfg, model, dev, phases, len(tokenizer), {
            "train_tokens": int(stream_np.size), "eval_documents": n_eval_docs,
            "train_documents": n_train_docs, "resumed_from": start if resume else None,
            "distributed": dist_record, "autocast": autocast or None,
            "ddp_options": options.record() if world.distributed else None})
    world.barrier()  # every rank returns a complete run: rank 0 has written the last checkpoint
    return run_dir


def _checkpoint_writer(run_dir: Path, cfg: TrainConfig, chash: str, world, phases, model,
                       tokenizer, optimizers, log_rows: list[dict]) -> Callable[[int, float, int], None]:
    """``save(step, loss, tokens_seen)``: on rank 0, the checkpoint of ``step`` and the loss log.

    Every rank calls it; the others return at once.
    """
    state_base = {"arch": cfg.arch, "preset": cfg.preset, "seed": cfg.seed, "config_hash": chash,
                  "tie_embeddings": cfg.tie_embeddings, "optimizer": cfg.optimizer}

    def save(step: int, loss: float, tokens: int) -> None:
        if not world.is_main:
            return
        with phases("checkpoints"):
            save_checkpoint(run_dir, step, model, tokenizer, optimizers,
                            {**state_base, "step": step, "tokens_seen": tokens, "loss": loss},
                            keep_optimizer_states=cfg.keep_optimizer_states)
            write_log(run_dir, log_rows)

    return save


def _checked_run_dir(run_dir: Path, world, resume: bool, cfg_dict: dict, chash: str) -> list:
    """Check the run folder under the run lock; return its complete checkpoints ``(step, path)``.

    What ``train_model`` checked before taking the lock is checked again, what a killed writer
    left half-written is cleared (never read: a checkpoint counts once renamed into place), and
    a resume is checked against the saved config (:func:`~.run_files.check_resume`).
    """
    from tangentlab.progress import log
    from tangentlab.runs import check_output_dir, remove_partials

    if world.is_main:
        check_output_dir(run_dir, kind="empirical/train", existing="resume" if resume else "refuse")
    for folder in (run_dir, run_dir / "checkpoints") if world.is_main else ():
        for p in remove_partials(folder):
            log(f"removed {p.name}, left half-written by an interrupted run")
    existing = list_checkpoints(run_dir)
    if resume:
        check_resume(run_dir, cfg_dict, chash, existing)
    return existing


def _training_data(cfg: TrainConfig, run_dir: Path, world, resume: bool, options: DDPOptions):
    """The split texts and ``(tokenizer, stream, counts, n_train_docs, n_eval_docs)``.

    The training stream is a 1-D int array of token ids; ``counts`` its token counts, shape
    (vocab,). Validated before anything is written. Under DDP rank 0 alone builds them
    (``options.rank0_data``) and broadcasts: the other ranks would only compete with it for the
    cores (their split is then None).
    """
    from tangentlab.empirical.loading.corpus import frequency_table, load_texts, split_texts
    from tangentlab.empirical.loading.tokenizer import (
        encode_stream,
        load_tokenizer,
        train_tokenizer,
    )

    split, data = None, None
    if world.is_main or not options.rank0_data:
        docs = load_texts(cfg.corpus, max_docs=cfg.max_docs)
        split = split_texts(docs, cfg.eval_fraction, seed=cfg.seed)
        if resume and (run_dir / "tokenizer" / "tokenizer.json").is_file():
            tokenizer = load_tokenizer(run_dir / "tokenizer")
        else:
            tokenizer = train_tokenizer(split.train, cfg.vocab_size)
        stream_np = encode_stream(tokenizer, split.train, max_tokens=cfg.max_train_tokens)
        if stream_np.size <= cfg.seq_len + 1:
            raise ConfigError(
                f"the training stream has only {stream_np.size} tokens, fewer than seq_len "
                f"{cfg.seq_len}; use a larger corpus or a smaller seq_len"
            )
        counts = frequency_table(stream_np, len(tokenizer))
        data = (tokenizer, stream_np, counts, len(split.train), len(split.eval))
    if world.distributed:  # every rank trains on rank 0's tokenizer and stream
        data = world.broadcast_object(data)
    return split, data


def _model_and_optimizers(cfg: TrainConfig, tokenizer, dev: str, world, options: DDPOptions,
                          timer: StepTimer) -> tuple:
    """The model built from ``cfg`` (seeded) on ``dev``, its optimizers, DDP wrapper and probe.

    The wrapper and the probe are those of :func:`~.train_step.wrap_ddp` (on several ranks).
    """
    from tangentlab.empirical.loading.models import build_model

    model = build_model(
        cfg.arch, vocab_size=len(tokenizer), d_model=cfg.d_model, n_layers=cfg.n_layers,
        n_heads=cfg.n_heads, seq_len=cfg.seq_len, d_ff=cfg.d_ff or None,
        tie_embeddings=cfg.tie_embeddings, dropout=cfg.dropout,
        pad_token_id=tokenizer.pad_token_id or 0, seed=cfg.seed,
    )
    model.to(dev)
    ddp, probe = train_step.wrap_ddp(model, world, options, timer)  # DDP on several ranks
    return model, train_step.build_optimizers(model, cfg), ddp, probe


def _resume_point(run_dir: Path, existing: list, resume: bool, cfg: TrainConfig, model,
                  optimizers, dev: str) -> tuple[int, int, list[dict], bool]:
    """``(start step, tokens seen, loss-log rows, resumed)`` of this run.

    When resuming: the newest checkpoint that kept its optimizer state (loaded into ``model``
    and ``optimizers``); else step 0 with nothing seen.
    """
    from tangentlab.progress import log

    resumable = [(s, d) for s, d in existing if (d / "optimizer.pt").is_file()] if resume else []
    if resume and not resumable:
        log(f"{str(run_dir)!r} stopped before its first checkpoint: restarting {cfg.arch} from "
            "step 0 (reusing its config and tokenizer)")
    if not resumable:
        return 0, 0, [], False
    start, ck = resumable[-1]
    tokens_seen = load_resume_point(ck, model, optimizers, tie_embeddings=cfg.tie_embeddings,
                                    device=dev)
    log_rows = read_log(run_dir, start)
    log(f"resuming {cfg.arch} from step {start}")
    return start, tokens_seen, log_rows, True


def _rank_callbacks(cfg: TrainConfig, run_dir: Path, tokenizer, split, special: list[int],
                    start: int, user_callbacks: list, world) -> list:
    """The callbacks this rank runs after each step (none but on rank 0).

    On rank 0: the in-loop measurement (when ``cfg.measure_every`` > 0 and the eval text is long
    enough), then the user's.
    """
    if not world.is_main:
        return []
    callbacks = list(user_callbacks)
    if cfg.measure_every > 0:  # rank 0 alone measures in-loop
        import torch

        from tangentlab.empirical.loading.tokenizer import encode_stream
        from tangentlab.empirical.training.inloop import InLoopMeasure

        ev = torch.from_numpy(encode_stream(tokenizer, split.eval,
                                            max_tokens=cfg.batch_size * cfg.seq_len * 4))
        if ev.numel() > cfg.seq_len + 1:
            batch = make_batch(ev, 0, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                               arch=cfg.arch, seed=cfg.seed + 1, mask_id=tokenizer.mask_token_id,
                               vocab_size=len(tokenizer), mlm_probability=cfg.mlm_probability,
                               special_ids=special)
            callbacks.insert(0, InLoopMeasure(
                run_dir, cfg.arch, batch, every=cfg.measure_every, site=cfg.measure_site,
                rank=cfg.measure_rank, final_step=cfg.steps, seed=cfg.seed, start_step=start))
    return callbacks


def _run_steps(cfg: TrainConfig, options: DDPOptions, timer: StepTimer, phases, stepper, losses,
               *, model, run_dir: Path, start: int, tokens_seen: int, schedule: list[int],
               callbacks: list, user_callbacks: list, log_rows: list[dict],
               save: Callable[[int, float, int], None]) -> None:
    """Train steps ``start`` … ``cfg.steps - 1``.

    After each step: the loss log when due, the callbacks, and the scheduled checkpoint
    (``save(step, loss, tokens_seen)``).
    """
    from tangentlab import distributed
    from tangentlab.progress import progress

    bar = progress(range(start, cfg.steps), total=cfg.steps, initial=start, desc=f"train {cfg.arch}")
    step_tokens = cfg.batch_size * cfg.seq_len
    t0 = time.perf_counter()
    for step in bar:
        timer.begin_step(step)
        logged, lr = stepper(step)  # data, forward, backward (+ all-reduce), optimizer
        tokens_seen += step_tokens
        done = step + 1
        losses.add(done, logged, {"lr": lr, "tokens_seen": tokens_seen})
        due = (any(train_step.callback_due(cb, done, cfg.steps) for cb in user_callbacks)
               or (cfg.measure_every > 0
                   and (done % cfg.measure_every == 0 or done == cfg.steps)))
        lv = math.nan  # known on the steps that reduce the pending losses
        if len(losses) >= options.log_every or done in schedule or done == cfg.steps or due:
            lv = _flush_losses(losses, timer, log_rows)
            rate = (done - start) * step_tokens / max(1e-9, time.perf_counter() - t0)
            bar.set_postfix(loss=f"{lv:.3f}", tok_s=f"{rate:.0f}")
        st = TrainState(step=done, loss=lv, model=model, config=cfg, run_dir=run_dir,
                        tokens_seen=tokens_seen)
        for cb in callbacks:
            with phases("callbacks"):
                model.eval()
                cb(st)
                model.train()
        if done in schedule:
            model.eval()
            save(done, lv, tokens_seen)
            model.train()
        timer.end_step()
        distributed.fault_point("train_step", done)  # test hook (TANGENTLAB_FAULT)


def _flush_losses(losses, timer: StepTimer, log_rows: list[dict]) -> float:
    """Reduce the pending losses, append them to ``log_rows`` and return the last one.

    One collective (and host sync) for the pending steps. A non-finite loss is a ConfigError
    (the run diverged).
    """
    with timer.section("logging"):
        rows = losses.flush()  # one collective (and host sync) for the pending steps
    bad = train_step.first_non_finite(rows)
    if bad is not None:
        raise ConfigError(f"training diverged at step {bad[0] - 1} (loss {bad[1]}); lower lr")
    log_rows.extend({"step": s, "loss": v, **extra} for s, v, extra in rows)
    return rows[-1][1]


def _write_train_manifest(run_dir: Path, cfg: TrainConfig, model, dev: str, phases, vocab: int,
                          extra: dict) -> None:
    """Write the run's ``manifest.json`` (last: the run is complete)."""
    from tangentlab.runs import build_manifest, write_manifest

    ckpts = list_checkpoints(run_dir)
    manifest = build_manifest(
        kind="empirical/train", config=cfg, seeds={"seed": cfg.seed}, device=dev, dtype="float32",
        timings=phases.as_dict(),
        extra={"arch": cfg.arch, "family": model.config.model_type,
               "tie_embeddings": cfg.tie_embeddings, "vocab_size": vocab,
               "checkpoint_steps": [s for s, _ in ckpts], **extra},
    )
    write_manifest(run_dir, manifest)

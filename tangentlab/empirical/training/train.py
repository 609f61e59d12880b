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
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.empirical.loading.checkpoints import list_checkpoints
from tangentlab.empirical.loading.data import make_batch
from tangentlab.empirical.training import train_step
from tangentlab.empirical.training.train_config import (
    PRESETS,
    TrainConfig,
    check_inloop,
    resolve_train_config,
)
from tangentlab.empirical.training.train_step import NO_TIMER, DDPOptions, StepTimer
from tangentlab.errors import CheckpointError, ConfigError
from tangentlab.runs import TRAIN_CONFIG_NAME

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


def _ckpt_name(step: int) -> str:
    return f"step_{step:06d}"


def _save_checkpoint(run_dir: Path, step: int, model, tokenizer, optimizers, state: dict) -> Path:
    import torch

    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / _ckpt_name(step)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=root))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        torch.save(
            {"optimizers": [o.state_dict() for o in optimizers], "torch_rng": torch.get_rng_state()},
            tmp / "optimizer.pt",
        )
        (tmp / "train_state.json").write_text(json.dumps(state, indent=2) + "\n")
        from tangentlab._faults import pause_point

        pause_point("checkpoint", step)  # test-only: a kill here leaves a half-built checkpoint
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for s, d in list_checkpoints(run_dir):  # only the newest keeps the optimizer state
        if s != step:
            (d / "optimizer.pt").unlink(missing_ok=True)
    return final


def _write_log(run_dir: Path, rows: list[dict]) -> None:
    from tangentlab.runs import atomic_write_text

    cols = ["step", "loss", "lr", "tokens_seen"]
    lines = [",".join(cols)] + [",".join(repr(r[c]) if isinstance(r[c], float) else str(r[c])
                                         for c in cols) for r in rows]
    atomic_write_text(run_dir / "train_log.csv", "\n".join(lines) + "\n")


def _read_log(run_dir: Path, upto: int) -> list[dict]:
    """The rows of ``train_log.csv`` up to step ``upto``; a malformed line is a CheckpointError."""
    from tangentlab.readers import read_text

    p = run_dir / "train_log.csv"
    if not p.is_file():
        return []
    hint = "fix or delete it to resume (the loss log then restarts at the resumed step)"
    rows = []
    for lineno, line in enumerate(read_text(p, error=CheckpointError, hint=hint).splitlines()[1:], 2):
        if not line.strip():
            continue
        try:
            s, loss, lr, tok = line.split(",")
            row = {"step": int(s), "loss": float(loss), "lr": float(lr), "tokens_seen": int(tok)}
        except ValueError:
            raise CheckpointError(
                f"{str(p)!r} line {lineno} is not 'step,loss,lr,tokens_seen' (whole number, "
                f"number, number, whole number): {line[:60]!r}; {hint}") from None
        if row["step"] <= upto:
            rows.append(row)
    return rows


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
    from tangentlab.config import config_hash, config_to_dict
    from tangentlab.empirical.loading.corpus import (
        frequency_table,
        load_texts,
        save_frequency_table,
        split_texts,
    )
    from tangentlab.empirical.loading.models import build_model, resolve_device
    from tangentlab.empirical.loading.tokenizer import (
        encode_stream,
        load_tokenizer,
        train_tokenizer,
    )
    from tangentlab.progress import log, progress
    from tangentlab.runs import (
        Timer,
        atomic_write_json,
        atomic_write_text,
        build_manifest,
        check_output_dir,
        remove_partials,
        write_manifest,
    )

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
    chash = config_hash(cfg_dict)

    # under the run lock: check again what train_model checked before taking it, and clear what
    # a killed writer left half-written (never read: a checkpoint counts once renamed into place)
    if world.is_main:
        check_output_dir(run_dir, kind="empirical/train", existing="resume" if resume else "refuse")
    for folder in (run_dir, run_dir / "checkpoints") if world.is_main else ():
        for p in remove_partials(folder):
            log(f"removed {p.name}, left half-written by an interrupted run")
    existing = list_checkpoints(run_dir)
    if resume:
        if not (run_dir / TRAIN_CONFIG_NAME).is_file():
            raise CheckpointError(
                f"nothing to resume: {str(run_dir)!r} holds no training run; drop --resume to "
                "start one"
            )
        from tangentlab.readers import read_json

        saved = read_json(run_dir / TRAIN_CONFIG_NAME, expect=dict, error=CheckpointError,
                          hint=f"cannot resume {str(run_dir)!r}; delete the folder and train again")
        if config_hash(saved) != chash:
            diff = sorted(k for k in cfg_dict if saved.get(k) != cfg_dict[k])
            raise ConfigError(f"cannot resume {str(run_dir)!r}: config differs in {', '.join(diff)}")
        if existing and not any((d / "optimizer.pt").is_file() for _, d in existing):
            raise CheckpointError(
                f"cannot resume {str(run_dir)!r}: no checkpoint keeps its optimizer state; delete "
                f"{str(run_dir / 'checkpoints')!r} to restart from step 0"
            )

    world.barrier()  # every rank has checked the folder before rank 0 writes into it
    # Data and tokenizer (validated before anything is written).
    # Under DDP rank 0 alone builds them (options.rank0_data) and broadcasts: the other ranks
    # would only compete with it for the cores.
    split, data = None, None
    with phases("data"):
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
    tokenizer, stream_np, counts, n_train_docs, n_eval_docs = data
    vocab = len(tokenizer)
    stream = torch.from_numpy(stream_np)

    # The run's inputs, the config first (it marks the folder as a training run). On resume,
    # whatever a stopped run had not written yet is written now; each file is atomic.
    run_dir.mkdir(parents=True, exist_ok=True)
    if world.is_main and not (run_dir / TRAIN_CONFIG_NAME).is_file():  # rank 0 alone writes
        atomic_write_json(run_dir / TRAIN_CONFIG_NAME, cfg_dict)
    if world.is_main and not (run_dir / "tokenizer" / "tokenizer.json").is_file():
        tok_tmp = Path(tempfile.mkdtemp(prefix=".tokenizer.partial-", dir=run_dir))
        tokenizer.save_pretrained(str(tok_tmp))
        if (run_dir / "tokenizer").exists():
            shutil.rmtree(run_dir / "tokenizer")
        os.replace(tok_tmp, run_dir / "tokenizer")
    if world.is_main and not (run_dir / "frequency.csv").is_file():
        save_frequency_table(counts, run_dir / "frequency.csv")
    if world.is_main and not (run_dir / "eval.jsonl").is_file():
        atomic_write_text(run_dir / "eval.jsonl",
                          "".join(json.dumps({"text": t}) + "\n" for t in split.eval))

    model = build_model(
        cfg.arch, vocab_size=vocab, d_model=cfg.d_model, n_layers=cfg.n_layers,
        n_heads=cfg.n_heads, seq_len=cfg.seq_len, d_ff=cfg.d_ff or None,
        tie_embeddings=cfg.tie_embeddings, dropout=cfg.dropout,
        pad_token_id=tokenizer.pad_token_id or 0, seed=cfg.seed,
    )
    model.to(dev)
    ddp, probe = train_step.wrap_ddp(model, world, options, timer)  # DDP on several ranks
    optimizers = train_step.build_optimizers(model, cfg)
    schedule = checkpoint_schedule(cfg.steps, cfg.n_checkpoints, cfg.late_checkpoints)
    start, tokens_seen, log_rows = 0, 0, []

    resumable = [(s, d) for s, d in existing if (d / "optimizer.pt").is_file()] if resume else []
    if resume and not resumable:
        log(f"{str(run_dir)!r} stopped before its first checkpoint: restarting {cfg.arch} from "
            "step 0 (reusing its config and tokenizer)")
    if resumable:
        start, ck = resumable[-1]
        from safetensors.torch import load_file
        try:
            sd = load_file(str(ck / "model.safetensors"))
            missing, unexpected = model.load_state_dict(sd, strict=False)
            opt = torch.load(ck / "optimizer.pt", weights_only=True, map_location=dev)
        except Exception as exc:
            raise CheckpointError(f"checkpoint {str(ck)!r} is corrupt ({type(exc).__name__}); delete it and resume again") from None
        if unexpected or any(not _is_tied_key(k) for k in missing):
            raise CheckpointError(f"checkpoint {str(ck)!r} does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
        if cfg.tie_embeddings:
            model.tie_weights()
        for o, s in zip(optimizers, opt["optimizers"], strict=True):
            o.load_state_dict(s)
        torch.set_rng_state(opt["torch_rng"])
        from tangentlab.readers import read_json

        st = read_json(ck / "train_state.json", fields={"tokens_seen": int}, error=CheckpointError,
                       hint="delete that checkpoint and resume again")
        tokens_seen = st["tokens_seen"]
        log_rows = _read_log(run_dir, start)
        log(f"resuming {cfg.arch} from step {start}")

    special = [i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None]
    callbacks = list(callbacks)
    user_callbacks = list(callbacks)  # the same on every rank: when to reduce the logged loss
    if cfg.measure_every > 0 and world.is_main:  # rank 0 alone measures in-loop
        from tangentlab.empirical.training.inloop import InLoopMeasure

        ev = torch.from_numpy(encode_stream(tokenizer, split.eval,
                                            max_tokens=cfg.batch_size * cfg.seq_len * 4))
        if ev.numel() > cfg.seq_len + 1:
            batch = make_batch(ev, 0, batch_size=cfg.batch_size, seq_len=cfg.seq_len,
                               arch=cfg.arch, seed=cfg.seed + 1, mask_id=tokenizer.mask_token_id,
                               vocab_size=vocab, mlm_probability=cfg.mlm_probability,
                               special_ids=special)
            callbacks.insert(0, InLoopMeasure(
                run_dir, cfg.arch, batch, every=cfg.measure_every, site=cfg.measure_site,
                rank=cfg.measure_rank, final_step=cfg.steps, seed=cfg.seed, start_step=start))
    state_base = {"arch": cfg.arch, "preset": cfg.preset, "seed": cfg.seed, "config_hash": chash,
                  "tie_embeddings": cfg.tie_embeddings, "optimizer": cfg.optimizer}

    if not world.is_main:  # rank 0 alone logs, measures in-loop and writes
        callbacks = []

    def save(step: int, loss: float) -> None:
        if not world.is_main:
            return
        with phases("checkpoints"):
            _save_checkpoint(run_dir, step, model, tokenizer, optimizers,
                             {**state_base, "step": step, "tokens_seen": tokens_seen, "loss": loss})
            _write_log(run_dir, log_rows)

    if not resumable:  # a new run, or one that stopped before its first checkpoint
        save(0, float("nan"))

    model.train()
    bar = progress(range(start, cfg.steps), total=cfg.steps, initial=start, desc=f"train {cfg.arch}")
    batch_args = {"batch_size": cfg.batch_size, "seq_len": cfg.seq_len, "arch": cfg.arch,
                  "seed": cfg.seed, "mask_id": tokenizer.mask_token_id, "vocab_size": vocab,
                  "mlm_probability": cfg.mlm_probability, "special_ids": special}
    step_tokens = cfg.batch_size * cfg.seq_len
    stepper = train_step.Stepper(
        model=model, ddp=ddp, probe=probe, optimizers=optimizers, scaler=scaler, world=world,
        cfg=cfg, device=dev, autocast=autocast, options=options, timer=timer, stream=stream,
        batch_args=batch_args, lr_at=lambda step: cfg.lr * _lr_factor(step, cfg))
    losses = train_step.LossLog(world)
    t0 = time.perf_counter()
    with phases("train"):
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
            if (len(losses) >= options.log_every or done in schedule or done == cfg.steps
                    or due):
                with timer.section("logging"):
                    rows = losses.flush()  # one collective (and host sync) for the pending steps
                bad = train_step.first_non_finite(rows)
                if bad is not None:
                    raise ConfigError(f"training diverged at step {bad[0] - 1} (loss {bad[1]}); "
                                      "lower lr")
                log_rows.extend({"step": s, "loss": v, **extra} for s, v, extra in rows)
                lv = rows[-1][1]
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
                save(done, lv)
                model.train()
            timer.end_step()
            distributed.fault_point("train_step", done)  # test hook (TANGENTLAB_FAULT)
    model.eval()

    ckpts = list_checkpoints(run_dir)
    manifest = build_manifest(
        kind="empirical/train", config=cfg, seeds={"seed": cfg.seed}, device=dev, dtype="float32",
        timings=phases.as_dict(),
        extra={"arch": cfg.arch, "family": model.config.model_type,
               "tie_embeddings": cfg.tie_embeddings, "vocab_size": vocab,
               "checkpoint_steps": [s for s, _ in ckpts], "train_tokens": int(stream_np.size),
               "eval_documents": n_eval_docs, "train_documents": n_train_docs,
               "resumed_from": start if resume else None, "distributed": dist_record,
               "autocast": autocast or None,
               "ddp_options": options.record() if world.distributed else None},
    )
    if world.is_main:
        write_manifest(run_dir, manifest)
    world.barrier()  # every rank returns a complete run: rank 0 has written the last checkpoint
    return run_dir


def _is_tied_key(key: str) -> bool:
    return key.endswith(("lm_head.weight", "predictions.decoder.weight", "predictions.decoder.bias"))

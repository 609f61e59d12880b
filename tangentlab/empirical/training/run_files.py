"""A training run directory's files: its inputs, its checkpoints, its loss log, and resuming.

:func:`~tangentlab.empirical.training.train.train_model` writes the layout its module docstring
shows; this module owns every file of it but the manifest:

- :func:`write_inputs`: ``train_config.json`` (first: it marks the folder as a training run),
  ``tokenizer/``, ``frequency.csv`` and ``eval.jsonl``, each only when missing (a resumed run
  that stopped early writes what it had not written yet), each atomically;
- :func:`save_checkpoint`: ``checkpoints/step_NNNNNN/`` (weights, tokenizer, ``optimizer.pt``
  with the torch RNG state, ``train_state.json``), under a temporary name renamed into place;
  only the newest checkpoint keeps ``optimizer.pt``;
- :func:`write_log` and :func:`read_log`: ``train_log.csv`` (step, loss, lr, tokens_seen);
- :func:`check_resume` and :func:`load_resume_point`: what ``resume=True`` checks in the folder
  and reads back from its newest complete checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from tangentlab.empirical.loading.checkpoints import list_checkpoints
from tangentlab.errors import CheckpointError, ConfigError
from tangentlab.runs import TRAIN_CONFIG_NAME

__all__ = ["checkpoint_name", "save_checkpoint", "write_log", "read_log", "write_inputs",
           "check_resume", "load_resume_point", "is_tied_key"]


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint at ``step`` (``step_000100``)."""
    return f"step_{step:06d}"


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, optimizers, state: dict, *,
                    keep_optimizer_states: bool = False) -> Path:
    """Write the checkpoint of ``step`` under ``run_dir/checkpoints`` atomically; return its path.

    The weights and tokenizer (Hugging Face format), ``optimizer.pt`` (every optimizer's state
    and the torch RNG state) and ``train_state.json`` (``state``) go into a temporary folder
    renamed into place, so a half-written checkpoint never looks complete; then every older
    checkpoint drops its ``optimizer.pt``, unless ``keep_optimizer_states``.
    """
    import torch

    root = run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
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
        if s != step and not keep_optimizer_states:
            (d / "optimizer.pt").unlink(missing_ok=True)
    return final


def write_log(run_dir: Path, rows: list[dict]) -> None:
    """Write ``train_log.csv`` (step, loss, lr, tokens_seen; floats as ``repr``) atomically."""
    from tangentlab.runs import atomic_write_text

    cols = ["step", "loss", "lr", "tokens_seen"]
    lines = [",".join(cols)] + [",".join(repr(r[c]) if isinstance(r[c], float) else str(r[c])
                                         for c in cols) for r in rows]
    atomic_write_text(run_dir / "train_log.csv", "\n".join(lines) + "\n")


def read_log(run_dir: Path, upto: int) -> list[dict]:
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


def write_inputs(run_dir: Path, cfg_dict: dict, tokenizer, counts, eval_texts) -> None:
    """Write the run's inputs that ``run_dir`` does not hold yet, the config first.

    ``cfg_dict`` is the resolved config (``train_config.json``), ``counts`` the training token
    counts, shape (vocab,) (``frequency.csv``), ``eval_texts`` the held-out documents
    (``eval.jsonl``, one ``{"text": ...}`` per line; read only when the file is missing).
    """
    from tangentlab.empirical.loading.corpus import save_frequency_table
    from tangentlab.runs import atomic_write_json, atomic_write_text

    if not (run_dir / TRAIN_CONFIG_NAME).is_file():
        atomic_write_json(run_dir / TRAIN_CONFIG_NAME, cfg_dict)
    if not (run_dir / "tokenizer" / "tokenizer.json").is_file():
        tok_tmp = Path(tempfile.mkdtemp(prefix=".tokenizer.partial-", dir=run_dir))
        tokenizer.save_pretrained(str(tok_tmp))
        if (run_dir / "tokenizer").exists():
            shutil.rmtree(run_dir / "tokenizer")
        os.replace(tok_tmp, run_dir / "tokenizer")
    if not (run_dir / "frequency.csv").is_file():
        save_frequency_table(counts, run_dir / "frequency.csv")
    if not (run_dir / "eval.jsonl").is_file():
        atomic_write_text(run_dir / "eval.jsonl",
                          "".join(json.dumps({"text": t}) + "\n" for t in eval_texts))


def check_resume(run_dir: Path, cfg_dict: dict, chash: str, existing: list) -> None:
    """Refuse to resume ``run_dir`` unless it holds a resumable training run of the same config.

    ``existing`` are its checkpoints, ``(step, path)`` pairs; one of them must have kept its
    optimizer state.

    Raises:
        CheckpointError: no training run there, an unreadable config, or no checkpoint keeps
            its optimizer state.
        ConfigError: the saved config's hash (:func:`~tangentlab.empirical.training.train_config.
            weights_hash`) differs from ``chash`` (the keys that differ named).
    """
    from tangentlab.empirical.training.train_config import NOT_TRAINING, weights_hash
    from tangentlab.readers import read_json

    if not (run_dir / TRAIN_CONFIG_NAME).is_file():
        raise CheckpointError(
            f"nothing to resume: {str(run_dir)!r} holds no training run; drop --resume to "
            "start one"
        )
    saved = read_json(run_dir / TRAIN_CONFIG_NAME, expect=dict, error=CheckpointError,
                      hint=f"cannot resume {str(run_dir)!r}; delete the folder and train again")
    if weights_hash(saved) != chash:
        diff = sorted(k for k in cfg_dict if saved.get(k) != cfg_dict[k] and k not in NOT_TRAINING)
        raise ConfigError(f"cannot resume {str(run_dir)!r}: config differs in {', '.join(diff)}")
    if existing and not any((d / "optimizer.pt").is_file() for _, d in existing):
        raise CheckpointError(
            f"cannot resume {str(run_dir)!r}: no checkpoint keeps its optimizer state; delete "
            f"{str(run_dir / 'checkpoints')!r} to restart from step 0"
        )


def load_resume_point(ck: Path, model, optimizers, *, tie_embeddings: bool, device: str) -> int:
    """Load checkpoint ``ck`` into ``model`` and ``optimizers`` and restore the torch RNG state.

    Returns the tokens the run had seen at that checkpoint (its ``train_state.json``).

    Raises:
        CheckpointError: the checkpoint is corrupt, does not match the model, or its
            ``train_state.json`` is malformed.
    """
    import torch
    from safetensors.torch import load_file

    from tangentlab.readers import read_json

    try:
        sd = load_file(str(ck / "model.safetensors"))
        missing, unexpected = model.load_state_dict(sd, strict=False)
        opt = torch.load(ck / "optimizer.pt", weights_only=True, map_location=device)
    except Exception as exc:
        raise CheckpointError(f"checkpoint {str(ck)!r} is corrupt ({type(exc).__name__}); delete it and resume again") from None
    if unexpected or any(not is_tied_key(k) for k in missing):
        raise CheckpointError(f"checkpoint {str(ck)!r} does not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    if tie_embeddings:
        model.tie_weights()
    for o, s in zip(optimizers, opt["optimizers"], strict=True):
        o.load_state_dict(s)
    torch.set_rng_state(opt["torch_rng"])
    st = read_json(ck / "train_state.json", fields={"tokens_seen": int}, error=CheckpointError,
                   hint="delete that checkpoint and resume again")
    return st["tokens_seen"]


def is_tied_key(key: str) -> bool:
    """Whether ``key`` names an output weight tied to the input embeddings (absent when saved)."""
    return key.endswith(("lm_head.weight", "predictions.decoder.weight", "predictions.decoder.bias"))

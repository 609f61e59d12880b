"""Resolve a trajectory (what ``measure`` runs on) into an ordered list of checkpoints.

A trajectory is one of:

- a training run directory written by :func:`~tangentlab.empirical.training.train.train_model`
  (``checkpoints/step_*``, ``tokenizer/``, ``frequency.csv``, ``train_config.json``), or its
  ``checkpoints/`` folder, or one checkpoint inside it (the run's held-out ``eval.jsonl``,
  frequency table and config are then used as well);
- a directory of checkpoint directories (each a Hugging Face model directory); the step of each
  comes from its ``train_state.json`` or from the trailing integer of its name (``step1000``,
  ``step_000100``, ``checkpoint-500``, Pythia's ``step143000`` revisions, ...);
- a single model directory (one checkpoint; its step as above, else 0);
- a GGUF file (one checkpoint, loaded and dequantised by transformers; needs gguf + accelerate);
- a Hugging Face Hub model id ``ORG/NAME`` with a revision selection (``revisions=`` or
  ``ORG/NAME@SPEC``: ``step0,step1000``, ``log:12``, ``all``; default ``main``), resolved through
  ``huggingface_hub`` and its cache by :mod:`tangentlab.empirical.loading.hub`. An existing local path
  always wins over an id of the same spelling.

All checkpoints must share one architecture (model_type, hidden size, encoder/decoder);
anything else is a CheckpointError before any work starts.
"""

from __future__ import annotations

import re
from pathlib import Path

from tangentlab.errors import CheckpointError, ConfigError
from tangentlab.readers import read_json

__all__ = ["Checkpoint", "Trajectory", "resolve_trajectory", "check_same_architecture"]

from tangentlab.empirical.loading.checkpoints import (  # noqa: E402  (the records, re-exported)
    Checkpoint,
    Trajectory,
    check_same_architecture,
)

_TRAILING_INT = re.compile(r"(\d+)$")


def _step_of(d: Path, default: int | None) -> int:
    st = d / "train_state.json"
    if st.is_file():
        return read_json(st, fields={"step": int}, error=CheckpointError,
                         hint="it must hold {\"step\": N}")["step"]
    m = _TRAILING_INT.search(d.name)
    if m:
        return int(m.group(1))
    if default is None:
        raise CheckpointError(
            f"cannot infer the training step of checkpoint {str(d)!r}; name it step_<N> or add "
            "a train_state.json with {\"step\": N}"
        )
    return default


def _read_train_config(run_dir: Path) -> dict:
    """A training run's ``train_config.json``: an object (CheckpointError otherwise)."""
    return read_json(run_dir / "train_config.json", expect=dict, error=CheckpointError,
                     hint="it is written by tangentlab empirical train; train the run again")


def resolve_trajectory(path: str | Path, *, gguf: bool = False,
                       revisions: str | list[str] | None = None, steps: list[int] | None = None,
                       cache_dir: str | Path | None = None,
                       offline: bool | None = None) -> Trajectory:
    """Resolve ``path`` into a :class:`Trajectory` (see the module docstring).

    ``revisions``, ``steps``, ``cache_dir`` and ``offline`` apply to a Hub model id (see
    :func:`tangentlab.empirical.loading.hub.resolve_hub_trajectory`).

    Raises:
        CheckpointError: missing path, no checkpoints, unreadable configs, missing weights,
            uninferable steps, duplicate steps, or checkpoints of different architectures.
        UnknownNameError: a model id (or one of its revisions) that is neither a local path nor
            on the Hub / in its cache.
        ConfigError: ``revisions`` given with a local path.
    """
    from tangentlab.empirical.loading.checkpoints import list_checkpoints
    from tangentlab.empirical.loading.hub import looks_like_repo_id, resolve_hub_trajectory

    p = Path(path)
    if not gguf and not p.exists() and looks_like_repo_id(str(path)):
        return resolve_hub_trajectory(str(path), revisions, steps=steps, cache_dir=cache_dir,
                                      offline=offline)
    if revisions is not None or steps is not None:
        raise ConfigError(
            f"revisions/steps select revisions of a Hub model id, but {str(path)!r} is a local "
            "path; pass an id such as EleutherAI/pythia-70m, or drop --revisions"
        )
    if gguf or (p.is_file() and p.suffix == ".gguf"):
        if not p.is_file():
            raise CheckpointError(f"GGUF file {str(p)!r} does not exist")
        ck = Checkpoint(path=p.parent, name=p.stem, step=0, gguf_file=p.name)
        return Trajectory([ck], model_name=p.stem)
    if not p.is_dir():
        raise CheckpointError(f"trajectory {str(p)!r} does not exist or is not a directory")
    run_dir, train_cfg = None, {}
    if (p / "checkpoints").is_dir():
        run_dir = p
        found = list_checkpoints(p)
        if not found:
            raise CheckpointError(f"run {str(p)!r} has no complete checkpoint under checkpoints/")
        cks = [Checkpoint(path=d, name=d.name, step=s) for s, d in found]
        if (p / "train_config.json").is_file():
            train_cfg = _read_train_config(p)
    elif (p / "config.json").is_file():
        cks = [Checkpoint(path=p, name=p.name, step=_step_of(p, 0))]
    else:
        subs = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith("."))
        subs = [d for d in subs if (d / "config.json").is_file() or (d / "train_state.json").is_file()]
        if not subs:
            raise CheckpointError(
                f"{str(p)!r} is neither a model directory (config.json) nor a directory of "
                "checkpoint directories"
            )
        cks = sorted((Checkpoint(path=d, name=d.name, step=_step_of(d, None)) for d in subs),
                     key=lambda c: c.step)
    steps = [c.step for c in cks]
    if len(set(steps)) != len(steps):
        raise CheckpointError(f"trajectory {str(p)!r} has duplicate steps {steps}")
    check_same_architecture(cks, str(p))
    if run_dir is None:
        # a run's checkpoints/ folder, or one checkpoint inside it: use the run's held-out
        # documents, frequency table and training config too
        for cand in (p.parent if p.name == "checkpoints" else None,
                     p.parent.parent if p.parent.name == "checkpoints" else None):
            if cand is not None and (cand / "train_config.json").is_file():
                run_dir = cand
                train_cfg = _read_train_config(cand)
                break
    name = run_dir.name if run_dir is not None and p != run_dir else p.name
    return Trajectory(cks, model_name=name, run_dir=run_dir, train_config=train_cfg)

"""The trajectory records: :class:`Checkpoint`, :class:`Trajectory`, one architecture per trajectory.

Kept apart from :mod:`~tangentlab.empirical.loading.trajectory` (which resolves paths and Hub ids into
these records) so that :mod:`~tangentlab.empirical.loading.hub` can build them without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tangentlab.errors import CheckpointError
from tangentlab.readers import read_json

__all__ = ["Checkpoint", "Trajectory", "check_same_architecture", "list_checkpoints"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model",
                    "vocab.txt")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: its directory, its name, its training step, an optional GGUF file name.

    And for a Hub checkpoint its model id, revision and commit hash (None for local ones).
    """

    path: Path
    name: str
    step: int
    gguf_file: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    commit: str | None = None

    def to_dict(self) -> dict:
        """The manifest record: name, step, path, and the Hub id/revision/commit when known."""
        out = {"checkpoint": self.name, "step": self.step, "path": str(self.path)}
        if self.gguf_file:
            out["gguf_file"] = self.gguf_file
        if self.repo_id is not None:
            out.update(repo_id=self.repo_id, revision=self.revision, commit=self.commit)
        return out


@dataclass
class Trajectory:
    """Checkpoints ordered by step, plus what the run directory knows (tokenizer, frequencies).

    ``tokenizer_dir``, ``eval_file`` and ``frequency_file`` look at the disk once, when first
    read: preflight and the measurement see the same files.
    """

    checkpoints: list[Checkpoint]
    model_name: str
    run_dir: Path | None = None
    train_config: dict = field(default_factory=dict)
    source: str = "local"  #: ``local`` (directories, GGUF) or ``hub`` (a model id)

    @property
    def max_step(self) -> int:
        """The largest step of the trajectory."""
        return max(c.step for c in self.checkpoints)

    @cached_property
    def tokenizer_dir(self) -> Path:
        """The run's ``tokenizer/``, else the first checkpoint holding tokenizer files.

        Else the first checkpoint (a Hub revision may lack tokenizer files that later ones have).
        """
        if self.run_dir is not None and (self.run_dir / "tokenizer").is_dir():
            return self.run_dir / "tokenizer"
        for ck in self.checkpoints:
            if ck.gguf_file is None and any((ck.path / f).is_file() for f in _TOKENIZER_FILES):
                return ck.path
        return self.checkpoints[0].path

    @cached_property
    def eval_file(self) -> Path | None:
        """The training run's held-out documents (``eval.jsonl``), when the trajectory is one of ours."""
        if self.run_dir is not None and (self.run_dir / "eval.jsonl").is_file():
            return self.run_dir / "eval.jsonl"
        return None

    @cached_property
    def frequency_file(self) -> Path | None:
        """The training run's token-frequency table (``frequency.csv``), when the trajectory is one of ours."""
        if self.run_dir is not None and (self.run_dir / "frequency.csv").is_file():
            return self.run_dir / "frequency.csv"
        return None


def _signature(d: Path, gguf_file: str | None) -> tuple:
    if gguf_file is not None:
        return ("gguf",)
    cfg_file = d / "config.json"
    if not cfg_file.is_file():
        raise CheckpointError(f"checkpoint {str(d)!r} has no config.json; is it a Hugging Face model dir?")
    cfg = read_json(cfg_file, expect=dict, error=CheckpointError,
                    optional={"model_type": str, "architectures": list, "hidden_size": int,
                              "n_embd": int, "d_model": int},
                    hint="a Hugging Face config.json is an object such as save_pretrained writes")
    weights = list(d.glob("*.safetensors")) + list(d.glob("*.bin"))
    if not weights:
        raise CheckpointError(f"checkpoint {str(d)!r} has no weights (*.safetensors or *.bin)")
    hidden = cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model")))
    return (cfg.get("model_type"), hidden, tuple(cfg.get("architectures") or ()))


def check_same_architecture(cks: list[Checkpoint], label: str) -> None:
    """CheckpointError unless every checkpoint has one architecture (model_type, d, classes)."""
    sigs = {c.name: _signature(c.path, c.gguf_file) for c in cks}
    if len(set(sigs.values())) > 1:
        desc = ", ".join(f"{n}={s[0]}/d={s[1]}" for n, s in sigs.items())
        raise CheckpointError(
            f"trajectory {label!r} mixes architectures ({desc}); measure one model's checkpoints "
            "at a time"
        )


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run (``checkpoints/step_*`` with train_state.json), by step."""
    root = Path(run_dir) / "checkpoints"
    out = []
    if root.is_dir():
        for d in root.iterdir():
            if d.is_dir() and d.name.startswith("step_") and (d / "train_state.json").is_file():
                try:
                    out.append((int(d.name[5:]), d))
                except ValueError:
                    continue
    return sorted(out)

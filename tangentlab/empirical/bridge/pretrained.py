"""The optional reproduce stage ``pretrained/smollm2``: a real pretrained model through the table.

SmolLM2-135M (a GGUF file, or a folder it was saved to with ``save_pretrained``) is measured by
the same protocol, with the bridge on (``bridge.csv``: theory against measurement, in numbers),
at its one checkpoint. The stage is in the reproduce graph when the environment variable
:data:`ENV_VAR` names the model (:func:`configured_path`); it then

- writes :data:`NOT_RUN_NAME` with the reason and measures nothing when the ``gguf`` extra
  (``gguf`` and ``accelerate``) is not installed: "not run (extra not installed)";
- writes the same when the path does not exist;
- otherwise runs :func:`~tangentlab.empirical.measurement.protocol.measure_trajectory` with
  :data:`PRETRAINED_MEASURE` (sized for CPU: SmolLM2 takes about 15 s for a 32 x 128 forward
  pass; 100 x 8 x 128 tokens of the King James Bible corpus, whose 1,189 chapters are its
  documents: half of them are eval text, so that the 800 windows fall in several hundred
  documents (468 in the run of 2026-12-05) and the frequent tokens reach the 64
  one-per-document occurrences the local fits need (the 106-article Wikipedia corpus gave at most 30); the other half is counted as the
  frequency table; position 0, whose activation norm is ~150x the others, is left out of fitting
  and distance statistics. About 7 minutes on 2 cores).

The report reads both (:mod:`tangentlab.report.theory_numbers`).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

__all__ = ["ENV_VAR", "NOT_RUN_NAME", "PRETRAINED_MEASURE", "configured_path", "extra_missing",
           "run_pretrained", "check_pretrained", "STAGE"]

#: Names the SmolLM2-135M GGUF file (or a saved model folder); unset: the stage is not built.
ENV_VAR = "TANGENTLAB_SMOLLM2"
#: The reproduce stage's name (and folder).
STAGE = "pretrained/smollm2"
#: Written instead of a measurement when the stage cannot run.
NOT_RUN_NAME = "not_run.json"
#: The measure overrides of the pretrained stage (quick adds nothing: one checkpoint anyway).
PRETRAINED_MEASURE: dict[str, Any] = {
    "n_batches": 100, "batch_size": 8, "seq_len": 128, "sample_rows": 2048, "n_boot": 200,
    "n_controls": 5, "control_pool": 20, "causal": False, "exclude_positions": (0,),
    "eval_text": "bible", "eval_fraction": 0.5, "bridge_boot": 200, "bridge_tokens": 200,
}


def configured_path() -> str | None:
    """The model path from :data:`ENV_VAR`, or None when it is unset or empty."""
    v = os.environ.get(ENV_VAR, "").strip()
    return v or None


def extra_missing() -> str:
    """``""`` when the ``gguf`` extra is importable, else which packages are missing."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    return ", ".join(missing)


def _not_run(out: Path, reason: str) -> None:
    """Write why the stage did not run, with a manifest (so the stage's output check passes)."""
    import json

    from tangentlab.runs import atomic_write_text, build_manifest, write_manifest

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / NOT_RUN_NAME, json.dumps({"status": "not run", "reason": reason}) + "\n")
    write_manifest(out, build_manifest(kind="empirical/pretrained-not-run",
                                       config={"reason": reason}, seeds={}))


def run_pretrained(out: str | Path, model_path: str, *, device: str = "cpu", seed: int = 0,
                   measure: dict[str, Any] | None = None) -> Path:
    """The stage body: measure ``model_path`` into ``out``, or write why it was not run.

    ``measure``: the measure overrides (default :data:`PRETRAINED_MEASURE`).
    """
    from tangentlab.empirical.measurement.protocol import measure_trajectory

    out = Path(out)
    missing = extra_missing()
    if missing:
        _not_run(out, f"not run (extra not installed: {missing}; pip install 'tangentlab[gguf]')")
        return out
    p = Path(model_path)
    if not p.exists():
        _not_run(out, f"not run (no model at {ENV_VAR}={model_path!r})")
        return out
    measure_trajectory(p, out, device=device, seed=seed, overrides=dict(PRETRAINED_MEASURE if measure is None else measure),
                       gguf=p.suffix == ".gguf")
    return out


def check_pretrained(out: Path) -> None:
    """The stage's output check: a not-run record, or a measurement with its ``bridge.csv``."""
    from tangentlab.empirical.bridge.run import BRIDGE_NAME
    from tangentlab.errors import DataError
    from tangentlab.runs import read_manifest

    if (out / NOT_RUN_NAME).is_file():
        return
    read_manifest(out)
    if not (out / BRIDGE_NAME).is_file():
        raise DataError(f"{out} holds a measurement but no {BRIDGE_NAME}")

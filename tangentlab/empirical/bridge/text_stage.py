"""The reproduce stage ``bridge/<arch>``: our trained models' closed forms in numbers (issue 36).

The measure stage reads the training run's own held-out split: in a default reproduce 13
Wikipedia documents, too few for the per-token fits (each needs 64 distinct documents), so every
curvature, attenuation and visibility cell of its ``bridge.csv`` reads "not measurable here".
This stage measures the same trajectory again with the protocol of
:func:`~tangentlab.empirical.measurement.protocol.measure_trajectory`, only to fill those cells:

- at three checkpoints spread over the schedule (``max_checkpoints`` = 3: the first, the
  middle and the last; steps 0, 126 and 1000 of the ``small`` preset, where 126 is the default
  decoder's first-block enrichment peak);
- on a text with enough documents: ``bridge_text`` (default the King James Bible, whose 1,189
  chapters are its documents), 30% of them as eval text (about 360 documents), 200 batches;
- with the **training split's own frequency table** (``train/<arch>/frequency.csv``) for the
  token ranks, since pinning is a property of training frequencies, not of the eval text's;
- without the causal check and the learning arms (nothing here reads them).

Its rows feed the theory-against-measurement table and the findings only. The prediction rows
read the measure stages (their units are ``measure/<arch>``), never this one, so no verdict and
no certificate depends on it. About 2 minutes per architecture on 2 cores (the default run of
2026-12-06: decoder 126 s, capture 56 s and bridge 57 s; encoder 135 s). The reproduce builds no
such stage when the training corpus is the bridge text (its split would hold trained-on
documents), so the text is never the training distribution: read its numbers as the geometry
of the trained model on other English. ``measure_overrides`` do not apply here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tangentlab.contract import bridge_stage as text_stage

__all__ = ["TEXT_MEASURE", "text_stage", "run_text_bridge"]

#: The measure overrides of the stage, the eval text aside (``bridge_text`` of the reproduce).
TEXT_MEASURE: dict[str, Any] = {
    "eval_fraction": 0.3, "n_batches": 200, "max_checkpoints": 3, "causal": False,
    "learning_arms": False, "bridge": True,
}


def run_text_bridge(out: str | Path, trajectory: str | Path, frequency_table: str | Path, *,
                    text: str = "bible", device: str = "cpu", seed: int = 0,
                    measure: Mapping[str, Any] | None = None) -> Path:
    """Measure ``trajectory`` on ``text`` into ``out`` with the bridge on; returns ``out``.

    ``frequency_table``: the training run's ``token_id,count`` table (its ranks order the
    tokens). ``measure``: the measure overrides (default :data:`TEXT_MEASURE`); ``text`` becomes
    their ``eval_text``.
    """
    from tangentlab.empirical.measurement.protocol import measure_trajectory

    overrides = {**(TEXT_MEASURE if measure is None else measure), "eval_text": text,
                 "frequency_table": str(frequency_table)}
    return measure_trajectory(trajectory, out, device=device, seed=seed, overrides=overrides)

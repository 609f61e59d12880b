"""tangentlab.empirical: real masked-LM and causal-LM Transformers, their true gradients, and
the paper's tangent-proxy protocol over a checkpoint trajectory.

- :func:`train_model`: train a small encoder (BERT, MLM) or decoder (GPT-2) from scratch on real
  English text, saving a log-spaced checkpoint trajectory (resumable, bit-identical);
- :func:`measure_trajectory`: the protocol (energy test against matched-rank controls, anisotropy
  share, representation isotropy, frequency–geometry, causal ablation/steering, early/late);
- :data:`PRESETS` (``tiny``, ``small``, ``base``), :class:`TrainConfig`, :class:`MeasureConfig`;
- :func:`capture_batch` and the site names of :mod:`tangentlab.empirical.sites`.

Heavy modules (torch, transformers) load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PRESETS",
    "TrainConfig",
    "MeasureConfig",
    "QUICK_MEASURE",
    "train_model",
    "measure_trajectory",
    "capture_batch",
    "load_model",
    "available_sites",
]

_WHERE = {
    "PRESETS": "train",
    "TrainConfig": "train",
    "train_model": "train",
    "MeasureConfig": "protocol",
    "QUICK_MEASURE": "protocol",
    "measure_trajectory": "protocol",
    "capture_batch": "capture",
    "load_model": "models",
    "available_sites": "sites",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"tangentlab.empirical.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'tangentlab.empirical' has no attribute {name!r}")

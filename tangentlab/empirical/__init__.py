"""tangentlab.empirical: real masked-LM and causal-LM Transformers, their true gradients, and
the paper's tangent-proxy protocol over a checkpoint trajectory.

- :func:`train_model`: train a small encoder (BERT, MLM) or decoder (GPT-2) from scratch on real
  English text, saving a log-spaced checkpoint trajectory (resumable, bit-identical);
- :func:`measure_trajectory`: the protocol (energy test against matched-rank controls, anisotropy
  share, representation isotropy, frequency–geometry, causal ablation/steering, early/late);
  :func:`preflight` checks all of its inputs in seconds, without loading weights;
- :func:`resolve_trajectory`: a run directory, a folder of checkpoints, a model folder, a GGUF
  file, or a Hub id with revisions (``resolve_trajectory("EleutherAI/pythia-160m",
  revisions="log:12")``) → a :class:`Trajectory` of :class:`Checkpoint` records;
  :func:`list_revisions` and :func:`select_revisions` list and pick a Hub model's refs;
- :data:`PRESETS` (``tiny``, ``small``, ``medium``, ``base``), :class:`TrainConfig`, :class:`MeasureConfig`;
- :func:`load_model`, :func:`capture_batch` (keyed by the site names you pass) and the site
  names of :mod:`tangentlab.empirical.loading.sites` (:func:`available_sites`).

The modules live in four rooms: :mod:`~tangentlab.empirical.loading` (models and what they
are loaded from), :mod:`~tangentlab.empirical.training`, :mod:`~tangentlab.empirical.measurement`
(the protocol) and :mod:`~tangentlab.empirical.bridge` (theory against measurement).

Heavy modules (torch, transformers) load on first use.
"""

from __future__ import annotations

from tangentlab._lazy import lazy_exports

# module -> the names it exports; absolute names, as the modules live in the rooms (loading,
# training, measurement, bridge)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "tangentlab.empirical.training.train": ("PRESETS", "TrainConfig", "train_model"),
    "tangentlab.empirical.measurement.protocol": ("MeasureConfig", "measure_trajectory"),
    "tangentlab.empirical.measurement.preflight": ("preflight",),
    "tangentlab.empirical.loading.trajectory": ("Checkpoint", "Trajectory", "resolve_trajectory"),
    "tangentlab.empirical.loading.hub": ("list_revisions", "select_revisions"),
    "tangentlab.empirical.loading.capture": ("capture_batch",),
    "tangentlab.empirical.loading.models": ("load_model",),
    "tangentlab.empirical.loading.sites": ("available_sites",),
})

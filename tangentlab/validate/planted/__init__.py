"""The ``planted`` model family: transformers models whose geometry and loss are known by construction.

- :mod:`tangentlab.validate.planted.model`: the geometry (activations, planted gradient
  directions, ablation cost) and :class:`PlantedForCausalLM`, the causal-LM head (``model_type``
  ``planted``, a decoder);
- :mod:`tangentlab.validate.planted.masked`: :class:`PlantedForMaskedLM`, the masked-LM head on
  the same geometry (``model_type`` ``planted_mlm``, an encoder: the loss lives at the masked
  positions and reaches every position), the planted twin of an encoder (issue 35).

Importing this package registers both with ``AutoConfig`` and ``AutoModelForCausalLM`` /
``AutoModelForMaskedLM`` (idempotent), so a saved planted checkpoint loads like any other; the
family table (:mod:`tangentlab.empirical.loading.site_table`) names this package as the
family's provider, and the loader imports it on first use.
"""

from __future__ import annotations

from tangentlab.validate.planted.masked import PlantedForMaskedLM, PlantedMaskedConfig
from tangentlab.validate.planted.model import (
    COST_SHAPES,
    PlantedConfig,
    PlantedForCausalLM,
    PlantedModel,
    context_keys,
    hash_normals,
    planted_scores,
)

__all__ = ["PlantedConfig", "PlantedModel", "PlantedForCausalLM", "PlantedMaskedConfig",
           "PlantedForMaskedLM", "COST_SHAPES", "register", "hash_normals", "context_keys",
           "planted_scores"]


def register() -> None:
    """Register both heads with ``AutoConfig`` and their ``AutoModelFor…`` classes (idempotent)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    for model_type, config, auto, model in (
            ("planted", PlantedConfig, AutoModelForCausalLM, PlantedForCausalLM),
            ("planted_mlm", PlantedMaskedConfig, AutoModelForMaskedLM, PlantedForMaskedLM)):
        try:
            AutoConfig.register(model_type, config)
        except ValueError:
            pass  # already registered
        try:
            auto.register(config, model)
        except ValueError:
            pass


register()

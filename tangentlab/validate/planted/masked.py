"""The planted family's masked-LM head: the planted twin of an encoder (issue 35).

:class:`PlantedForMaskedLM` keeps the geometry of :mod:`tangentlab.validate.planted.model`: the
same activations, sites, planted gradient directions w_c, row scale and ablation cost (one base
:class:`~tangentlab.validate.planted.model.PlantedHead`), and puts a masked LM's head on it, so
the measurement's encoder path (MLM-masked eval batches, the loss at the masked positions,
every position a row, geometry from the unmasked ones) runs on a known truth.

- **Inputs are MLM-masked, and the activations are keyed by the input id**: a position whose
  token was replaced by the mask token (80% of the chosen ones) sits at the mask token's point
  of the chart, moved by its context, as a real encoder's lower layers place it; the measurement
  labels each row with its *true* token (the eval batch's ``token_ids``).
- **The loss is the label's cross-entropy at the masked positions, and the head never reads the
  label** (it cannot: the input holds the mask token). With the per-position score
  S_s = w_s · h_s − φ(q_s) (:func:`~tangentlab.validate.planted.model.planted_scores`) the head
  puts the logit log(V − 1) − β F_t on a *sink* id (``sink_id``: the mask token, which is never a
  label) and 0 on every other id, so whatever the label y ≠ sink the loss is
  ℓ_t = log(V − 1) + softplus(−β F_t) and dℓ_t/dF_t = −β σ(−β F_t) < 0 (½β at F = 0): the causal
  head's −β(1 − p_y), with the sign every context shares (the learning-arms test needs it).
- **Every position gets a gradient**, as through an encoder's attention: F_t = S_t + λ mean_s S_s
  (λ = ``mix``; the mean over the window's real positions, a uniform attention). The gradient at
  position s is −β [σ_s 1{s masked} + (λ / n) Σ_{t masked} σ_t] w_s with σ_t = σ(−β F_t) (at the
  model's own activations, where ∇S_s = w_s): a multiple of the position's own w_s, so the
  planted enrichment factor of S is k at every row, masked or not, as in the causal head. The
  masked rows' gradients are about (1 + λ ρ) / (λ ρ) times the others' (ρ: the masked share,
  0.15): a two-level scale mixture over rows, as a real encoder's.
- **A masked row's token gain is the mean gain**: the trajectory writer gives the mask token
  (never in the training text) ``token_gain`` 1
  (:func:`~tangentlab.validate.planted_trajectories.planted_checkpoints`), so the masked rows
  carry the planted k in S; a frequency gain (``gain_exponent``) lives on the unmasked rows, since
  the head cannot see a masked row's true token.

Shapes: ``input_ids`` (B, T) int64; ``attention_mask`` (B, T) 0/1; logits (B, T, V).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.modeling_outputs import MaskedLMOutput

from tangentlab.validate.planted.model import PlantedConfig, PlantedHead, planted_scores

__all__ = ["PlantedMaskedConfig", "PlantedForMaskedLM"]


class PlantedMaskedConfig(PlantedConfig):
    """A :class:`~tangentlab.validate.planted.model.PlantedConfig` with the masked-LM head's two.

    Args:
        sink_id: the id whose logit carries −β F (the tokenizer's mask token: never a label).
        mix: λ, the weight of the window's mean score in each position's (module docstring).
        **kwargs: :class:`~tangentlab.validate.planted.model.PlantedConfig`'s.
    """

    model_type = "planted_mlm"

    def __init__(self, sink_id: int = 3, mix: float = 1.0, **kwargs):
        self.sink_id = int(sink_id)
        self.mix = float(mix)
        super().__init__(**kwargs)
        if not 0 <= self.sink_id < self.vocab_size:
            raise ValueError(f"sink_id must be an id of the vocabulary [0, {self.vocab_size}); "
                             f"got {self.sink_id}")


class PlantedForMaskedLM(PlantedHead):
    """A planted model with the masked-LM head of the module docstring."""

    config_class = PlantedMaskedConfig

    def forward(self, input_ids, attention_mask=None, labels=None, **kwargs):
        """Logits (B, T, V); ``labels`` (B, T), -100 where unmasked, give the mean masked loss."""
        c = self.config
        S = planted_scores(self.planted, input_ids)
        real = (torch.ones_like(S) if attention_mask is None
                else attention_mask.to(S.dtype))
        mean = (S * real).sum(1, keepdim=True) / real.sum(1, keepdim=True).clamp_min(1.0)
        F = S + c.mix * mean
        logits = torch.zeros(*input_ids.shape, c.vocab_size, dtype=F.dtype, device=F.device)
        sink = math.log(c.vocab_size - 1) - c.loss_scale * F
        logits = logits.index_copy(-1, torch.tensor([c.sink_id], device=F.device),
                                   sink[..., None])
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, c.vocab_size).float(),
                                               labels.reshape(-1), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)

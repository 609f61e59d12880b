"""The training configuration: :class:`TrainConfig`, its presets and its up-front checks.

The named :data:`PRESETS`, and the checks a configuration must pass before anything is written
(:func:`check_inloop`).

:mod:`tangentlab.empirical.training.train` re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tangentlab.config import Config, option
from tangentlab.errors import ConfigError, UnknownNameError

__all__ = ["TrainConfig", "PRESETS", "NOT_TRAINING", "resolve_train_config", "check_inloop",
           "weights_hash"]


@dataclass(frozen=True)
class TrainConfig(Config):
    """Training configuration (defaults = the ``small`` preset, a decoder).

    Model: ``vocab_size`` (BPE), ``d_model``, ``n_layers``, ``n_heads``, ``d_ff`` (0 → 4·d),
    ``seq_len``, ``tie_embeddings`` (input/output embeddings shared; recorded in the manifest
    because tied models enrich at step 0), ``dropout`` (0 keeps runs bit-reproducible).
    Data: ``corpus`` (name or path), ``max_docs``, ``max_train_tokens`` (cap on the training
    stream), ``eval_fraction``, ``mlm_probability`` (encoder masking rate, 80/10/10 rule).
    Optimisation: ``optimizer`` adamw|muon (Muon on the 2-D hidden weights, AdamW on embeddings,
    head, biases and norms), ``lr`` (AdamW; Muon uses the same lr with ``match_rms_adamw``
    scaling), ``warmup_steps`` then cosine decay to ``min_lr_ratio``·lr, ``weight_decay``,
    ``grad_clip``, ``batch_size``, ``steps``.
    Trajectory: ``n_checkpoints`` log-spaced steps including 0 and ``steps``, plus
    ``late_checkpoints`` evenly spaced steps over the second half of training (a log-spaced
    schedule alone has few checkpoints where the paper says the effect weakens).
    In-loop measurement: every ``measure_every`` steps (0 = off; default 50), a rank-``measure_rank`` PCA
    proxy energy test at ``measure_site`` on one fixed eval batch, logged to ``inloop.csv``.
    ``threads``: torch intra-op threads while training (0 = torch's default). The ``tiny`` preset
    uses 1: on 2 shared cores a tiny model runs up to 10x faster single-threaded.
    ``keep_optimizer_states``: every checkpoint keeps its ``optimizer.pt`` (off: only the newest
    does, as resuming needs), so the measurement can read the energy of the optimizer's update
    at every checkpoint (:mod:`tangentlab.empirical.measurement.update_energy`); it costs about
    twice the weights' size per checkpoint. It changes no weight, so it is left out of the
    hash a resume compares (:func:`weights_hash`): a run may be resumed with it turned on or off.
    """

    arch: str = option("decoder", choices=("encoder", "decoder"))
    preset: str = "small"
    corpus: str = "wikipedia"
    max_docs: int | None = option(None, ge=1, integer=True)
    max_train_tokens: int | None = option(None, ge=1, integer=True)
    eval_fraction: float = option(0.1, gt=0, lt=1)
    vocab_size: int = option(4096, ge=16, integer=True)
    d_model: int = option(128, ge=2, integer=True)
    n_layers: int = option(4, ge=1, integer=True)
    n_heads: int = option(4, ge=1, integer=True)
    d_ff: int = option(0, ge=0, integer=True)
    seq_len: int = option(128, ge=4, integer=True)
    tie_embeddings: bool = True
    dropout: float = option(0.0, ge=0, lt=1)
    mlm_probability: float = option(0.15, gt=0, lt=1)
    optimizer: Literal["adamw", "muon"] = "adamw"
    lr: float = option(1e-3, gt=0)
    warmup_steps: int = option(30, ge=0, integer=True)
    min_lr_ratio: float = option(0.1, ge=0, le=1)
    weight_decay: float = option(0.01, ge=0)
    grad_clip: float = option(1.0, ge=0)
    batch_size: int = option(32, ge=1, integer=True)
    steps: int = option(250, ge=1, integer=True)
    n_checkpoints: int = option(12, ge=2, integer=True)
    late_checkpoints: int = option(0, ge=0, integer=True)
    measure_every: int = option(50, ge=0, integer=True)
    measure_site: str = "blocks.-1.resid_post"
    measure_rank: int = option(8, ge=1, integer=True)
    threads: int = option(0, ge=0, integer=True)
    seed: int = option(0, ge=0, integer=True)
    keep_optimizer_states: bool = False

    @classmethod
    def quick(cls) -> TrainConfig:
        """The quick variant: the ``tiny`` preset (what ``reproduce --quick`` trains)."""
        return PRESETS["tiny"]

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        return [(self.d_model % self.n_heads == 0,
                 f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")]


#: Config keys that change what a run keeps, not what it trains: left out of :func:`weights_hash`.
NOT_TRAINING = ("keep_optimizer_states",)


def weights_hash(cfg_dict: Mapping[str, Any]) -> str:
    """The config hash a resume compares: every key but :data:`NOT_TRAINING`.

    A run saved before one of those keys existed has the same hash as today's config with it.
    """
    from tangentlab.config import config_hash

    return config_hash({k: v for k, v in cfg_dict.items() if k not in NOT_TRAINING})


#: Named presets. ``tiny``: CI (a few seconds per model); ``small``: the reproduce default, long
#: enough to reach the late phase of training (1000 steps of 16 x 128 tokens, about 2.7 passes
#: over the Wikipedia sample's training split, 12 log-spaced checkpoints plus 6 in the second
#: half; one torch thread, since reproduce trains the two models side by side on two cores and a
#: second thread barely helps at this size); ``medium``: the ``small`` run at d = 256, 6 layers,
#: 4 heads, on every core (``threads = 0``: one process takes all of them, each of N ranks
#: ``cores // N``), the size of ``benchmarks/bench_distributed.py``'s DDP training;
#: ``base``: for a GPU.
PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(
        preset="tiny", max_docs=20, max_train_tokens=60_000, vocab_size=512, d_model=32,
        n_layers=2, n_heads=2, seq_len=32, batch_size=16, steps=60, warmup_steps=5, lr=3e-3,
        n_checkpoints=6, threads=1, measure_every=20, measure_rank=4,
    ),
    "small": TrainConfig(steps=1000, batch_size=16, warmup_steps=50, late_checkpoints=6,
                         threads=1),
    "medium": TrainConfig(preset="medium", d_model=256, n_layers=6, n_heads=4, steps=1000,
                          batch_size=16, warmup_steps=50, late_checkpoints=6, threads=0),
    "base": TrainConfig(
        preset="base", vocab_size=8192, d_model=256, n_layers=6, n_heads=8, seq_len=256,
        batch_size=64, steps=5000, warmup_steps=200, lr=6e-4, n_checkpoints=20,
    ),
}


def resolve_train_config(arch: str, preset: str = "small", *, corpus: str | None = None,
                         seed: int | None = None, overrides: Mapping[str, Any] | None = None,
                         config_path: str | Path | None = None) -> TrainConfig:
    """Preset → TOML file → overrides → explicit arguments, as one frozen TrainConfig."""
    from tangentlab.config import load_config

    if preset not in PRESETS:
        raise UnknownNameError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    ov = dict(overrides or {})
    ov["arch"] = arch
    if corpus is not None:
        ov["corpus"] = corpus
    if seed is not None:
        ov["seed"] = seed
    return load_config(TrainConfig, config_path, ov, base=PRESETS[preset], section="train")


def check_inloop(cfg: TrainConfig) -> None:
    """Refuse an in-loop measurement that would fail mid-training (before anything is written).

    With ``measure_every > 0``: ``measure_site`` must exist in the model ``cfg`` builds (its
    family and number of blocks; checked on a model built on the ``meta`` device, so no weights
    are allocated), and ``measure_rank`` must leave room for the matched-rank controls
    (``2 * measure_rank <= d_model``).

    Raises:
        ConfigError: the rank is too large for ``d_model``.
        UnknownNameError: the site does not exist in the model.
    """
    if cfg.measure_every <= 0:
        return
    if 2 * cfg.measure_rank > cfg.d_model:
        raise ConfigError(
            f"config key 'measure_rank' is {cfg.measure_rank}, too large for d_model "
            f"{cfg.d_model}: the in-loop test's controls need 2 * measure_rank <= d_model; use "
            f"measure_rank <= {cfg.d_model // 2}, or measure_every=0 to turn it off"
        )
    import torch

    from tangentlab._runtime import quiet_transformers
    from tangentlab.empirical.loading.models import build_model
    from tangentlab.empirical.loading.sites import normalize_site

    quiet_transformers()
    with torch.random.fork_rng(devices=[]), torch.device("meta"):  # no weights, no RNG change
        model = build_model(cfg.arch, vocab_size=cfg.vocab_size, d_model=cfg.d_model,
                            n_layers=cfg.n_layers, n_heads=cfg.n_heads, seq_len=cfg.seq_len,
                            d_ff=cfg.d_ff or None, tie_embeddings=cfg.tie_embeddings)
    try:
        normalize_site(model, cfg.measure_site)
    except UnknownNameError as exc:
        raise UnknownNameError(f"config key 'measure_site': {exc}; or measure_every=0 to turn "
                               "the in-loop measurement off") from None

"""The configuration of ``measure``: :class:`MeasureConfig`, its quick variant, its loading.

Kept apart from :mod:`~tangentlab.empirical.measurement.protocol` (which runs the protocol and re-exports
these names) so that :mod:`~tangentlab.empirical.measurement.preflight` can resolve and check the config
without importing the protocol. :func:`is_site_entry` tells a ``SITE=NAME`` entry of the
``proxy`` key from a plain proxy name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from tangentlab.config import Config, option

__all__ = ["MeasureConfig", "resolve_measure_config", "is_site_entry",
           "spread_indices"]

_SITE_HEAD = re.compile(r"[A-Za-z_][\w.\-]*")


def is_site_entry(entry: str) -> bool:
    """Whether a ``proxy`` entry is ``SITE=NAME`` (a site name before the first ``=``).

    ``basis:PATH?key=K`` also holds an ``=``, but what precedes it is no site name.
    """
    head, sep, _ = str(entry).partition("=")
    return bool(sep) and _SITE_HEAD.fullmatch(head.strip()) is not None


@dataclass(frozen=True)
class MeasureConfig(Config):
    """Configuration of ``measure`` (defaults sized for the ``small`` preset on 2 CPU cores).

    Sites and proxy: ``sites`` (comma list; negative block indices count from the end),
    ``rank`` r (needs 2r ≤ d for the controls), ``proxy`` (entries ``NAME`` — pca|seminmf|ica|
    sae|basis:PATH, for every site without its own entry, at most one — and ``SITE=NAME``, one
    site's own proxy, e.g. ``blocks.3.resid_post=basis:sae3``; a plain ``basis:`` entry may
    serve one site only, since a dictionary belongs to one site;
    :mod:`tangentlab.empirical.measurement.preflight`),
    ``fit_fraction`` (fixed-proxy window: steps ≤ fit_fraction × last step, each checkpoint
    weighted by the span of steps it stands for), ``refit`` (also refit per checkpoint),
    ``exclude_positions`` (positions left out of proxy fitting and distance statistics).
    Eval batches: ``n_batches`` × ``batch_size`` × ``seq_len`` tokens per checkpoint (``seq_len``
    0 = the training seq_len, else 128, capped by the model's positions), split by a seeded
    permutation into a fit half (activations) and a test half (gradients); the intervals resample
    the test half's batches, so keep n_batches ≥ 64 for ≥ 32 test batches.
    Statistics: ``n_controls`` (controls of the point estimate and of each bootstrap redraw),
    ``control_pool`` (the pool they are redrawn from), ``n_boot``, ``confidence``, ``interval``
    (studentized|bootstrap|bca|jackknife; studentized, the log-scale bootstrap-t, keeps
    coverage longest as per-batch ratios grow heavy tailed), ``n_buckets`` (quantile buckets of log-frequency over eval
    occurrences), ``spread_k`` (occurrences per token in the equal-size spread), ``sample_rows``
    (activation rows kept per checkpoint and site), ``forced_tol`` (a gradient direction counts
    as forced by a normalization layer when max |cos| < forced_tol).
    Causal check: ``causal`` on/off, ``causal_checkpoints`` (how many checkpoints, spread over the
    trajectory, always the first and last), ``causal_controls`` (complement controls, and as
    many variance-matched ones), ``causal_batches`` (the first test batches, at most the whole
    test half; the bootstrap units),
    ``steer_sizes`` (step sizes in units of the site's RMS activation norm).
    Learning arms (the second causal test, at the last causal checkpoint, every site;
    :mod:`tangentlab.empirical.measurement.learning_arms`): ``learning_arms`` on/off, ``learning_steps``
    (SGD steps per arm, at most 64), ``learning_step_loss`` (the unmodified arm's first-order
    training-loss decrease per step, in nats, at most 0.1: it sets the shared learning rate),
    ``learning_controls`` (rank-matched Haar complement controls, one arm each, at most 32).
    ``update_energies``: at a checkpoint that kept its AdamW state, the energy of the
    optimizer's step at each site beside the gradient's
    (:mod:`tangentlab.empirical.measurement.update_energy`).
    Other: ``early_fraction`` (early = 0 < step ≤ early_fraction × last step, weighted by step
    span), ``eval_text`` (empty: the training run's held-out documents, or its corpus, else
    wikipedia; a corpus name, a file or folder, or ``text:|json:|parquet:PATH``),
    ``eval_fraction`` (the share of ``eval_text``'s documents, chosen by a seeded hash, that
    becomes eval text; the rest is the frequency split, counted unless a frequency table is given;
    1 = all of it, which needs ``frequency_table``), ``text_column`` (the column or JSON field
    holding the documents in a .jsonl/json/parquet source), ``max_checkpoints``
    (0 = all), ``threads`` (torch intra-op threads; 0 = the training run's ``threads`` if
    recorded, else torch's default), ``dtype`` (the forward pass's precision; gradients and
    statistics are float32 or wider whatever the checkpoint stores), ``stats_dtype`` (the
    statistics' precision on the device of the activations: auto = float64 where the device has
    it, float32 with compensated sums on MPS; float64; float32-compensated, forceable anywhere;
    :mod:`tangentlab.measure.precision`), ``frequency_table`` (an
    external ``token_id,count`` table replacing the eval-text count), ``seed``.
    Theory against measurement (``bridge.csv``, :mod:`tangentlab.empirical.bridge.run`):
    ``bridge`` on/off, ``bridge_boot`` (bootstrap replicates of every input and prediction,
    20-2000), ``bridge_tokens`` (the most frequent tokens fitted for m and ‖II‖², 3-2000).
    Each key is the CLI flag of the same name (``--eval-text`` ↔ ``eval_text``); the old keys
    ``corpus`` and ``frequency_file`` still work, with a DeprecationWarning (``renamed_keys``).
    Bad values raise ConfigError naming the key, the bound and the value (``n_batches`` >= 4: a
    fit half and a test half of at least 2 batches each; the bootstrap resamples test batches).
    """

    sites: tuple[str, ...] = option(("blocks.0.resid_post", "blocks.-1.resid_post"), min_len=1,
                                    unique=True)
    rank: int = option(8, ge=1, integer=True)
    proxy: tuple[str, ...] = option(("pca",), min_len=1, unique=True)
    fit_fraction: float = option(0.3, ge=0, le=1)
    refit: bool = True
    exclude_positions: tuple[int, ...] = option((), integer=True, unique=True)
    n_controls: int = option(20, ge=1, integer=True)
    control_pool: int = option(200, ge=1, integer=True)
    n_boot: int = option(1000, ge=2, integer=True)
    confidence: float = option(0.95, gt=0, lt=1)
    interval: str = option("studentized", choices=("studentized", "bootstrap", "bca", "jackknife"))
    n_buckets: int = option(5, ge=1, integer=True)
    spread_k: int = option(4, ge=2, integer=True)
    sample_rows: int = option(4096, ge=16, integer=True)
    forced_tol: float = option(1e-3, gt=0, lt=1)
    n_batches: int = option(64, ge=4, integer=True,
                            why="a fit half and a test half of at least 2 batches each; the "
                                "bootstrap resamples test batches")
    batch_size: int = option(4, ge=1, integer=True)
    seq_len: int = option(0, ge=0, integer=True)
    causal: bool = True
    causal_checkpoints: int = option(4, ge=1, integer=True)
    causal_controls: int = option(5, ge=1, integer=True)
    causal_batches: int = option(8, ge=1, integer=True)
    steer_sizes: tuple[float, ...] = (0.25, 1.0)
    learning_arms: bool = True
    learning_steps: int = option(8, ge=1, le=64, integer=True)
    learning_step_loss: float = option(0.0005, gt=0, le=0.1)
    learning_controls: int = option(8, ge=1, le=32, integer=True)
    update_energies: bool = True
    early_fraction: float = option(0.3, ge=0, le=1)
    eval_text: str = ""
    max_docs: int | None = option(None, ge=1, integer=True)
    eval_fraction: float = option(0.1, gt=0, le=1)
    text_column: str = "text"
    max_checkpoints: int = option(0, ge=0, integer=True)
    threads: int = option(0, ge=0, integer=True)
    dtype: str = option("float32", choices=("float32", "bfloat16", "float16"))
    stats_dtype: str = option("auto", choices=("auto", "float64", "float32-compensated"))
    frequency_table: str = ""
    on_duplicate: str = option("warn", choices=("warn", "error", "skip"))  # empirical.loading.integrity
    bridge: bool = True  # bridge.csv: theory against measurement (empirical.bridge.run)
    bridge_boot: int = option(200, ge=20, le=2000, integer=True)
    bridge_tokens: int = option(200, ge=3, le=2000, integer=True)
    seed: int = option(0, ge=0, integer=True)

    #: old key → new key (each still accepted, with a DeprecationWarning; tangentlab.config)
    renamed_keys: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"corpus": "eval_text", "frequency_file": "frequency_table"})

    @classmethod
    def quick(cls) -> MeasureConfig:
        """The ``reproduce --quick`` measurement: a ``tiny`` trajectory in seconds.

        16 batches of 4 (8 of them test batches: intervals wider and less reliable than the
        default's), 200 bootstrap replicates, the causal check on 2 checkpoints and 4 batches.
        """
        return cls(n_batches=16, batch_size=4, sample_rows=1024, n_boot=200,
                   causal_checkpoints=2, causal_batches=4, bridge_boot=50, bridge_tokens=40,
                   learning_controls=4)

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields (checked with the field bounds, see tangentlab.config)."""
        plain = [p for p in self.proxy if not is_site_entry(p)]
        return [
            (self.control_pool >= self.n_controls,
             f"control_pool must be >= n_controls ({self.n_controls}), got {self.control_pool}; "
             "the bootstrap redraws controls from the pool"),
            (len(plain) <= 1,
             f"proxy lists {len(plain)} proxies for every site ({', '.join(plain)}); give one, "
             "and SITE=NAME for the sites that need their own"),
            (bool(self.text_column.strip()), "text_column must name a column, e.g. text"),
        ]


def spread_indices(n: int, k: int) -> set[int]:
    """``k`` indices of ``range(n)`` spread evenly (first and last kept); all when n <= k."""
    import numpy as np

    if n <= k:
        return set(range(n))
    return {int(round(x)) for x in np.linspace(0, n - 1, k)}




def resolve_measure_config(overrides=None, config_path=None, seed=None) -> MeasureConfig:
    """The measure config: defaults, then the TOML file's ``[measure]`` table, then ``overrides``."""
    from tangentlab.config import load_config

    ov = dict(overrides or {})
    if seed is not None:
        ov.setdefault("seed", seed)
    return load_config(MeasureConfig, config_path, ov, section="measure")

"""Typed records of ``measure``: row plans, site statistics and row bases.

The eval batches they index are :class:`~tangentlab.empirical.loading.data.EvalBatch`.

Frozen dataclasses in place of the tuples and dicts the protocol used to pass around. Arrays
inside a record are numpy (or torch for the batch tensors); "frozen" means the fields cannot be
reassigned, not that the arrays are read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: importing this module loads neither numpy nor torch
    import numpy as np
    import torch

    from tangentlab.measure import MomentAccumulator

__all__ = ["RowPlan", "SiteStats", "RowBase"]


@dataclass(frozen=True)
class RowPlan:
    """Which positions of one eval batch are rows, and what each row is.

    Attributes:
        rows: (B, T) bool tensor, positions that are rows (decoder: not the last position).
        tok: (n,) int token id of each row (the true token).
        kept: (n,) bool, rows kept for fitting and distances (``exclude_positions`` removed).
        bucket: (n,) int frequency bucket of each row (0 = rarest).
        sample: (n_kept,) bool, which kept rows belong to the fixed activation sample.
        window: (n,) int global id of the context window (sequence) of each row.
        geometry: (n,) bool, rows that may enter per-token geometry: fit half, kept, and for an
            encoder not an MLM-selected (masked, replaced or kept-as-is) position.
        geo_pick: (n,) bool, the geometry occurrences: at most one per (document, token) and
            per (window, token) among the geometry rows, chosen at random with the measure seed.
        doc: (n,) int document of each row (its window id where the batch has no doc ids).
        position: (n,) int eval-stream position of each row (-1 where unknown).
    """

    rows: torch.Tensor
    tok: np.ndarray
    kept: np.ndarray
    bucket: np.ndarray
    sample: np.ndarray
    window: np.ndarray | None = None
    geometry: np.ndarray | None = None
    geo_pick: np.ndarray | None = None
    doc: np.ndarray | None = None
    position: np.ndarray | None = None


@dataclass(frozen=True)
class SiteStats:
    """Statistics of one site at one checkpoint (float64; memory does not grow with d² × batches).

    From the **fit half** (forward passes only):
        act: ``MomentAccumulator`` of activation rows.
        sample: (n_s, d) activation rows of the fixed sample; ``sample_tokens`` (n_s,) their ids.
        tok_sum: (U, d) per-token Σh; ``tok_sq`` (U,) Σ‖h‖²; ``tok_n`` (U,) count, over the
            geometry rows (kept, not MLM-selected; U = distinct eval tokens ``uniq``).
        geo_rows: (n_g, d) activations of the geometry occurrences (at most one per document
            and token, and per window and token, chosen at random); ``geo_tokens`` (n_g,) their
            token ids; ``geo_docs`` (n_g,) their documents (None: unknown).
    From the **test half** (forward + backward):
        grad: ``MomentAccumulator`` of gradient rows, grouped by bucket label (the oracle and the
            ΔIsoScore* covariance).
        energies: {(proxy, bucket): ``BatchEnergies``}: per test batch, the projected energy of
            the proxy and of its control pool, and the trace.
        forced: the max and mean |cos| between gradient rows and the directions a normalization
            layer may force them away from (``tangentlab.measure.forced_direction_cosines``).
        constrained: {(proxy, "all"): ``BatchEnergies``} of the energy test inside the
            complement of 𝟙 (rows G U).
        test_acts: (n_t, d) a seeded sample of the test half's activation rows (per-row
            reachable baselines).
        test_act_weights: (n_t,) the squared gradient norms of those rows (the baselines'
            weights), or None.
    loss_sum, n_targets: the clean summed loss over all eval batches, and its number of targets.
    """

    act: MomentAccumulator
    sample: np.ndarray
    sample_tokens: np.ndarray
    tok_sum: np.ndarray
    tok_sq: np.ndarray
    tok_n: np.ndarray
    geo_rows: np.ndarray
    geo_tokens: np.ndarray
    grad: MomentAccumulator | None = None
    energies: dict = field(default_factory=dict)
    forced: dict = field(default_factory=dict)
    constrained: dict = field(default_factory=dict)
    test_acts: np.ndarray | None = None
    test_act_weights: np.ndarray | None = None
    loss_sum: float = 0.0
    n_targets: int = 0
    geo_docs: np.ndarray | None = None

    def fit_nbytes(self) -> int:
        """Bytes held by the fit-half fields (arrays, and the d×d float64 activation moment)."""
        arrays = (self.sample, self.sample_tokens, self.tok_sum, self.tok_sq, self.tok_n,
                  self.geo_rows, self.geo_tokens, self.geo_docs)
        return sum(int(getattr(a, "nbytes", 0)) for a in arrays) + 8 * self.act.dim ** 2


@dataclass(frozen=True)
class RowBase:
    """The identifying columns shared by every row of one (checkpoint, site).

    ``row(metric, value, **extra)`` builds one tidy results row (a dict, as
    :func:`tangentlab.runs.write_results` takes) with ``value`` as a float (None → NaN).
    """

    experiment: str = "empirical/measure"
    model: str | None = None
    arch: str | None = None
    checkpoint: str | None = None
    step: int | None = None
    layer: int | None = None
    site: str | None = None
    seed: int | None = None
    method: str | None = None
    proxy: str | None = None

    def with_(self, **changes: Any) -> RowBase:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The identifying columns; ``proxy`` only when set (as the old rows had it)."""
        d = {"experiment": self.experiment, "model": self.model, "arch": self.arch,
             "checkpoint": self.checkpoint, "step": self.step, "layer": self.layer,
             "site": self.site, "seed": self.seed, "method": self.method}
        if self.proxy is not None:
            d["proxy"] = self.proxy
        return d

    def row(self, metric: str, value: Any, **extra: Any) -> dict[str, Any]:
        """One results row: these columns, then ``metric``, ``value`` and ``extra`` columns."""
        r = self.as_dict()
        r["metric"] = metric
        r["value"] = float(value) if value is not None else float("nan")
        r.update(extra)
        return r

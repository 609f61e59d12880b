"""The paper's tangent-proxy protocol over a trajectory of checkpoints (``measure``).

For every checkpoint (ordered by step) and every site:

1. **Capture** (one forward + one backward of the model's own summed loss per fixed eval batch):
   gradient rows g_i = ∂L/∂h_i and activation rows h_i of the real tokens (decoder: positions
   with a target). Streams into ``MomentAccumulator`` s (overall and per frequency bucket), per-batch
   outer-product sums (for the bootstrap over batches), per-token sums (centroids), the first
   ``spread_k`` occurrences of each token (equal-size spread), and a seeded fixed-size sample of
   activation rows (the same rows at every checkpoint). Memory does not grow with the tokens.
2. **Tangent proxy** Q_T (d×r): ``fixed`` = fitted once on the activation samples pooled from the
   checkpoints with step ≤ ``fit_fraction`` × last step (by *step*, not by checkpoint count);
   ``refit`` = fitted on this checkpoint's own sample. Excluded positions are left out of fitting.
3. **Energy test** (``tangentlab.measure.control_test``): energy of Q_T in C = GᵀG/N against
   ``n_controls`` matched-rank normal controls, overall and per bucket, bootstrap over batches.
4. **Anisotropy share**: IsoScore* of the gradient covariance before and after projecting out
   Q_T (in the (d−r)-dim complement coordinates), against each control.
5. **Representation anisotropy**: IsoScore*, mean cosine, effective rank of the activations.
6. **Frequency and geometry**: per token, log-frequency against the spread of its occurrences.
7. **Causal check** (on ``causal_checkpoints`` of the checkpoints): loss increase after mean-
   ablating span(Q_T) vs each control; loss after steering along Q_T's first direction vs the
   controls' first directions.
8. **Early / late** aggregates, and each token's centroid trajectory variance against frequency.

docs/empirical.md states every metric and formula.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import (
    CheckpointError,
    ConfigError,
    InsufficientSamplesError,
    RankError,
)

__all__ = [
    "MeasureConfig",
    "QUICK_MEASURE",
    "AGGREGATED_METRICS",
    "measure_trajectory",
    "resolve_measure_config",
    "SiteStats",
    "collect_site_stats",
    "energy_rows",
    "isotropy_share_rows",
    "representation_rows",
    "frequency_rows",
]


@dataclass(frozen=True)
class MeasureConfig:
    """Configuration of ``measure`` (defaults sized for the ``small`` preset on 2 CPU cores).

    Sites and proxy: ``sites`` (comma list; negative block indices count from the end),
    ``rank`` r (needs 2r ≤ d for the controls), ``proxy`` (pca|seminmf|ica|sae),
    ``fit_fraction`` (fixed-proxy window by step), ``refit`` (also refit per checkpoint),
    ``exclude_positions`` (positions left out of proxy fitting and distance statistics).
    Statistics: ``n_controls``, ``n_boot``, ``confidence``, ``n_buckets`` (quantile buckets of
    log-frequency over eval occurrences), ``spread_k`` (equal-size subsample for the spread),
    ``sample_rows`` (activation rows kept per checkpoint and site).
    Token budget: ``n_batches`` × ``batch_size`` × ``seq_len`` tokens per checkpoint
    (``seq_len`` 0 = the training seq_len, else 128, capped by the model's positions).
    Causal check: ``causal`` on/off, ``causal_checkpoints`` (how many checkpoints, spread over the
    trajectory, always the first and last), ``causal_controls``, ``causal_batches``,
    ``steer_sizes`` (step sizes in units of the site's RMS activation norm).
    Other: ``early_fraction`` (early = 0 < step ≤ early_fraction × last step), ``corpus`` (empty:
    the training run's corpus, else wikipedia), ``max_checkpoints`` (0 = all), ``threads`` (torch
    intra-op threads; 0 = the training run's ``threads`` if recorded, else torch's default),
    ``seed``.
    """

    sites: tuple[str, ...] = ("blocks.0.resid_post", "blocks.-1.resid_post")
    rank: int = 8
    proxy: str = "pca"
    fit_fraction: float = 0.3
    refit: bool = True
    exclude_positions: tuple[int, ...] = ()
    n_controls: int = 20
    n_boot: int = 200
    confidence: float = 0.95
    n_buckets: int = 5
    spread_k: int = 4
    sample_rows: int = 4096
    n_batches: int = 8
    batch_size: int = 16
    seq_len: int = 0
    causal: bool = True
    causal_checkpoints: int = 4
    causal_controls: int = 5
    causal_batches: int = 2
    steer_sizes: tuple[float, ...] = (0.25, 1.0)
    early_fraction: float = 0.3
    corpus: str = ""
    max_docs: int | None = None
    eval_fraction: float = 0.1
    max_checkpoints: int = 0
    threads: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.rank < 1:
            problems.append("rank must be >= 1")
        if not 0.0 <= self.fit_fraction <= 1.0:
            problems.append("fit_fraction must be in [0, 1]")
        if self.n_controls < 1 or self.n_boot < 2:
            problems.append("n_controls must be >= 1 and n_boot >= 2")
        if self.n_batches < 2:
            problems.append("n_batches must be >= 2 (the bootstrap resamples batches)")
        if self.batch_size < 1 or self.seq_len < 0 or self.sample_rows < 16:
            problems.append("batch_size >= 1, seq_len >= 0, sample_rows >= 16")
        if self.spread_k < 2 or self.n_buckets < 1:
            problems.append("spread_k must be >= 2 and n_buckets >= 1")
        if self.causal_controls < 1 or self.causal_batches < 1 or self.causal_checkpoints < 1:
            problems.append("causal_controls, causal_batches and causal_checkpoints must be >= 1")
        if not self.sites:
            problems.append("sites must name at least one site")
        if problems:
            raise ConfigError("invalid measure config: " + "; ".join(problems))


#: Overrides for the ``reproduce --quick`` path: a measure of a ``tiny`` trajectory in seconds.
QUICK_MEASURE: dict[str, Any] = {
    "n_batches": 4, "batch_size": 8, "sample_rows": 1024, "n_boot": 100,
    "causal_checkpoints": 2, "causal_batches": 1,
}


#: Metrics averaged into the ``early`` / ``late`` rows (fixed proxy, every bucket).
AGGREGATED_METRICS = (
    "energy_tangent", "energy_control_mean", "enrichment", "p_value", "position",
    "delta_isoscore_tangent", "delta_isoscore_control_mean", "freq_distance_pearson",
    "freq_distance_spearman", "ablation_loss_tangent", "ablation_loss_control_mean",
    "representation_isoscore_star", "representation_mean_cosine",
)


# --------------------------------------------------------------------------------------------
# Capture and streaming statistics
# --------------------------------------------------------------------------------------------


@dataclass
class SiteStats:
    """Streaming statistics of one site at one checkpoint (all float64, bounded memory).

    ``grad`` / ``act``: MomentAccumulator of gradient / activation rows (grad grouped by bucket);
    ``batch_sums``: (B, d, d) per-batch Σ g gᵀ; ``bucket_batch_sums``: {label: (B, d, d)};
    ``sample``: (n_s, d) activation rows (fixed row selection), ``sample_tokens`` their ids;
    ``tok_sum`` (U, d), ``tok_sq`` (U,), ``tok_n`` (U,): per-token Σh, Σ‖h‖², count over
    non-excluded rows (U = distinct eval tokens, ``uniq`` their ids); ``tok_first`` (U, k, d) the
    first k occurrences; ``loss_sum`` / ``n_targets`` the clean loss.
    """

    grad: Any
    act: Any
    batch_sums: Any
    bucket_batch_sums: dict
    sample: Any
    sample_tokens: Any
    tok_sum: Any
    tok_sq: Any
    tok_n: Any
    tok_first: Any
    loss_sum: float = 0.0
    n_targets: int = 0


def _row_plan(eval_data, arch: str, cfg: MeasureConfig):
    """Per batch: row mask (B, T), token ids of rows, bucket index of rows, 'kept' mask for
    fitting/distances (excluded positions removed), and the fixed sample selection."""
    import numpy as np
    import torch

    plans = []
    for inp, _lab, _masked, orig in eval_data.batches:
        rows = torch.ones_like(inp, dtype=torch.bool)
        if arch == "decoder":
            rows[:, -1] = False
        T = inp.shape[1]
        pos = torch.arange(T)[None, :].expand_as(inp)
        keep = torch.ones_like(rows)
        for p in cfg.exclude_positions:
            keep &= pos != (p % T)
        tok = orig[rows].numpy()
        kept = keep[rows].numpy()
        bucket = np.searchsorted(eval_data.edges, np.log1p(eval_data.counts[tok]), side="right")
        plans.append({"rows": rows, "tok": tok, "kept": kept, "bucket": bucket})
    total_kept = sum(int(p["kept"].sum()) for p in plans)
    rng = np.random.default_rng([cfg.seed, 7])
    n_s = min(cfg.sample_rows, total_kept)
    chosen = np.zeros(total_kept, dtype=bool)
    chosen[rng.choice(total_kept, size=n_s, replace=False)] = True
    offset = 0
    for p in plans:
        k = int(p["kept"].sum())
        p["sample"] = chosen[offset:offset + k]
        offset += k
    uniq = np.unique(np.concatenate([p["tok"][p["kept"]] for p in plans]))
    return plans, uniq


def collect_site_stats(loaded, sites, eval_data, plans, uniq, cfg: MeasureConfig, *,
                       with_grads: bool = True) -> dict[str, SiteStats]:
    """Run the capture over the fixed eval batches; returns {site: SiteStats}."""
    import numpy as np
    import torch

    from tangentlab.empirical.capture import capture_batch
    from tangentlab.measure import MomentAccumulator

    stats: dict[str, SiteStats] = {}
    labels = eval_data.labels
    U = len(uniq)
    k = cfg.spread_k
    for b, (batch, plan) in enumerate(zip(eval_data.batches, plans, strict=True)):
        inp, lab, masked, _orig = batch
        cap = capture_batch(loaded, sites, inp, lab, masked=masked, grads=with_grads)
        rows = plan["rows"].to(cap.rows.device)
        if not torch.equal(rows & cap.rows, rows):
            rows = rows & cap.rows
        tok_idx = np.searchsorted(uniq, plan["tok"])
        kept = plan["kept"]
        blabels = np.asarray(labels, dtype=object)[plan["bucket"]]
        for site in cap.acts:
            H = cap.acts[site][rows].to(torch.float64).cpu()
            d = H.shape[1]
            if site not in stats:
                stats[site] = SiteStats(
                    grad=MomentAccumulator(d, groups=labels), act=MomentAccumulator(d),
                    batch_sums=np.zeros((len(plans), d, d)),
                    bucket_batch_sums={lb: np.zeros((len(plans), d, d)) for lb in labels},
                    sample=[], sample_tokens=[], tok_sum=np.zeros((U, d)), tok_sq=np.zeros(U),
                    tok_n=np.zeros(U, dtype=np.int64), tok_first=np.zeros((U, k, d)),
                )
            st = stats[site]
            st.act.update(H)
            if site in cap.grads:
                G = cap.grads[site][rows].to(torch.float64).cpu()
                st.grad.update(G, groups=blabels)
                st.batch_sums[b] = (G.T @ G).numpy()
                for j, lb in enumerate(labels):
                    sel = torch.from_numpy(np.flatnonzero(plan["bucket"] == j))
                    if sel.numel():
                        Gj = G.index_select(0, sel)
                        st.bucket_batch_sums[lb][b] = (Gj.T @ Gj).numpy()
            Hk = H.numpy()[kept]
            tk = tok_idx[kept]
            st.sample.append(Hk[plan["sample"]])
            st.sample_tokens.append(plan["tok"][kept][plan["sample"]])
            np.add.at(st.tok_sum, tk, Hk)
            np.add.at(st.tok_sq, tk, np.einsum("nd,nd->n", Hk, Hk))
            # first k occurrences of each token: occurrence index = earlier count + rank in batch
            order = np.argsort(tk, kind="stable")
            sorted_t = tk[order]
            start = np.r_[0, np.flatnonzero(np.diff(sorted_t)) + 1]
            rank = np.arange(len(tk)) - np.repeat(start, np.diff(np.r_[start, len(tk)]))
            occ = np.empty(len(tk), dtype=np.int64)
            occ[order] = rank
            occ += st.tok_n[tk]
            sel = occ < k
            st.tok_first[tk[sel], occ[sel]] = Hk[sel]
            st.tok_n += np.bincount(tk, minlength=U)
        for st in stats.values():
            if not math.isnan(cap.loss_sum):
                st.loss_sum += cap.loss_sum
                st.n_targets += cap.n_targets
    for st in stats.values():
        st.sample = np.concatenate(st.sample)
        st.sample_tokens = np.concatenate(st.sample_tokens)
    return stats


# --------------------------------------------------------------------------------------------
# Metrics of one checkpoint and site
# --------------------------------------------------------------------------------------------


def _row(base: Mapping[str, Any], metric: str, value: Any, **extra: Any) -> dict[str, Any]:
    r = dict(base)
    r["metric"] = metric
    r["value"] = float(value) if value is not None else float("nan")
    r.update(extra)
    return r


def energy_rows(Q, st: SiteStats, cfg: MeasureConfig, base: Mapping[str, Any]) -> list[dict]:
    """Energy-test rows (overall and per bucket) for basis ``Q`` (d, r) on ``st``'s gradients."""
    import numpy as np

    from tangentlab.measure import control_test

    out = []
    groups = [("all", None, st.batch_sums)] + [
        (lb, lb, st.bucket_batch_sums[lb]) for lb in st.grad.group_labels
        if st.grad.group_count(lb) >= 2
    ]
    for label, group, batches in groups:
        C = st.grad.second_moment(group)
        if np.trace(C) <= 0:
            continue
        n = st.grad.count if group is None else st.grad.group_count(group)
        nonzero = int(np.sum(np.einsum("bii->b", batches) > 0))
        res = control_test(Q, C, cfg.n_controls, cfg.seed,
                           batches=batches if nonzero >= 2 else None,
                           n_boot=cfg.n_boot, confidence=cfg.confidence)
        b = dict(base, bucket=label, n=n)
        rel = res.controls / res.control_mean if res.control_mean > 0 else res.controls * np.nan
        out += [
            _row(b, "energy_tangent", res.energy, ci_low=res.energy_ci_low, ci_high=res.energy_ci_high),
            _row(b, "energy_control_mean", res.control_mean,
                 ci_low=float(np.min(res.controls)), ci_high=float(np.max(res.controls))),
            _row(b, "enrichment", res.enrichment, ci_low=res.enrichment_ci_low,
                 ci_high=res.enrichment_ci_high),
            _row(b, "enrichment_ci_low", res.enrichment_ci_low),
            _row(b, "enrichment_ci_high", res.enrichment_ci_high),
            _row(b, "control_enrichment_low", float(np.min(rel))),
            _row(b, "control_enrichment_high", float(np.max(rel))),
            _row(b, "p_value", res.p_value),
            _row(b, "baseline", res.baseline),
            _row(b, "oracle", res.oracle),
            _row(b, "position", res.position),
        ]
    return out


def isotropy_share_rows(Q, st: SiteStats, cfg: MeasureConfig, base: Mapping[str, Any]) -> list[dict]:
    """IsoScore* of the gradient covariance, and its change after projecting out Q vs controls."""
    import numpy as np

    from tangentlab.measure import complement_basis, isoscore_star, normal_controls

    cov = st.grad.covariance()
    before = isoscore_star(cov=cov)

    def after(basis) -> float:
        B = complement_basis(basis)
        return isoscore_star(cov=B.T @ cov @ B)

    d_t = after(Q) - before
    d_n = np.array([after(c) - before for c in normal_controls(Q, cfg.n_controls, cfg.seed)])
    lo, hi = np.quantile(d_n, [0.025, 0.975])
    b = dict(base, bucket="all", n=st.grad.count)
    return [
        _row(b, "grad_isoscore_star", before),
        _row(b, "delta_isoscore_tangent", d_t),
        _row(b, "delta_isoscore_control_mean", float(d_n.mean()), ci_low=float(lo), ci_high=float(hi)),
        _row(b, "delta_isoscore_p_value", (1 + int(np.sum(d_n >= d_t))) / (1 + len(d_n))),
    ]


def representation_rows(st: SiteStats, cfg: MeasureConfig, base: Mapping[str, Any]) -> list[dict]:
    """IsoScore*, mean cosine (on the row sample) and effective rank (σ variant, centred)."""
    import numpy as np

    from tangentlab.measure import effective_rank, isoscore_star, mean_cosine

    cov = st.act.covariance()
    b = dict(base, bucket="all", n=st.act.count)
    sample = st.sample[np.linalg.norm(st.sample, axis=1) > 0]
    return [
        _row(b, "representation_isoscore_star", isoscore_star(cov=cov)),
        _row(b, "representation_mean_cosine",
             mean_cosine(sample, seed=cfg.seed) if len(sample) >= 2 else float("nan"),
             n=len(sample)),
        _row(b, "representation_effective_rank", effective_rank(cov=cov, variant="sigma"),
             variant="sigma,centred"),
        _row(b, "representation_rms_norm", math.sqrt(float(np.trace(st.act.second_moment())))),
    ]


def _corr_with_ci(x, y, cfg: MeasureConfig):
    """Pearson r, Spearman ρ and their bootstrap (over tokens) percentile intervals."""
    import numpy as np
    from scipy import stats as sps

    from tangentlab.measure import bootstrap_ci

    n = len(x)
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        nan = float("nan")
        return {"pearson": (nan, nan, nan), "spearman": (nan, nan, nan)}
    rng = np.random.default_rng([cfg.seed, 11])
    idx = rng.integers(0, n, size=(cfg.n_boot, n))
    X, Y = x[idx], y[idx]

    def rowcorr(A, B):
        A = A - A.mean(axis=1, keepdims=True)
        B = B - B.mean(axis=1, keepdims=True)
        den = np.sqrt((A * A).sum(axis=1) * (B * B).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, (A * B).sum(axis=1) / den, np.nan)

    reps = {"pearson": rowcorr(X, Y),
            "spearman": rowcorr(sps.rankdata(X, axis=1), sps.rankdata(Y, axis=1))}
    point = {"pearson": float(np.corrcoef(x, y)[0, 1]),
             "spearman": float(sps.spearmanr(x, y).statistic)}
    out = {}
    for name in ("pearson", "spearman"):
        try:
            lo, hi = bootstrap_ci(reps[name], cfg.confidence)
        except InsufficientSamplesError:
            lo = hi = float("nan")
        out[name] = (point[name], lo, hi)
    return out


def frequency_rows(st: SiteStats, counts, uniq, cfg: MeasureConfig, base: Mapping[str, Any]):
    """Log-frequency vs spread correlations; returns (rows, per-token scatter data)."""
    import numpy as np

    k = cfg.spread_k
    logf = np.log1p(counts[uniq]).astype(np.float64)
    n = st.tok_n
    # equal-size subsample: mean distance of the first k occurrences to their own centroid
    ok = n >= k
    first = st.tok_first[ok]
    cen = first.mean(axis=1, keepdims=True)
    spread_k = np.linalg.norm(first - cen, axis=2).mean(axis=1)
    # raw (biased) RMS distance over all occurrences, and the unbiased variance estimate
    ok2 = n >= 2
    mean = st.tok_sum[ok2] / n[ok2, None]
    ss = np.maximum(st.tok_sq[ok2] - n[ok2] * np.einsum("ud,ud->u", mean, mean), 0.0)
    raw = np.sqrt(ss / n[ok2])
    unbiased = ss / (n[ok2] - 1)
    rows = []
    b = dict(base, bucket="all")
    for tag, x, y in (("", logf[ok], spread_k), ("_raw", logf[ok2], raw),
                      ("_unbiased", logf[ok2], unbiased)):
        c = _corr_with_ci(x, y, cfg)
        for name in ("pearson", "spearman"):
            v, lo, hi = c[name]
            rows.append(_row(b, f"freq_distance{tag}_{name}", v, ci_low=lo, ci_high=hi, n=len(x)))
    return rows, {"logf": logf[ok], "spread": spread_k}


def _causal_rows(lm, site: str, Q, st: SiteStats, eval_data, cfg: MeasureConfig,
                 base: Mapping[str, Any]) -> list[dict]:
    """Mean-ablation and steering along span(Q) vs matched controls: change in loss per token.

    Variants (all in one stacked pass per batch): clean; mean-ablate span(Q); mean-ablate each of
    the first ``causal_controls`` controls; for each step size α: shift by α·rms·q₁ (Q's first
    column) and by α·rms·c₁ (each control's first column), rms = RMS activation norm at the site.
    """
    import numpy as np

    from tangentlab.empirical.capture import edited_losses
    from tangentlab.measure import normal_controls

    d, r = Q.shape
    rms = math.sqrt(float(np.trace(st.act.second_moment())))
    ctrls = normal_controls(Q, cfg.n_controls, cfg.seed)[: cfg.causal_controls]
    subspaces = [Q] + list(ctrls)  # tangent first
    bases, shifts = [np.zeros((d, r))], [np.zeros(d)]
    bases += subspaces
    shifts += [np.zeros(d)] * len(subspaces)
    for alpha in cfg.steer_sizes:
        for S in subspaces:
            bases.append(np.zeros((d, r)))
            shifts.append(alpha * rms * S[:, 0])
    tot = np.zeros(len(bases))
    cnt = np.zeros(len(bases))
    for inp, lab, _masked, _ in eval_data.batches[: cfg.causal_batches]:
        lsum, n = edited_losses(lm, site, inp, lab, bases=np.stack(bases), shifts=np.stack(shifts),
                                mu=st.act.mean())
        tot += lsum
        cnt += n
    loss = tot / np.maximum(cnt, 1)
    clean = loss[0]
    m = len(subspaces)
    abl = loss[1:1 + m] - clean
    b = dict(base, bucket="all", n=int(cnt[0]))
    rows = [
        _row(b, "causal_loss_clean", clean),
        _row(b, "ablation_loss_tangent", abl[0]),
        _row(b, "ablation_loss_control_mean", float(abl[1:].mean()), ci_low=float(abl[1:].min()),
             ci_high=float(abl[1:].max())),
    ]
    for j, alpha in enumerate(cfg.steer_sizes):
        st_ = loss[1 + m * (j + 1): 1 + m * (j + 2)] - clean
        rows += [
            _row(b, "steer_loss_tangent", st_[0], step_size=float(alpha)),
            _row(b, "steer_loss_control_mean", float(st_[1:].mean()), ci_low=float(st_[1:].min()),
                 ci_high=float(st_[1:].max()), step_size=float(alpha)),
        ]
    return rows


# --------------------------------------------------------------------------------------------
# The whole trajectory
# --------------------------------------------------------------------------------------------


def _layer_of(site: str):
    m = re.match(r"blocks\.(\d+)\.", site)
    return int(m.group(1)) if m else None


def _spread_indices(n: int, k: int) -> set[int]:
    import numpy as np

    if n <= k:
        return set(range(n))
    return {int(round(x)) for x in np.linspace(0, n - 1, k)}


def _eval_inputs(traj, tokenizer, cfg: MeasureConfig, vocab: int):
    """(eval texts, train-split counts, frequency source) for the trajectory."""
    from tangentlab.empirical.corpus import (
        frequency_table,
        load_frequency_table,
        load_texts,
        split_texts,
    )
    from tangentlab.empirical.tokenizer import encode_stream

    tc = traj.train_config
    corpus = cfg.corpus or tc.get("corpus") or "wikipedia"
    if traj.eval_file is not None and not cfg.corpus:
        # the training run's own held-out documents: no corpus parsing needed
        eval_texts = load_texts(traj.eval_file)
        split = None
    else:
        split = split_texts(load_texts(corpus, max_docs=cfg.max_docs), cfg.eval_fraction,
                            seed=cfg.seed)
        eval_texts = list(split.eval)
    counts = None
    source = ""
    if traj.frequency_file is not None and not cfg.corpus:
        counts = load_frequency_table(traj.frequency_file)
        source = "run frequency.csv (training split)"
        if len(counts) < vocab:
            counts = None
    if counts is None:
        if split is None:
            split = split_texts(load_texts(corpus, max_docs=cfg.max_docs), cfg.eval_fraction,
                                seed=cfg.seed)
        stream = encode_stream(tokenizer, list(split.train), max_tokens=2_000_000)
        counts = frequency_table(stream, max(vocab, int(stream.max()) + 1))
        source = f"recomputed on the {corpus!r} training split ({stream.size} tokens)"
    return eval_texts, counts, source, corpus


def _aggregate(rows: list[dict], cfg: MeasureConfig, max_step: int) -> list[dict]:
    import numpy as np

    cut = cfg.early_fraction * max_step
    groups: dict[tuple, dict[str, list]] = {}
    keep = {}
    for r in rows:
        if r["metric"] not in AGGREGATED_METRICS or r.get("proxy") not in (None, "fixed"):
            continue
        if not isinstance(r.get("step"), int) or r["step"] == 0:
            continue
        phase = "early" if r["step"] <= cut else "late"
        key = (r["site"], r["bucket"], r["metric"], r.get("step_size"))
        groups.setdefault(key, {"early": [], "late": []})[phase].append(r["value"])
        keep[key] = r
    out = []
    for key, phases in groups.items():
        for phase, vals in phases.items():
            v = np.asarray([x for x in vals if x == x], dtype=float)
            if not v.size:
                continue
            base = {k: keep[key].get(k) for k in ("experiment", "model", "arch", "layer", "site",
                                                   "bucket", "method", "proxy", "seed")}
            out.append(_row(dict(base, checkpoint=phase, step=None), key[2], float(v.mean()),
                            ci_low=float(v.min()), ci_high=float(v.max()), n=int(v.size)))
    return out


def resolve_measure_config(overrides=None, config_path=None, seed=None) -> MeasureConfig:
    from tangentlab.config import load_config

    ov = dict(overrides or {})
    if seed is not None:
        ov.setdefault("seed", seed)
    return load_config(MeasureConfig, config_path, ov, section="measure")


def measure_trajectory(
    trajectory: str | Path,
    out_dir: str | Path,
    *,
    device: str = "auto",
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    config_path: str | Path | None = None,
    gguf: bool = False,
) -> Path:
    """Run the protocol over ``trajectory`` and write ``results.csv``, ``manifest.json`` and
    figures to ``out_dir`` (built atomically: a failure leaves no partial output).

    Returns the run directory. See the module docstring and docs/empirical.md.
    """
    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from tangentlab._runtime import torch_threads
    from tangentlab.empirical.data import make_eval_data
    from tangentlab.empirical.figures import enrichment_figure, frequency_figure
    from tangentlab.empirical.models import load_like, load_model, resolve_device
    from tangentlab.empirical.sites import normalize_site, site_semantics
    from tangentlab.empirical.tokenizer import load_tokenizer
    from tangentlab.empirical.trajectory import resolve_trajectory
    from tangentlab.measure import make_proxy, subspace_drift
    from tangentlab.progress import progress
    from tangentlab.runs import (
        RESULTS_NAME,
        Timer,
        atomic_directory,
        build_manifest,
        write_manifest,
        write_results,
    )

    cfg = resolve_measure_config(overrides, config_path, seed)
    traj = resolve_trajectory(trajectory, gguf=gguf)
    dev = resolve_device(device)
    cks = traj.checkpoints
    if cfg.max_checkpoints and len(cks) > cfg.max_checkpoints:
        cks = [cks[i] for i in sorted(_spread_indices(len(cks), cfg.max_checkpoints))]
    timer = Timer()
    torch.manual_seed(cfg.seed)
    threads = cfg.threads or int(traj.train_config.get("threads", 0) or 0)

    with threadpool_limits(limits=1, user_api="blas"), torch_threads(threads), \
            atomic_directory(out_dir) as tmp:
        with timer("load"):
            first = load_model(cks[0].path, device=dev, gguf_file=cks[0].gguf_file)
            if cks[0].gguf_file:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(str(cks[0].path), gguf_file=cks[0].gguf_file)
            else:
                tokenizer = load_tokenizer(traj.tokenizer_dir)
        sites = [normalize_site(first.model, s) for s in cfg.sites]
        if len(set(sites)) != len(sites):
            raise ConfigError(f"sites {cfg.sites} name the same site twice")
        d = int(first.model.config.hidden_size)
        if 2 * cfg.rank > d:
            raise RankError(
                f"rank {cfg.rank} is too large for hidden size d={d}: the matched-rank controls "
                f"need 2r <= d, so use rank <= {d // 2}"
            )
        arch = first.arch
        with timer("data"):
            texts, counts, freq_source, corpus = _eval_inputs(traj, tokenizer, cfg, len(tokenizer))
            max_pos = getattr(first.model.config, "max_position_embeddings",
                              getattr(first.model.config, "n_positions", 512))
            seq_len = min(cfg.seq_len or int(traj.train_config.get("seq_len", 128)), int(max_pos))
            eval_data = make_eval_data(
                tokenizer, arch, texts=texts, counts=counts, frequency_source=freq_source,
                n_batches=cfg.n_batches, batch_size=cfg.batch_size, seq_len=seq_len,
                seed=cfg.seed, n_buckets=cfg.n_buckets,
            )
            plans, uniq = _row_plan(eval_data, arch, cfg)
        max_step = max(c.step for c in cks)
        window = [c for c in cks if c.step <= cfg.fit_fraction * max_step] or [cks[0]]
        causal_idx = _spread_indices(len(cks), cfg.causal_checkpoints) if cfg.causal else set()

        rows: list[dict] = []
        Q_fixed: dict[str, Any] = {}
        pending: list = []
        prev_refit: dict[str, Any] = {}
        centroids: dict[str, list] = {s: [] for s in sites}
        scatter: dict[str, dict] = {}
        ck_info = []

        def proxy_fit(X):
            return make_proxy(cfg.proxy, n_components=cfg.rank, random_state=cfg.seed).fit(X).basis()

        def finalize(ck, stats, lm) -> None:
            for site in sites:
                st = stats[site]
                base = {"experiment": "empirical/measure", "model": traj.model_name, "arch": arch,
                        "checkpoint": ck.name, "step": ck.step, "layer": _layer_of(site),
                        "site": site, "seed": cfg.seed, "method": cfg.proxy}
                with timer("metrics"):
                    if st.n_targets:
                        rows.append(_row(dict(base, bucket="all", n=st.n_targets), "loss_clean",
                                         st.loss_sum / st.n_targets))
                    rows.extend(representation_rows(st, cfg, base))
                    frows, sc = frequency_rows(st, eval_data.counts, uniq, cfg, base)
                    rows.extend(frows)
                    scatter.setdefault(site, {})[ck.step] = sc
                    cnt = np.maximum(st.tok_n, 1)[:, None]
                    rms = math.sqrt(float(np.trace(st.act.second_moment())))
                    centroids[site].append(st.tok_sum / cnt / max(rms, 1e-30))
                    if first.head:
                        proxies = [("fixed", Q_fixed[site])]
                        if cfg.refit:
                            proxies.append(("refit", proxy_fit(st.sample)))
                        for label, Q in proxies:
                            pb = dict(base, proxy=label)
                            rows.extend(energy_rows(Q, st, cfg, pb))
                            rows.extend(isotropy_share_rows(Q, st, cfg, pb))
                        if cfg.refit:
                            Qr = proxies[1][1]
                            dr = subspace_drift(Q_fixed[site], Qr)
                            b = dict(base, bucket="all", proxy="refit")
                            rows.extend([
                                _row(b, "proxy_drift_max_angle", dr.max_angle),
                                _row(b, "proxy_drift_mean_cos2", dr.mean_cos2),
                                _row(b, "proxy_drift_projection_distance", dr.projection_distance),
                            ])
                            if site in prev_refit:
                                dp = subspace_drift(prev_refit[site], Qr)
                                rows.append(_row(b, "refit_drift_from_previous_max_angle", dp.max_angle))
                            prev_refit[site] = Qr
                if lm is not None and first.head:
                    with timer("causal"):
                        rows.extend(_causal_rows(lm, site, Q_fixed[site], st, eval_data, cfg,
                                                 dict(base, proxy="fixed")))

        last_window = window[-1]
        for i, ck in enumerate(progress(cks, desc="measure")):
            with timer("load"):
                lm = first if i == 0 else load_like(first, ck.path, device=dev)
                if lm.arch != arch:
                    raise CheckpointError(
                        f"checkpoint {ck.name!r} is a {lm.arch} but the trajectory is a {arch}; "
                        "a trajectory cannot mix architectures")
            with timer("capture"):
                stats = collect_site_stats(lm, sites, eval_data, plans, uniq, cfg,
                                           with_grads=lm.head)
            ck_info.append({"checkpoint": ck.name, "step": ck.step, "path": str(ck.path),
                            "tie_embeddings": lm.tie_embeddings, "in_fit_window": ck in window,
                            "causal": i in causal_idx})
            pending.append((ck, stats, lm if i in causal_idx else None))
            if not Q_fixed and ck is last_window:
                with timer("proxy_fit"):
                    for site in sites:
                        pooled = np.concatenate([s[site].sample for c, s, _ in pending if c in window])
                        Q_fixed[site] = proxy_fit(pooled)
            if Q_fixed:
                for item in pending:
                    finalize(*item)
                pending.clear()

        with timer("metrics"):
            if len(cks) >= 2:
                for site in sites:
                    rows.extend(_trajectory_rows(site, centroids[site], stats[site], eval_data,
                                                 uniq, cfg, traj.model_name, arch, cks))
            rows.extend(_aggregate(rows, cfg, max_step))
        write_results(rows, tmp / RESULTS_NAME)
        with timer("figures"):
            if first.head:
                enrichment_figure(rows, sites, tmp / "enrichment.png")
            frequency_figure(scatter, sites, tmp / "frequency_distance.png")
        manifest = build_manifest(
            kind="empirical/measure", config=cfg, seeds={"seed": cfg.seed}, device=dev,
            dtype=str(next(first.model.parameters()).dtype).replace("torch.", ""),
            timings=timer.as_dict(),
            extra={
                "trajectory": str(trajectory), "model": traj.model_name, "arch": arch,
                "family": first.family, "has_lm_head": first.head,
                "activation_only": not first.head,
                "tie_embeddings": first.tie_embeddings, "hidden_size": d, "checkpoints": ck_info,
                "sites": {s: site_semantics(first.model, s) for s in sites},
                "fit_window": {"fraction": cfg.fit_fraction, "max_step": max_step,
                               "steps": [c.step for c in window]},
                "early_late_cut_step": cfg.early_fraction * max_step,
                "buckets": {"labels": eval_data.labels, "inner_edges_log1p_count":
                            [float(e) for e in eval_data.edges]},
                "frequency_source": eval_data.frequency_source, "corpus": corpus,
                "eval_tokens_per_checkpoint": int(sum(b[0].numel() for b in eval_data.batches)),
                "seq_len": seq_len, "torch_threads": torch.get_num_threads(),
            },
        )
        write_manifest(tmp, manifest)
    return Path(out_dir)


def _trajectory_rows(site, cents, st_last, eval_data, uniq, cfg, model_name, arch, cks):
    """Spearman/Pearson of each token's centroid trajectory variance against its log-frequency."""
    import numpy as np

    C = np.stack(cents)  # (T, U, d), each checkpoint's centroids / its RMS activation norm
    ok = st_last.tok_n >= cfg.spread_k
    var = ((C - C.mean(axis=0, keepdims=True)) ** 2).sum(axis=2).sum(axis=0) / (C.shape[0] - 1)
    logf = np.log1p(eval_data.counts[uniq]).astype(float)
    c = _corr_with_ci(logf[ok], var[ok], cfg)
    base = {"experiment": "empirical/measure", "model": model_name, "arch": arch,
            "checkpoint": "trajectory", "step": max(x.step for x in cks), "layer": _layer_of(site),
            "site": site, "bucket": "all", "seed": cfg.seed, "n": int(ok.sum())}
    return [_row(base, f"trajectory_variance_{name}", c[name][0], ci_low=c[name][1],
                 ci_high=c[name][2]) for name in ("pearson", "spearman")]


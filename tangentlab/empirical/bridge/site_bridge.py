"""Theory against measurement on real activations, for one (site, checkpoint) (issue 20).

:func:`site_bridge` takes the geometry occurrences a measurement already collects (at most one
per document and token: ``SiteStats.geo_rows``, ``geo_tokens``, ``geo_docs``), the training
frequency table, the eval stream's tokens and documents, and the fixed activation sample, and
returns tidy rows (:data:`~tangentlab.empirical.bridge.rows.COLUMNS`):

- **inputs** (``role = "input"``): the Zipf exponent s of the training frequency table (the
  predictions' s; tokens resampled) and of the eval text (documents resampled), both by the
  split-half rank MLE (:func:`~tangentlab.measure.fit_zipf`), the pinning exponent beta on raw and
  on direction-only vectors (:func:`~tangentlab.measure.pinning_exponent`, ranks from the training
  table), the local dimension m (rule below), the mean ‖II‖² and the spread scale t0;
- **comparisons** (``role = "comparison"``): the closed forms' predictions from those inputs
  against the same quantity measured directly, with :func:`~tangentlab.claims.bridge_rules.agreement`:

  - ``attenuation_raw`` / ``attenuation_direction``: ``attenuation(s, beta / s, V)``
    (theory ``frequency-attenuation``) against the measured occurrence-pooled over type-pooled
    visibility (:func:`~tangentlab.measure.measured_attenuation`), ``V`` the largest training
    rank among the measured tokens;
  - ``relative_visibility`` per frequency bucket: the bucket's type-pooled visibility over all
    tokens' (the theory's ``visibility_by_rank`` pooled as ``sum t_r² V_r / sum t_r²``; t0,
    ‖II‖² and m cancel, so it needs only s and beta) against the same ratio of measured pooled
    visibilities;
  - ``bucket_visibility`` per bucket: the absolute pooled visibility, which needs ‖II‖², t0 and
    m, so it is :data:`~tangentlab.claims.bridge_rules.NOT_MEASURABLE` wherever the
    calibration does not trust ‖II‖²;
- **peer baselines** (``role = "baseline"``, context without verdicts) on the activation sample:
  RankMe (Li et al. 2025: squared singular values), alpha-ReQ (ranks 11-99), TwoNN and GRIDE
  (scikit-dimension) and IsoScore.

**Rules.** Local dimension: :func:`~tangentlab.measure.local_dimension` of each token's occurrences
(tokens with at least ``dim_points`` of them, the ``max_tokens`` most frequent in training, at most
400 points each); m is the median, rounded. Neighbourhood: every token's own k occurrences,
``k = neighbourhood_size(m)`` (:func:`~tangentlab.measure.per_token_curvature`). Intervals: s
resamples documents, beta resamples tokens (occurrences redrawn), the pooled visibilities resample
tokens; replicate b of a prediction uses replicate b of every input
(:mod:`tangentlab.theory.measured_inputs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.claims.bridge_rules import (
    MIN_BUCKET_TOKENS,
    OUTSIDE_DOMAIN,
    trust,
)
from tangentlab.empirical.bridge.rows import bridge_row, interval
from tangentlab.errors import InsufficientSamplesError, ValidationError

__all__ = ["BridgeSettings", "SiteArrays", "site_bridge", "zipf_inputs"]


@dataclass(frozen=True)
class BridgeSettings:
    """Knobs of :func:`site_bridge` (the measure config's ``bridge_*`` keys)."""

    n_boot: int = 200
    max_tokens: int = 200
    pinning_k: int = 8
    zipf_min_count: int = 100
    dim_points: int = 64
    confidence: float = 0.95
    seed: int = 0
    intrinsic_dimension: bool = True  # TwoNN / GRIDE (scikit-dimension) among the baselines


@dataclass(frozen=True)
class SiteArrays:
    """What :func:`site_bridge` reads for one (site, checkpoint).

    Attributes:
        H: geometry occurrences ``(n, d)`` (at most one per document and token).
        tokens, docs: ``(n,)`` their token ids and documents.
        counts: ``(V,)`` training token counts (ranks and buckets come from these).
        edges: inner bucket edges on ``log(count + 1)``, ``(K - 1,)``; labels: ``K`` labels.
        stream_tokens, stream_docs: ``(N,)`` the eval text's tokens and documents (Zipf fit).
        sample: ``(n_s, d)`` the fixed activation sample (peer baselines).
    """

    H: np.ndarray
    tokens: np.ndarray
    docs: np.ndarray
    counts: np.ndarray
    edges: np.ndarray
    labels: tuple[str, ...]
    stream_tokens: np.ndarray
    stream_docs: np.ndarray
    sample: np.ndarray


#: Tokens of the training table the Zipf fit reads at most (binomial thinning above).
ZIPF_TABLE_TOKENS = 2_000_000


def _table_stream(counts: np.ndarray, seed: int) -> tuple[np.ndarray, str]:
    c = np.asarray(counts, dtype=np.float64).clip(min=0)
    total = float(c.sum())
    note = f"training table, {int(total)} tokens"
    if total > ZIPF_TABLE_TOKENS:
        c = np.random.default_rng([seed, 21]).binomial(c.astype(np.int64),
                                                       ZIPF_TABLE_TOKENS / total)
        note += f" thinned at random to {int(c.sum())}"
    return np.repeat(np.arange(c.size), np.asarray(c, dtype=np.int64)), note


def _zipf(a: SiteArrays, st: BridgeSettings):
    """(fit used by the predictions or None, input rows): s of the training table and eval text.

    The training table (the distribution the model was trained on) has no documents: its
    interval resamples tokens (no burstiness; the note says so). The eval text's fit resamples
    documents and is shown beside it.
    """
    from tangentlab.measure.zipf import fit_zipf

    table, tnote = _table_stream(a.counts, st.seed)
    out, rows = None, []
    for name, toks, docs, note in (
            ("zipf_s", table, None, tnote + "; interval resamples tokens (no documents)"),
            ("zipf_s_eval", a.stream_tokens, a.stream_docs, "eval text")):
        try:
            z = fit_zipf(toks, docs, min_count=st.zipf_min_count, n_boot=max(st.n_boot, 20),
                         confidence=st.confidence, seed=st.seed)
        except InsufficientSamplesError as exc:
            rows.append(bridge_row(name, "input", measured=str(exc), note=note))
            continue
        why = trust("zipf_s", n_ranks=z.r_max - z.r_min + 1)
        rows.append(bridge_row(name, "input", measured=why or (z.s, z.ci_low, z.ci_high), n=z.n_fit,
                         note=f"{note}; {z.rule}; {z.n_units} units"))
        if name == "zipf_s" and not why:
            out = z
    return out, rows


#: The rank ranges (the R most frequent training ranks) beta is also fitted over (issue 36):
#: pinning concentrated in the most frequent tokens makes one power law a range-dependent summary.
PINNING_RANK_RANGES = (100, 300, 1000)


def _pinning(a: SiteArrays, ranks: np.ndarray, st: BridgeSettings):
    """``({kind: fit, "KIND ranks <= R": fit}, rows)``: beta over every rank, then per range.

    The predictions read the fit over every rank; the fits over the most frequent ranks only
    (:data:`PINNING_RANK_RANGES`, those below the largest rank) are inputs shown beside it, and
    :func:`_attenuation_by_range` shows how far the predicted attenuation moves with them.
    """
    from tangentlab.empirical.bridge.pinning_form import curvature_row
    from tangentlab.measure.pinning import pinning_exponent

    out, rows = {}, []
    tops = [None, *(t for t in PINNING_RANK_RANGES if t < ranks[a.tokens].max())]
    for kind, normalise in (("raw", False), ("direction", True)):
        for top in tops:
            bucket, key = ("all", kind) if top is None else (f"ranks <= {top}",
                                                              f"{kind} ranks <= {top}")
            try:
                p = pinning_exponent(a.H, a.tokens, a.docs, ranks, k=st.pinning_k,
                                     normalise=normalise, n_boot=max(st.n_boot, 20),
                                     confidence=st.confidence, seed=st.seed,
                                     keep=None if top is None else ranks[a.tokens] <= top)
            except (InsufficientSamplesError, ValidationError) as exc:
                rows.append(bridge_row(f"pinning_beta_{kind}", "input", bucket=bucket,
                                       measured=str(exc)))
                if top is None:  # the curvature row says why too
                    rows.append(curvature_row(None, kind, str(exc), n_boot=0,
                                              confidence=st.confidence, seed=st.seed))
                continue
            why = trust("pinning_beta", n_tokens=p.n_tokens)
            note = f"k = {p.k} documents per token" + ("" if top is None else (
                f"; the {top} most frequent training ranks only (the predictions use every rank)"))
            rows.append(bridge_row(f"pinning_beta_{kind}", "input", bucket=bucket,
                             measured=why or (p.beta, p.ci_low, p.ci_high), n=p.n_tokens,
                             note=note))
            if not why:
                out[key] = p
            if top is None:
                rows.append(curvature_row(p, kind, why, n_boot=max(st.n_boot, 20),
                                          confidence=st.confidence, seed=st.seed))
    return out, rows


def _attenuation_by_range(zipf, pins: dict, kind: str, V: int, st: BridgeSettings) -> list:
    """The closed-form attenuation at each rank range's beta (a sensitivity, not a comparison)."""
    from tangentlab.theory.measured_inputs import measured, predict_attenuation

    rows = []
    for key, p in pins.items():
        if zipf is None or not key.startswith(f"{kind} ranks <= "):
            continue
        pr = predict_attenuation(measured(zipf, "s"), measured(p, "beta"), n_types=V,
                                 confidence=st.confidence)
        rows.append(bridge_row(f"attenuation_{kind}", "input", bucket="beta from " + key.split(" ", 1)[1],
                         measured=(pr.value, pr.ci_low, pr.ci_high), n=p.n_tokens,
                         note="the closed form at the beta of these ranks only: how far the "
                              "prediction moves with the rank range" + _outside_domain(p)))
    return rows


def _dimension(a: SiteArrays, order: np.ndarray, st: BridgeSettings):
    """(m or None, reason, candidate tokens by training frequency, their per-token m)."""
    from tangentlab.measure.curvature_stats import local_dimension
    from tangentlab.measure.geometry import one_per_window

    idx = one_per_window(a.tokens, a.docs, seed=st.seed)
    t = a.tokens[idx]
    per_tok = np.bincount(t, minlength=a.counts.size)
    cand = [int(x) for x in order if per_tok[x] >= st.dim_points][: st.max_tokens]
    if not cand:
        return None, (f"no token has {st.dim_points} occurrences in distinct documents (the most "
                      f"has {int(per_tok.max()) if per_tok.size else 0})"), [], []
    ms = []
    for tok in cand:
        rows = idx[t == tok][:400]
        ms.append(local_dimension(a.H[rows]).m)
    return int(round(float(np.median(ms)))), "", cand, ms


def _token_table(fits: dict, ranks: np.ndarray, a: SiteArrays):
    toks = np.array([t for t, f in fits.items() if f.measurable], dtype=np.int64)
    get = lambda name: np.array([getattr(fits[t], name) for t in toks], dtype=np.float64)  # noqa: E731
    ii = np.array([fits[t].ii_norm_sq if fits[t].ii_measurable else np.nan for t in toks])
    bucket = np.searchsorted(a.edges, np.log1p(a.counts[toks]), side="right")
    return toks, get("normal_var"), get("tangent_var"), ii, ranks[toks], bucket


def _pooled(W: np.ndarray, nv: np.ndarray, tv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Type-pooled visibility ``sum w N / sum w T`` over ``mask`` for weight rows W ``(B, T)``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (W[:, mask] @ nv[mask]) / (W[:, mask] @ tv[mask])


def _outside_domain(pin) -> str:
    """The note's suffix when a measured pinning exponent is negative ("" otherwise).

    The closed forms need alpha = beta / s >= 0; a negative beta (frequent tokens *more* spread)
    is predicted at beta = 0, no pinning (``predict_attenuation`` and :func:`_theory_pool` clip
    it), so the prediction is the theory's boundary value, not a fit to what was measured.
    """
    if pin is None or not pin.beta < 0:
        return ""
    return (f"; measured beta {pin.beta:.3g} < 0 is {OUTSIDE_DOMAIN} (alpha >= 0): "
            "predicted at beta = 0, no pinning")


def _theory_pool(r: np.ndarray, s: float, beta: float, V: int, masks: list[np.ndarray],
                 t0: float = 1.0, ii: float = 1.0, m: int = 1) -> np.ndarray:
    """The theory's type-pooled visibility of each mask's ranks: ``sum t_r² V_r / sum t_r²``."""
    from tangentlab.theory.attenuation import spread_by_rank, visibility_by_rank

    beta = max(beta, 0.0)
    if not (s > 0 and t0 > 0 and ii >= 0):
        return np.full(len(masks), np.nan)
    v = np.asarray(visibility_by_rank(r, s, beta / s, t0, ii, m, V), dtype=np.float64)
    w = np.asarray(spread_by_rank(r, s, beta / s, 1.0), dtype=np.float64) ** 2
    return np.array([np.sum(w[k] * v[k]) / np.sum(w[k]) for k in masks])


def _curvature_rows(a: SiteArrays, ranks: np.ndarray, order: np.ndarray, zipf, pins: dict,
                    st: BridgeSettings) -> list[dict]:
    from tangentlab.measure.buckets import measured_attenuation, per_token_curvature
    from tangentlab.measure.curvature_stats import neighbourhood_size
    from tangentlab.theory.measured_inputs import Measured, measured, predict_attenuation
    from tangentlab.theory.visibility import tangent_variance

    rows: list[dict] = []
    labels = list(a.labels)
    m, why, cand, ms = _dimension(a, order, st)
    rows.append(bridge_row("local_dimension_m", "input", measured=why or (
        float(m), float(np.quantile(ms, 0.025)), float(np.quantile(ms, 0.975))), n=len(ms),
        note="median of per-token multiscale local PCA; interval: 2.5-97.5% of the tokens' m"))
    fits: dict = {}
    if m is not None:
        k = neighbourhood_size(m)
        keep = np.isin(a.tokens, np.asarray(cand, dtype=np.int64))
        try:
            fits = per_token_curvature(a.H, a.tokens, a.docs, m, k=k, seed=st.seed, keep=keep)
        except InsufficientSamplesError as exc:
            why = str(exc)
    toks = np.zeros(0, dtype=np.int64)
    if fits:
        toks, nv, tv, ii, r, bucket = _token_table(fits, ranks, a)
        if toks.size < MIN_BUCKET_TOKENS:
            why = trust("pooled_visibility", n_tokens=int(toks.size)) + (
                f" ({len(fits) - toks.size} of {len(fits)} fits not measurable)")
            toks = np.zeros(0, dtype=np.int64)
    d = int(a.H.shape[1])
    ii_why = why or trust("ii_norm_sq", m=m, d=d)
    if toks.size:
        rng = np.random.default_rng([st.seed, 20])
        B = max(st.n_boot, 20)
        J = rng.integers(0, toks.size, size=(B, toks.size))
        W = np.zeros((B, toks.size))
        np.add.at(W, (np.repeat(np.arange(B), toks.size), J.ravel()), 1.0)
        ones = np.ones((1, toks.size))
        all_mask = np.ones(toks.size, dtype=bool)
        ii_ok = np.isfinite(ii)
        ii_mean = float(np.mean(ii[ii_ok])) if ii_ok.any() else float("nan")
        ii_reps = np.array([np.nanmean(np.where(ii_ok[j], ii[j], np.nan)) if ii_ok[j].any()
                            else np.nan for j in J])
        if not ii_ok.any():
            ii_why = ii_why or "no token's ‖II‖² passed its own markers"
        rows.append(bridge_row("ii_norm_sq", "input", measured=ii_why or interval(
            ii_mean, ii_reps, st.confidence), n=int(ii_ok.sum()),
            note=f"mean over tokens, k = {neighbourhood_size(m)} occurrences each; m = {m}"))
        V = max(int(r.max()), 2)
        freq = {int(t): float(a.counts[t]) for t in toks}
        att = measured_attenuation({int(t): fits[int(t)] for t in toks}, freq, n_boot=B,
                                   confidence=st.confidence, seed=st.seed)
        meas_att = (att.value, att.ci_low, att.ci_high)
        for kind in ("raw", "direction"):
            p = pins.get(kind)
            pred = "beta or s is not measurable" if (p is None or zipf is None) else None
            if pred is None:
                pr = predict_attenuation(measured(zipf, "s"), measured(p, "beta"), n_types=V,
                                         confidence=st.confidence)
                pred = (pr.value, pr.ci_low, pr.ci_high)
            rows += [bridge_row(f"attenuation_{kind}", "comparison", measured=meas_att,
                          predicted=pred, n=int(toks.size), note=f"V = {V} (largest training "
                          f"rank measured); beta {kind}" + _outside_domain(p)),
                     *_attenuation_by_range(zipf, pins, kind, V, st)]
        p = pins.get("raw")
        masks = [bucket == b for b in range(len(labels))]
        all_pool = _pooled(np.vstack([ones, W]), nv, tv, all_mask)
        nb = min(B, zipf.replicates.size if zipf is not None else 0,
                 p.replicates.size if p is not None else 0)
        for b, lab in enumerate(labels):
            mk = masks[b]
            n_b = int(mk.sum())
            bwhy = trust("pooled_visibility", n_tokens=n_b)
            pool = _pooled(np.vstack([ones, W]), nv, tv, mk)
            rel = pool / all_pool
            meas_rel = bwhy or interval(rel[0], rel[1:], st.confidence)
            meas_abs = bwhy or interval(pool[0], pool[1:], st.confidence)
            pred_rel: Any = "beta or s is not measurable"
            pred_abs: Any = ii_why or "beta or s is not measurable"
            if p is not None and zipf is not None and not bwhy:
                cols = [(zipf.s, p.beta)] + list(zip(zipf.replicates[:nb], p.replicates[:nb]))
                vals = np.array([np.divide(*_theory_pool(r, s_, b_, V, [mk, all_mask]))
                                 for s_, b_ in cols])
                pred_rel = interval(vals[0], vals[1:], st.confidence)
                if not ii_why:  # t_r from the theory's total tangent variance m t_r²
                    lt = np.log(np.sqrt(tv / float(tangent_variance(1.0, m))))
                    lr = np.log(r)
                    t0 = Measured(math.exp(float(np.mean(lt - p.beta * lr))),
                                  np.array([math.exp(float(np.mean(lt[J[i]] - p.replicates[i]
                                                                   * lr[J[i]])))
                                            for i in range(nb)]))
                    from tangentlab.theory.measured_inputs import predict_bucket_visibility

                    pa = predict_bucket_visibility(
                        r[mk], Measured(zipf.s, zipf.replicates[:nb]),
                        Measured(p.beta, p.replicates[:nb]), t0,
                        Measured(ii_mean, ii_reps[:nb]), m, V, confidence=st.confidence)
                    pred_abs = (pa.value, pa.ci_low, pa.ci_high)
            rows.append(bridge_row("relative_visibility", "comparison", bucket=lab, measured=meas_rel,
                             predicted=pred_rel, n=n_b,
                             note="bucket type-pooled over all tokens' type-pooled visibility"
                                  + _outside_domain(p)))
            rows.append(bridge_row("bucket_visibility", "comparison", bucket=lab, measured=meas_abs,
                             predicted=pred_abs, n=n_b, note=f"m = {m}, beta raw"))
    else:
        reason = why or "no token was measured"
        rows.append(bridge_row("ii_norm_sq", "input", measured=reason))
        for kind in ("raw", "direction"):
            rows.append(bridge_row(f"attenuation_{kind}", "comparison", measured=reason,
                             predicted=None if (pins.get(kind) and zipf) else
                             "beta or s is not measurable"))
        for lab in labels:
            for q in ("relative_visibility", "bucket_visibility"):
                rows.append(bridge_row(q, "comparison", bucket=lab, measured=reason))
    return rows


def _baselines(sample: np.ndarray, with_id: bool = True) -> list[dict]:
    from tangentlab.measure.isotropy import isoscore
    from tangentlab.measure.spectrum import alpha_req, gride_interval, intrinsic_dimension, rankme

    out = []
    n = int(sample.shape[0])
    jobs = (("rankme", lambda: rankme(sample), "Li et al. 2025: p ~ sigma^2, centred"),
            ("alpha_req", lambda: alpha_req(sample).alpha, "OLS of log lambda_k on log k, k = 11-99"),
            ("twonn", lambda: intrinsic_dimension(sample, "twonn"), "scikit-dimension TwoNN"),
            ("gride", lambda: gride_interval(sample),
             "scikit-dimension GRIDE; interval: ± 1.96 its Fisher-information standard error"),
            ("isoscore", lambda: isoscore(sample), "IsoScore of the sample"))
    for name, fn, note in jobs:
        if not with_id and name in ("twonn", "gride"):
            continue
        try:
            got = fn()
            v, lo, hi = got if isinstance(got, tuple) else (got, float("nan"), float("nan"))
            out.append(bridge_row(name, "baseline", measured=(float(v), float(lo), float(hi)),
                            status="context", n=n, note=note))
        except Exception as exc:  # noqa: BLE001 - a peer baseline that cannot run is context only
            out.append(bridge_row(name, "baseline", measured=" ".join(str(exc).split())[:160], n=n,
                            note=note))
    return out


def zipf_inputs(arrays: SiteArrays, settings: BridgeSettings | None = None):
    """(the Zipf fit the predictions use or None, its input rows) of a measurement's tables.

    The same for every site and checkpoint (the training table and the eval text do not
    change), so :func:`site_bridge` can take it precomputed.
    """
    return _zipf(arrays, settings or BridgeSettings())


def site_bridge(arrays: SiteArrays, settings: BridgeSettings | None = None,
                zipf: tuple | None = None) -> list[dict]:
    """Inputs, closed-form predictions, measurements and peer baselines of one (site, checkpoint).

    Args:
        arrays: the activations and tables (:class:`SiteArrays`).
        settings: :class:`BridgeSettings` (defaults when None).
        zipf: :func:`zipf_inputs` of the same tables, to skip refitting it (None: fit here).

    Returns:
        Rows with the keys :data:`~tangentlab.empirical.bridge.rows.COLUMNS` (module docstring).
    """
    from tangentlab.measure.pinning import token_ranks

    st = settings or BridgeSettings()
    a = arrays
    if a.H.ndim != 2 or a.H.shape[0] != a.tokens.size or a.docs.size != a.tokens.size:
        raise ValidationError(f"H must be (n, d) with n = len(tokens) = len(docs); got "
                              f"{a.H.shape}, {a.tokens.size}, {a.docs.size}")
    ranks = token_ranks(a.counts)
    order = np.argsort(ranks)  # token ids, most frequent in training first
    zipf, zrows = _zipf(a, st) if zipf is None else zipf
    rows = [dict(r) for r in zrows]
    pins, prows = _pinning(a, ranks, st)
    rows += prows
    rows += _curvature_rows(a, ranks, order, zipf, pins, st)
    rows += _baselines(a.sample, st.intrinsic_dimension)
    if st.intrinsic_dimension:
        from tangentlab.empirical.bridge.frequency_control import frequency_control_rows

        rows += frequency_control_rows(a.H, a.tokens, seed=st.seed)
    return rows

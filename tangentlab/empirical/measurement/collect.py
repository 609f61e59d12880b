"""From eval batches to site statistics: the row plan and the two capture passes of a checkpoint.

- :func:`plan_rows` decides, once per trajectory, which positions of each eval batch are rows,
  their token ids, context windows and frequency buckets, which rows are kept for fitting
  (``exclude_positions``), the seeded fixed activation sample (fit half only; the same rows at
  every checkpoint) and the geometry occurrences (fit half, at most one per document and token
  and per window and token, chosen at random; for an encoder never an MLM-selected position).
- :func:`collect_fit_half` runs forward passes over the fit half: activation moments, the
  sample, per-token sums and the geometry rows.
- :func:`collect_test_half` runs forward + backward passes over the test half, with the
  subspaces already known: the float64 gradient moments (oracle, ΔIsoScore*), per-batch scalars
  (:func:`tangentlab.measure.grouped_batch_energies`: one projection per batch for all buckets;
  the overall energies are the sums over buckets) for every proxy and bucket, and the cosines of the
  gradient rows with the directions a normalization layer may force them away from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tangentlab.empirical.measurement.records import RowPlan, SiteStats

__all__ = ["plan_rows", "collect_fit_half", "collect_test_half", "merge_halves",
           "select_geometry_rows", "prefetch_fit_halves", "fit_cache_budget", "FORCED_DIRECTIONS",
           "FIT_CACHE_BYTES"]

#: Memory the pre-pass may keep for fit-half statistics it collected in full, so that the main
#: pass does not forward those fit halves a second time (:func:`prefetch_fit_halves`): 1 GiB, or
#: ``TANGENTLAB_FIT_CACHE_MB`` megabytes (0 keeps none: every fit-window fit half is then
#: forwarded twice, as a sample-only pre-pass and in the main pass; the results are the same).
FIT_CACHE_BYTES = 1 << 30

#: The directions checked against the gradient rows (max and mean |cos| are recorded for each,
#: by :func:`tangentlab.measure.forced_direction_cosines`): ``ones`` (𝟙/√d: forced to 0 before a
#: LayerNorm), ``centred`` (h − mean(h)𝟙: forced to 0 before the last LayerNorm), ``raw`` (h:
#: forced to 0 before an RMSNorm).
FORCED_DIRECTIONS = ("ones", "centred", "raw")


def select_geometry_rows(tokens, windows, eligible, seed: int, docs=None):
    """Rows that enter per-token geometry: at most one per (document, token), at random.

    ``tokens``, ``windows``: (n,) ints; ``eligible``: (n,) bool; ``docs``: (n,) document ids or
    None. With ``docs``: one random row per (document, token) (seed ``seed``), then among those
    one per (window, token) (seed ``[seed, 1]``; a window may span two documents), so both
    hold. Without: one per (window, token), the rule before documents were known. Returns a
    bool mask (n,). Uses :func:`tangentlab.measure.one_per_group`.
    """
    import numpy as np

    from tangentlab.measure import one_per_group

    out = np.zeros(len(tokens), dtype=bool)
    if not len(tokens):
        return out
    tok, keep = np.asarray(tokens), np.asarray(eligible, dtype=bool)
    if docs is not None:
        first = np.zeros(len(tok), dtype=bool)
        first[one_per_group(tok, np.asarray(docs), seed, keep=keep)] = True
        keep, seed = first, [int(seed), 1]
    out[one_per_group(tok, np.asarray(windows), seed, keep=keep)] = True
    return out


def plan_rows(eval_data, arch: str, *, exclude_positions: Sequence[int], sample_rows: int,
              seed: int) -> tuple[list[RowPlan], Any]:
    """One :class:`RowPlan` per eval batch, and the fit half's distinct geometry token ids.

    The ids are sorted, shape ``(U,)``.

    The fixed sample draws ``min(sample_rows, kept fit rows)`` rows uniformly without
    replacement (seed ``[seed, 7]``) over the kept rows of the fit batches.
    """
    import numpy as np
    import torch

    raw = []
    for batch in eval_data.batches:
        inp, orig = batch.input_ids, batch.token_ids
        rows = torch.ones_like(inp, dtype=torch.bool)
        if arch == "decoder":
            rows[:, -1] = False
        B, T = inp.shape
        pos = torch.arange(T)[None, :].expand_as(inp)
        keep = torch.ones_like(rows)
        for p in exclude_positions:
            keep &= pos != (p % T)
        tok = orig[rows].numpy()
        kept = keep[rows].numpy()
        window = (batch.index * B + torch.arange(B)[:, None].expand_as(inp))[rows].numpy()
        doc = (window if batch.doc_ids is None else
               torch.as_tensor(batch.doc_ids)[rows].numpy().astype(np.int64))
        position = (np.full(len(tok), -1, dtype=np.int64) if batch.positions is None else
                    torch.as_tensor(batch.positions)[rows].numpy().astype(np.int64))
        geometry = kept & ~batch.masked.bool()[rows].numpy()
        if batch.half != "fit":
            geometry = np.zeros_like(geometry)
        bucket = np.searchsorted(eval_data.edges, np.log1p(eval_data.counts[tok]), side="right")
        raw.append((batch, rows, tok, kept, bucket, window, geometry, doc, position))
    fit_kept = sum(int(r[3].sum()) for r in raw if r[0].half == "fit")
    rng = np.random.default_rng([seed, 7])
    n_s = min(sample_rows, fit_kept)
    chosen = np.zeros(fit_kept, dtype=bool)
    chosen[rng.choice(fit_kept, size=n_s, replace=False)] = True
    all_tok = np.concatenate([r[2] for r in raw])
    all_win = np.concatenate([r[5] for r in raw])
    all_geo = np.concatenate([r[6] for r in raw])
    known = all(r[0].doc_ids is not None for r in raw)
    pick = select_geometry_rows(all_tok, all_win, all_geo, seed,
                                docs=np.concatenate([r[7] for r in raw]) if known else None)
    plans, offset, goff = [], 0, 0
    for batch, rows, tok, kept, bucket, window, geometry, doc, position in raw:
        k = int(kept.sum())
        if batch.half == "fit":
            sample = chosen[offset:offset + k]
            offset += k
        else:
            sample = np.zeros(k, dtype=bool)
        n = len(tok)
        plans.append(RowPlan(rows=rows, tok=tok, kept=kept, bucket=bucket, sample=sample,
                             window=window, geometry=geometry, geo_pick=pick[goff:goff + n],
                             doc=doc, position=position))
        goff += n
    geo_tok = all_tok[all_geo]
    uniq = np.unique(geo_tok) if geo_tok.size else np.zeros(0, dtype=np.int64)
    return plans, uniq


def _site_rows(cap, plan: RowPlan):
    import torch

    rows = plan.rows.to(cap.rows.device)
    if not torch.equal(rows & cap.rows, rows):
        rows = rows & cap.rows
    return rows


def _plan_index(plan: RowPlan, device, uniq) -> dict[str, Any]:
    """The plan's row selections as int64 index tensors on ``device`` (built once per batch).

    From the plan alone (host integers, never activations): ``sample``, the fixed sample's
    rows (kept rows, then the sample among them); ``geometry`` and ``token``, the geometry rows
    and their position in ``uniq`` (``token_counts``: a host (U,) count of them); ``pick``, the
    geometry occurrences.
    """
    import numpy as np
    import torch

    def ix(a):
        return torch.from_numpy(np.asarray(a, dtype=np.int64)).to(device)

    g = np.asarray(plan.geometry, dtype=bool)
    tk = np.searchsorted(uniq, plan.tok[g])
    return {"sample": ix(np.flatnonzero(plan.kept)[plan.sample]), "geometry": ix(np.flatnonzero(g)),
            "token": ix(tk), "token_counts": np.bincount(tk, minlength=len(uniq)),
            "pick": ix(np.flatnonzero(plan.geo_pick))}


def collect_fit_half(loaded, sites: Sequence[str], eval_data, plans: Sequence[RowPlan],
                     uniq, *, sample_only: bool = False) -> dict[str, SiteStats]:
    """Forward passes over the fit half; returns {site: SiteStats} with the fit-half fields.

    ``sample_only``: only the fixed activation sample (the proxy schedule's pre-pass).

    The statistics stay on the device of the activations, in the statistics' precision
    (:mod:`tangentlab.measure.precision`): the activation moments, the per-token sums
    (:class:`~tangentlab.measure.precision.CompensatedSum`) and the fixed sample, moved to the
    host once at the end. The geometry occurrences (one row per (document, token): O(tokens · d)
    over the fit half) go to the host batch by batch, so the device never holds them all.
    """
    import numpy as np
    import torch

    from tangentlab.empirical.loading.capture import capture_batch
    from tangentlab.measure import MomentAccumulator
    from tangentlab.measure.precision import CompensatedSum, resolve_precision

    parts: dict[str, dict[str, Any]] = {}
    loss_sum, n_targets = 0.0, 0
    U = len(uniq)
    from tangentlab.progress import progress

    for batch, plan in progress(list(zip(eval_data.batches, plans, strict=True)),
                                desc="fit batches"):  # per-batch progress (rank 0 only)
        if batch.half != "fit" or (sample_only and not plan.sample.any()):
            continue
        cap = capture_batch(loaded, sites, batch.input_ids, batch.labels, masked=batch.masked,
                            grads=False)
        if not math.isnan(cap.loss_sum):
            loss_sum += cap.loss_sum
            n_targets += cap.n_targets
        rows = _site_rows(cap, plan)
        ix = None
        for site in cap.acts:
            raw = cap.acts[site][rows]
            if ix is None:
                ix = _plan_index(plan, raw.device, uniq)
            d = raw.shape[1]
            if site not in parts:
                prec = resolve_precision(None, raw.device)
                like_u = raw.new_zeros((U, d), dtype=prec.dtype)
                parts[site] = {
                    "prec": prec, "act": MomentAccumulator(d), "sample": [],
                    "sample_tokens": [], "tok_sum": CompensatedSum(like_u, prec.compensated),
                    "tok_sq": CompensatedSum(like_u[:, 0], prec.compensated),
                    "tok_n": np.zeros(U, dtype=np.int64), "geo_rows": [], "geo_tokens": [],
                    "geo_docs": []}
            p = parts[site]
            H = raw.to(p["prec"].dtype)
            p["sample"].append(H.index_select(0, ix["sample"]))
            p["sample_tokens"].append(plan.tok[plan.kept][plan.sample])
            if sample_only:
                continue
            p["act"].update(H)
            Hg = H.index_select(0, ix["geometry"])
            p["tok_sum"].index_add(ix["token"], Hg)
            p["tok_sq"].index_add(ix["token"], (Hg * Hg).sum(1))
            p["tok_n"] += ix["token_counts"]
            p["geo_rows"].append(H.index_select(0, ix["pick"]).to("cpu", torch.float64))
            p["geo_tokens"].append(plan.tok[plan.geo_pick])
            p["geo_docs"].append((plan.window if plan.doc is None else plan.doc)[plan.geo_pick])
    out = {}
    for site, p in parts.items():
        tok_sum = p["tok_sum"].host()
        d = tok_sum.shape[1]
        out[site] = SiteStats(
            act=p["act"].to_host(),
            sample=torch.cat(p["sample"]).to("cpu", torch.float64).numpy(),
            sample_tokens=np.concatenate(p["sample_tokens"]), tok_sum=tok_sum.numpy(),
            tok_sq=p["tok_sq"].host().numpy(), tok_n=p["tok_n"],
            geo_rows=(torch.cat(p["geo_rows"]).numpy() if p["geo_rows"]
                      else np.zeros((0, d))),
            geo_tokens=(np.concatenate(p["geo_tokens"]) if p["geo_tokens"]
                        else np.zeros(0, dtype=np.int64)),
            geo_docs=(np.concatenate(p["geo_docs"]) if p["geo_docs"]
                      else np.zeros(0, dtype=np.int64)),
            loss_sum=loss_sum, n_targets=n_targets)
    return out


def fit_cache_budget() -> int:
    """Bytes the pre-pass may keep (``TANGENTLAB_FIT_CACHE_MB`` or :data:`FIT_CACHE_BYTES`).

    Returns -1 when nothing may be kept.
    """
    import os

    from tangentlab.errors import ConfigError

    text = os.environ.get("TANGENTLAB_FIT_CACHE_MB")
    if not text:
        return FIT_CACHE_BYTES
    try:
        budget = int(float(text) * 2**20)
    except ValueError:
        raise ConfigError(f"TANGENTLAB_FIT_CACHE_MB must be a number of megabytes, got {text!r}"
                          ) from None
    return budget if budget > 0 else -1


def prefetch_fit_halves(checkpoints: Sequence[tuple[int, Any, bool, bool]], load, sites,
                        eval_data, plans, uniq, timer) -> tuple[dict[int, dict], dict[int, dict]]:
    """The fit halves a pre-pass collects before the main pass.

    ``checkpoints``: ``(index, checkpoint, in_window, keepable)`` in trajectory order; ``load``
    gives a checkpoint's loaded model. A window checkpoint's fixed activation sample is always
    collected; a keepable checkpoint's whole fit half is collected and kept while the kept
    statistics stay within :func:`fit_cache_budget` (a checkpoint neither in the window nor kept
    is not forwarded). Returns ``(samples {index: {site: (n_s, d)}}`` of the window checkpoints,
    ``kept {index: {site: SiteStats}})``: the main pass reuses the kept ones instead of forwarding
    the same batches again (the same statistics: same model, same batches).
    """
    samples: dict[int, dict] = {}
    kept: dict[int, dict] = {}
    budget, held, size = fit_cache_budget(), 0, 0
    for i, ck, in_window, keepable in checkpoints:
        keep = keepable and held + size <= budget
        if not (keep or in_window):
            continue
        with timer("load"):
            lm = load(ck)
        with timer("capture"):
            got = collect_fit_half(lm, sites, eval_data, plans, uniq, sample_only=not keep)
        if in_window:
            samples[i] = {site: got[site].sample for site in sites}
        if keep:
            size = sum(st.fit_nbytes() for st in got.values())
            if held + size <= budget:
                kept[i] = got
                held += size
    return samples, kept


def _combine_cosines(acc: dict[str, float], got: Mapping[str, float]) -> dict[str, float]:
    """Fold one batch's :func:`tangentlab.measure.forced_direction_cosines` into ``acc``."""
    n_old, n_new = acc.get("n", 0), int(got["n"])
    out = {"n": n_old + n_new, "n_zero": acc.get("n_zero", 0) + int(got["n_zero"]),
           "unconstrained_typical": float(got["unconstrained_typical"])}
    for name in FORCED_DIRECTIONS:
        mx, mn = got[f"{name}_max"], got[f"{name}_mean"]
        if n_new == 0:
            mx, mn = float("-inf"), 0.0
        out[f"{name}_max"] = max(acc.get(f"{name}_max", float("-inf")), mx)
        tot = n_old + n_new
        out[f"{name}_mean"] = ((acc.get(f"{name}_mean", 0.0) * n_old + mn * n_new) / tot
                               if tot else float("nan"))
    return out


def _forced_fold(acc: dict | None, parts: Mapping[str, Any]) -> dict:
    """Fold one batch's :func:`tangentlab.measure.constrained.forced_cosine_parts` (on device)."""
    import torch

    if acc is None:
        return dict(parts)
    out = {}
    for key, v in parts.items():
        out[key] = torch.maximum(acc[key], v) if key.endswith("_max") else acc[key] + v
    return out


def _forced_summary(acc: Mapping[str, Any], d: int) -> dict[str, float]:
    """The host record of the folded cosines (the format of ``forced_direction_cosines``)."""
    n = int(acc["n"])
    out: dict[str, float] = {"n": n, "n_zero": int(acc["n_zero"]),
                             "unconstrained_typical": float(1 / math.sqrt(d))}
    for name in FORCED_DIRECTIONS:
        out[f"{name}_max"] = float(acc[f"{name}_max"]) if n else float("-inf")
        out[f"{name}_mean"] = float(acc[f"{name}_sum"]) / n if n else float("nan")
    return out


def collect_test_half(loaded, sites: Sequence[str], eval_data, plans: Sequence[RowPlan], *,
                      subspaces: Mapping[str, Mapping[str, tuple]],
                      constrain: Mapping[str, tuple] | None = None, act_rows: int = 1024,
                      seed: int = 0, chunk: int = 8,
                      n_test_batches: int | None = None) -> dict[str, dict[str, Any]]:
    """Forward + backward passes over the test half, with the subspaces known.

    ``subspaces``: {site: {proxy: (Q (d, r), pool (K, d, r)[, full (K_f, d, r)])}}: the
    complement pool and, optionally, full-space controls (the p-value's). ``constrain``: optional
    {site: (U (d, d−k), {proxy: (Qc (d−k, r'), poolc (K, d−k, r'))})}: the energy test inside
    the complement of a fixed forced subspace, on the rows G U (see
    :mod:`tangentlab.measure.constrained`). ``act_rows``: activation rows of the test half kept
    (seeded, spread evenly over the batches) for the per-row reachable baselines. ``chunk``:
    accepted for compatibility and unused (each batch's energies are taken when it arrives).

    Everything runs in torch on the device of the gradients, in the statistics' precision
    (:mod:`tangentlab.measure.precision`): the bucketed gradient moments
    (:meth:`~tangentlab.measure.MomentAccumulator.update_indexed`), the per-batch energies
    (:class:`~tangentlab.measure.EnergyStream`, one per proxy, bucketed, and one per constrained
    proxy; the proxies share one projection per batch,
    :class:`~tangentlab.measure.EnergyStreamGroup`), the forced-direction cosines and the kept
    activation rows. They reach the host once,
    at the end: the (d, d) moments and the per-batch scalars, as float64.

    Returns {site: {"grad": MomentAccumulator grouped by bucket, "energies": {(proxy, bucket):
    BatchEnergies}, "constrained": {(proxy, "all"): BatchEnergies}, "forced": cosine summary,
    "test_acts": (n, d), "loss_sum", "n_targets"}}.
    """
    import numpy as np
    import torch

    from tangentlab.empirical.loading.capture import capture_batch

    del chunk
    labels = list(eval_data.labels)
    tests = [(b, p) for b, p in zip(eval_data.batches, plans, strict=True) if b.half == "test"]
    # n_test_batches: the whole test half's count when these batches are one rank's share
    per_batch = -(-act_rows // max(n_test_batches or len(tests), 1))
    parts: dict[str, dict[str, Any]] = {}
    loss_sum, n_targets = 0.0, 0

    from tangentlab.progress import progress

    for batch, plan in progress(tests, desc="test batches"):  # per-batch progress (rank 0 only)
        cap = capture_batch(loaded, sites, batch.input_ids, batch.labels, masked=batch.masked,
                            grads=True)
        if not math.isnan(cap.loss_sum):
            loss_sum += cap.loss_sum
            n_targets += cap.n_targets
        rows = _site_rows(cap, plan)
        bucket = pick = None
        for site in cap.grads:
            G = cap.grads[site][rows]
            if site not in parts:
                parts[site] = _test_half_state(site, G, labels, subspaces, constrain)
            if bucket is None:  # from the plan (host integers), once per batch
                bucket = torch.from_numpy(np.asarray(plan.bucket, dtype=np.int64)).to(G.device)
                n = int(G.shape[0])
                chosen = np.random.default_rng([seed, 29, batch.index]).choice(
                    n, size=min(per_batch, n), replace=False)
                pick = torch.from_numpy(np.sort(chosen).astype(np.int64)).to(G.device)
            _add_test_rows(parts[site], G, cap.acts[site][rows], bucket, pick)
    return {site: _finish_test_half(p, labels, loss_sum, n_targets) for site, p in parts.items()}


def _test_half_state(site: str, G, labels: list, subspaces: Mapping[str, Mapping[str, tuple]],
                     constrain: Mapping[str, tuple] | None) -> dict[str, Any]:
    """What :func:`collect_test_half` accumulates for ``site``, started at its first gradients.

    ``G`` is (n, d); the state holds the bucketed moments, the energy streams (grouped) and the
    kept rows.
    """
    import numpy as np
    import torch

    from tangentlab.measure import EnergyStream, EnergyStreamGroup, MomentAccumulator
    from tangentlab.measure.precision import resolve_precision

    L = len(labels)
    prec = resolve_precision(None, G.device)
    streams = {proxy: EnergyStream(Q, pool, full_controls=full[0] if full else None,
                                   n_groups=L)
               for proxy, (Q, pool, *full) in subspaces.get(site, {}).items()}
    cons, U = {}, None
    if constrain and site in constrain:
        U_np, tested = constrain[site]
        U = torch.from_numpy(np.asarray(U_np, dtype=np.float64)).to(G.device, prec.dtype)
        cons = {proxy: EnergyStream(Qc, poolc, full_controls=fullc[0] if fullc else None)
                for proxy, (Qc, poolc, *fullc) in tested.items()}
    # the proxies' streams see the same rows: one projection per batch for all of them
    return {"prec": prec, "grad": MomentAccumulator(G.shape[1], groups=labels),
            "streams": streams, "cons": cons, "U": U, "forced": None, "acts": [],
            "act_w": [],
            "group": EnergyStreamGroup(streams.values()) if streams else None,
            "cons_group": EnergyStreamGroup(cons.values()) if cons else None}


def _add_test_rows(p: dict[str, Any], G, H, bucket, pick) -> None:
    """Fold one batch of one site into its state ``p``.

    ``G``, ``H``: the gradients and activations (n, d); ``bucket``: each row's bucket (n,);
    ``pick``: the indices of the kept rows.
    """
    from tangentlab.measure.constrained import forced_cosine_parts

    G = G.to(p["prec"].dtype)
    H = H.to(p["prec"].dtype)
    p["grad"].update_indexed(G, bucket)
    p["forced"] = _forced_fold(p["forced"], forced_cosine_parts(G, H))
    p["acts"].append(H.index_select(0, pick))
    Gp = G.index_select(0, pick)
    p["act_w"].append((Gp * Gp).sum(1))
    if p["group"] is not None:
        p["group"].add(G, bucket)
    if p["cons"]:
        p["cons_group"].add(G @ p["U"])


def _finish_test_half(p: dict[str, Any], labels: list, loss_sum: float,
                      n_targets: int) -> dict[str, Any]:
    """One site's entry of :func:`collect_test_half`'s result, brought to the host once."""
    import torch

    energies, constrained = {}, {}
    for proxy, stream in p["streams"].items():
        per = stream.finish()  # one BatchEnergies per bucket, in label order
        total = per[0]
        for e in per[1:]:
            total = total.plus(e)
        energies[(proxy, "all")] = total
        for j, lb in enumerate(labels):
            energies[(proxy, lb)] = per[j]
    for proxy, stream in p["cons"].items():
        constrained[(proxy, "all")] = stream.finish()[0]
    d = p["grad"].dim
    return {"grad": p["grad"].to_host(), "energies": energies,
            "constrained": constrained, "forced": _forced_summary(p["forced"], d),
            "test_acts": torch.cat(p["acts"]).to("cpu", torch.float64).numpy(),
            "test_act_weights": torch.cat(p["act_w"]).to("cpu", torch.float64).numpy(),
            "loss_sum": loss_sum, "n_targets": n_targets}


def merge_halves(fit: SiteStats, test: Mapping[str, Any] | None) -> SiteStats:
    """One site's record from its fit-half statistics and its test-half results (or None)."""
    from dataclasses import replace

    if test is None:
        return fit
    return replace(fit, grad=test["grad"], energies=dict(test["energies"]),
                   constrained=dict(test["constrained"]), forced=dict(test["forced"]),
                   test_acts=test["test_acts"], test_act_weights=test.get("test_act_weights"),
                   loss_sum=fit.loss_sum + test["loss_sum"],
                   n_targets=fit.n_targets + test["n_targets"])

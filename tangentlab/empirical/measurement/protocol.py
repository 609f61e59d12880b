"""The paper's tangent-proxy protocol over a trajectory of checkpoints (``measure``).

Once per trajectory: fixed eval batches, split by a seeded permutation into a **fit half**
(activations) and a **test half** (gradients); a row plan per batch (tokens, windows, buckets,
the fixed activation sample, the geometry occurrences: at most one per window and token, never an
MLM-selected position); and the proxy schedule, whose fixed proxy Q_T (d×r) is fitted in a
forward-only pre-pass on the fit-window checkpoints (steps ≤ ``fit_fraction`` × last step, each
weighted by the span of steps it stands for).

Then every checkpoint, in one pass with its subspaces known:

1. **Fit half** (forward): activation moments, the sample (refit proxy, representation metrics),
   per-token geometry (equal-size spread and centroids of one-per-window occurrences).
2. **Test half** (forward + backward of the model's own summed loss): float64 gradient moments
   per bucket (oracle, ΔIsoScore*), per-batch scalars (each proxy's and each pool control's
   projected energy, and the trace, per batch and bucket), cosines with the directions a
   normalization layer forces, and the energies inside the complement of 𝟙.
3. **Rows**: energy test with intervals over test batches that redraw the controls
   (``batch_control_test``), overall and per bucket, fixed and refit; the constrained-space
   versions where a direction is measured to be forced; ΔIsoScore* (marked as depending on the
   enrichment); representation anisotropy; frequency–spread correlations (Pearson and Spearman,
   corrected and raw); proxy drift; and on ``causal_checkpoints`` the causal check (mean-ablation
   of span(Q_T) against dose-matched controls, and steering; :mod:`tangentlab.empirical.measurement.causal`).
4. Each finished checkpoint is saved to a partial folder (``resume=True`` continues after a kill).

Finally: centroid-trajectory variance against frequency, and step-span-weighted early/late
aggregates (min–max in ``band_low``/``band_high``).

The jobs live in the other modules of this room (:mod:`tangentlab.empirical.measurement`): the
config (``measure_config``), the checks before any weights load (``preflight``), typed records
(``records``), what the checkpoints share (``plan``), the execution modes (``modes``), the row
plan and the two capture passes (``collect``), the proxy schedule (``proxy_schedule``), the
metric-row builders (``metrics``), the causal check (``causal``), the energy of the optimizer's
update (``update_energy``) and the partial folder (``partial``). This module holds the
orchestration. docs/empirical.md states every metric and formula.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tangentlab.empirical.measurement.collect import collect_fit_half, collect_test_half
from tangentlab.empirical.measurement.measure_config import (  # the config lives apart; re-exported here
    MeasureConfig,
    resolve_measure_config,
    spread_indices,
)
from tangentlab.empirical.measurement.metrics import (
    AGGREGATED_METRICS,
    energy_rows,
    frequency_rows,
    isotropy_share_rows,
    representation_rows,
)
from tangentlab.empirical.measurement.plan import (
    Setup,
    fixed_proxies,
    layer_of,
    load_checkpoint,
    prepare,
)
from tangentlab.empirical.measurement.proxy_schedule import energy_test_subspaces, ones_space
from tangentlab.empirical.measurement.records import RowBase, RowPlan, SiteStats
from tangentlab.empirical.measurement.update_energy import OPTIMIZER_FILE, update_rows
from tangentlab.errors import ConfigError, TangentlabError
from tangentlab.measure.precision import precision_scope, resolve_precision

__all__ = ["MeasureConfig", "AGGREGATED_METRICS", "measure_trajectory", "resolve_measure_config",
           "RowPlan", "SiteStats", "collect_fit_half", "collect_test_half",
           "energy_rows", "isotropy_share_rows", "representation_rows", "frequency_rows"]


def _site_rows(lm, st: SiteStats, proxies, tested, base: RowBase, setup: Setup,
               cfg: MeasureConfig, *, causal: bool, ones, timer, learning=False) -> tuple:
    """Every row of one (checkpoint, site), and its frequency scatter data."""
    import numpy as np

    from tangentlab.empirical.measurement.causal import causal_losses, causal_rows
    from tangentlab.empirical.measurement.learning_arms import measure_learning_arms
    from tangentlab.empirical.measurement.metrics import (
        drift_rows,
        forced_direction_rows,
        loss_rows,
        reachable_rows,
    )
    from tangentlab.measure import normal_controls

    with timer("metrics"):
        rows = loss_rows(st, base) + representation_rows(st, cfg, base)
        frows, scatter = frequency_rows(st, setup.eval_data.counts, setup.uniq, cfg, base)
        rows += frows
        if proxies is not None:
            plain, _ = tested
            oracles: dict = {}  # each bucket's oracle, shared by the proxies
            for label, (Q, *_pools) in plain.items():
                pb = base.with_(proxy=label)
                rows += (energy_rows(st, label, cfg, pb, oracles=oracles)
                         + isotropy_share_rows(Q, st, cfg, pb))
            rows += drift_rows(proxies, base)
            rows += forced_direction_rows(st, base, cfg.forced_tol)
            f = st.forced
            for label, (Q, pool, full) in plain.items():
                pb = base.with_(proxy=label)
                if f.get("ones_max", 1.0) < cfg.forced_tol:
                    rows += energy_rows(st, label, cfg, pb, constrained=True, U=ones.basis,
                                        oracles=oracles)
                per_row = ("centred" if f.get("centred_max", 1.0) < cfg.forced_tol else
                           "raw" if f.get("raw_max", 1.0) < cfg.forced_tol else None)
                if per_row is not None:
                    rows += reachable_rows(st, label, Q, pool, per_row, cfg, pb, full=full)
    if causal and proxies is not None:
        with timer("causal"):
            Q = proxies.fixed
            complement = normal_controls(Q, cfg.n_controls, cfg.seed)[: cfg.causal_controls]
            # moments, matching and ablation on the same edited positions (issue 18)
            cl = causal_losses(lm, base.site, Q, complement,
                               rms=math.sqrt(float(np.trace(st.act.second_moment()))),
                               batches=setup.eval_data.test_batches[: cfg.causal_batches],
                               steer_sizes=cfg.steer_sizes, n_controls=cfg.causal_controls,
                               seed=[cfg.seed, 31], exclude_positions=cfg.exclude_positions)
            rows += causal_rows(cl, cfg, base.with_(proxy="fixed"))
    if learning and proxies is not None:  # the learning arms (issue 18)
        rows += measure_learning_arms(lm, base.site, proxies.fixed, setup.eval_data, cfg, base)
    return rows, scatter


def _centroids(st: SiteStats, cfg: MeasureConfig):
    """(tokens, equal-size centroids / rms) and all-occurrence centroids / rms (U, d)."""
    import numpy as np

    from tangentlab.errors import InsufficientSamplesError
    from tangentlab.measure import equal_size_centroids

    rms = max(math.sqrt(float(np.trace(st.act.second_moment()))), 1e-30)
    try:
        tokens, cen = equal_size_centroids(st.geo_rows, st.geo_tokens, cfg.spread_k,
                                           [cfg.seed, 19])
    except InsufficientSamplesError:
        tokens, cen = np.zeros(0, dtype=np.int64), np.zeros((0, st.tok_sum.shape[1]))
    raw = st.tok_sum / np.maximum(st.tok_n, 1)[:, None]
    return tokens, cen / rms, raw / rms


def _trajectory_site_rows(per_ck: list[dict], setup: Setup, cfg: MeasureConfig,
                          base: RowBase) -> list[dict]:
    """Centroid-trajectory variance against log-frequency: equal-size, then raw.

    ``per_ck``: one dict per checkpoint with ``cen_tokens`` (t,), ``cen`` (t, d), ``raw`` (U, d)
    and ``tok_n`` (U,) (the geometry counts, the same at every checkpoint).
    """
    import numpy as np

    from tangentlab.empirical.measurement.metrics import trajectory_rows

    counts = setup.eval_data.counts
    tokens = per_ck[0]["cen_tokens"]
    if len(tokens) and all(np.array_equal(p["cen_tokens"], tokens) for p in per_ck):
        rows = trajectory_rows(np.stack([p["cen"] for p in per_ck]),
                               np.log1p(counts[tokens]).astype(float), base, cfg)
    else:
        rows = trajectory_rows(np.zeros((len(per_ck), 0, setup.d)), np.zeros(0), base, cfg)
    ok = per_ck[-1]["tok_n"] >= cfg.spread_k
    raw = np.stack([p["raw"] for p in per_ck])[:, ok]
    rows += trajectory_rows(raw, np.log1p(counts[setup.uniq[ok]]).astype(float), base, cfg,
                            raw=True)
    return rows


@dataclass(frozen=True)
class _Context:
    """What measuring one checkpoint needs from the trajectory-level plan."""

    cfg: MeasureConfig
    traj: Any
    setup: Setup
    schedule: Any
    fixed: dict
    ones: Any
    causal_idx: frozenset
    dev: str
    timer: Any
    fit_cache: dict = field(default_factory=dict)
    pools: dict = field(default_factory=dict)  # see _energy_test_subspaces


def _measure_checkpoint(ctx: _Context, i: int, ck, previous: Mapping[str, Any], share=None
                        ) -> tuple[list[dict], dict, dict[str, dict]] | None:
    """Measure one checkpoint (all of it, or this rank's share).

    Measure checkpoint ``ck`` (position ``i``): its rows, its manifest record, and per site
    the arrays later steps need (scatter, centroids, refit proxy, geometry counts).

    ``share``: a :class:`tangentlab.empirical.measurement.parallel.DataShare` in data-parallel mode (this
    rank captures its share of the eval batches, rank 0 merges, fits the refit proxy and
    broadcasts it, then computes every row); None is returned on the other ranks.
    """
    from tangentlab.empirical.measurement.collect import merge_halves

    cfg, setup, timer = ctx.cfg, ctx.setup, ctx.timer
    head, last = setup.first.head, max(ctx.causal_idx, default=-1)
    main = share is None or share.world.is_main
    with timer("load"):
        lm = load_checkpoint(setup, ck, ctx.dev)
    with timer("capture"):
        fit = ctx.fit_cache.pop(i, None)  # collected by the pre-pass, or now:
        if fit is None and share is None:
            fit = collect_fit_half(lm, setup.sites, setup.eval_data, setup.plans, setup.uniq)
        elif fit is None:
            fit = share.fit_half(lm, setup.sites, setup.uniq)
    proxies, tested, test = {}, {}, {}
    if head:
        with timer("proxy_fit"):
            if main:
                for site in setup.sites:
                    proxies[site] = ctx.schedule.proxies(ctx.fixed[site], fit[site].sample,
                                                         previous.get(site), site=site)
            if share is not None:
                proxies = share.world.broadcast_object(proxies)
            for site in setup.sites:
                tested[site] = energy_test_subspaces(proxies[site], cfg, ctx.ones, ctx.pools)
        with timer("capture"):
            kwargs = dict(subspaces={s: t[0] for s, t in tested.items()},
                          constrain={s: (ctx.ones.basis, t[1]) for s, t in tested.items()},
                          act_rows=cfg.sample_rows, seed=cfg.seed)
            if share is None:
                test = collect_test_half(lm, setup.sites, setup.eval_data, setup.plans, **kwargs)
            else:
                test = share.test_half(lm, setup.sites, **kwargs)
    if not main:
        return None
    info = {**ck.to_dict(), "checkpoint": ck.name, "step": ck.step, "path": str(ck.path),
            "tie_embeddings": lm.tie_embeddings, "in_fit_window": ctx.schedule.in_window(ck.step),
            "causal": i in ctx.causal_idx}
    rows: list[dict] = []
    per_site: dict[str, dict] = {}
    bases: dict[str, RowBase] = {}
    for site in setup.sites:
        st = merge_halves(fit[site], test.get(site))
        base = bases[site] = RowBase(model=ctx.traj.model_name, arch=setup.first.arch,
                                     checkpoint=ck.name, step=ck.step, layer=layer_of(site),
                                     site=site, seed=cfg.seed, method=setup.proxies[site].spec)
        got, scatter = _site_rows(lm, st, proxies.get(site), tested.get(site), base, setup, cfg,
                                  causal=head and i in ctx.causal_idx, ones=ctx.ones, timer=timer,
                                  learning=head and i == last and cfg.learning_arms)
        rows += got
        tokens, cen, raw = _centroids(st, cfg)
        per_site[site] = {"logf": scatter["logf"], "spread": scatter["spread"],
                          "cen_tokens": tokens, "cen": cen, "raw": raw, "tok_n": st.tok_n,
                          "refit": proxies[site].refit if site in proxies else None}
    if head and cfg.update_energies and (Path(str(ck.path)) / OPTIMIZER_FILE).is_file():
        with timer("updates"):  # the energy of the optimizer's step (issue 36)
            rows += update_rows(lm, ck.path, setup.eval_data.batches, setup.plans, tested, cfg, bases)
    return rows, info, per_site


def measure_trajectory(
    trajectory: str | Path, out_dir: str | Path, *, device: str = "auto", seed: int = 0,
    overrides: Mapping[str, Any] | None = None, config_path: str | Path | None = None,
    gguf: bool = False, resume: bool = False, on_checkpoint=None, autocast: str | None = None,
    dtype: Any = None, figures: bool = True,
) -> Path:
    """Run the protocol over ``trajectory``; write ``results.csv``, ``manifest.json`` and figures.

    ``dtype``: the forward-pass dtype (``float32`` | ``bfloat16`` | ``float16``, or a torch dtype), as
    :func:`~tangentlab.empirical.loading.models.load_model` takes it; the same as
    ``overrides={"dtype": ...}`` (giving both with different values is a ConfigError).

    ``out_dir`` is built atomically (a failure leaves no partial output). Each finished
    checkpoint is also saved to a partial folder beside it (:mod:`tangentlab.empirical.measurement.partial`);
    ``resume=True`` continues from there after a kill, with the same ``results.csv`` as an
    uninterrupted run. ``on_checkpoint(index, name)`` is called after each checkpoint is saved.
    ``autocast``: ``bf16`` | ``fp16`` runs the captures under ``torch.autocast``
    (:func:`tangentlab.empirical.measurement.parallel.autocast`; statistics stay float64). Under torchrun (or
    ``--nproc``) the ranks split the work and rank 0 alone writes (docs/scale.md). ``figures=False``
    draws none (the end-to-end simulations). Returns the run directory; see docs/empirical.md.

    Every input is checked before any weights are loaded
    (:func:`tangentlab.empirical.measurement.preflight.preflight`: config, output path, every checkpoint's
    revision and config.json, sites, rank, proxies and dictionaries, eval text), then the dtype
    on the device; bad input is a typed error in seconds, before the first forward pass.
    """
    from tangentlab.empirical.measurement.preflight import preflight

    if dtype is not None:  # a name, or a torch.dtype such as torch.bfloat16
        name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        given = (overrides or {}).get("dtype")
        if given is not None and str(given) != name:
            raise ConfigError(f"dtype={name!r} and overrides dtype={given!r} disagree; give one")
        overrides = {**(overrides or {}), "dtype": name}
    pf = preflight(trajectory, out_dir, seed=seed, overrides=overrides, config_path=config_path,
                   gguf=gguf)  # before torch is imported: seconds, no weights
    import torch

    from tangentlab import distributed
    from tangentlab.config import config_hash
    from tangentlab.empirical.loading.models import resolve_device, resolve_dtype
    from tangentlab.empirical.measurement import parallel
    from tangentlab.empirical.measurement.partial import PartialRun
    from tangentlab.runs import Timer

    world = distributed.ensure(device)  # one process, or one rank of torchrun / --nproc
    t_start = time.perf_counter()
    cfg, traj, cks = pf.cfg, pf.trajectory, list(pf.checkpoints)
    dev = world.device if world.distributed else resolve_device(device)
    dist = dict(parallel.world_record(world, dev), autocast=autocast or None, t_start=t_start)
    parallel.autocast(dev, autocast)  # a bad choice fails before any work
    resolve_dtype(cfg.dtype, dev)  # a dtype the device cannot run fails before loading
    from tangentlab.empirical.loading.data import split_halves
    from tangentlab.empirical.loading.integrity import check_trajectory, console_lines
    from tangentlab.measure.batch_test import VALIDATED_MIN_BATCHES
    from tangentlab.progress import log

    dist["integrity"] = check_trajectory(cks, on_duplicate=cfg.on_duplicate)
    for line in console_lines(dist["integrity"]):
        log(line)
    n_test = len(split_halves(cfg.n_batches, cfg.seed)[1])  # the test half the intervals resample
    if n_test < VALIDATED_MIN_BATCHES:
        log(f"warning: the intervals resample {n_test} test batches (n_batches={cfg.n_batches}); "
            f"their coverage is validated at >= {VALIDATED_MIN_BATCHES} (n_batches >= "
            f"{2 * VALIDATED_MIN_BATCHES}): read them as rough, the summary flags them")
    cks = dist["integrity"].kept
    timer = Timer()
    torch.manual_seed(cfg.seed)
    threads = cfg.threads or int(traj.train_config.get("threads", 0) or 0)
    partial = (PartialRun(out_dir, config_hash=config_hash(cfg), resume=resume,
                          checkpoints=[f"{c.name}@{c.step}" for c in cks])
               if world.is_main else parallel.NoPartial())  # rank 0 alone writes

    try:
        with precision_scope(cfg.stats_dtype, dev):  # checked for dev before any work
            _run(cfg, traj, cks, out_dir, trajectory, partial, dev, timer, threads,
                 on_checkpoint, world, dist, pf, figures=figures)
    except distributed.DistributedError:
        raise  # another rank stopped: like a kill, keep the partial folder for --resume
    except TangentlabError:
        partial.clear()  # bad input: no partial output (a kill or crash keeps it for resume)
        raise
    partial.clear()
    return Path(out_dir)


def _run(cfg: MeasureConfig, traj, cks, out_dir, trajectory, partial, dev: str, timer, threads,
         on_checkpoint, world, dist: dict, pf=None, *, figures: bool = True) -> None:
    """The body of :func:`measure_trajectory`: plan, measure each checkpoint, finish, write.

    On several ranks (``world``): checkpoint-parallel or data-parallel, see docs/scale.md; what
    the modes do apart lives in :mod:`tangentlab.empirical.measurement.modes`.
    """
    from tangentlab import distributed
    from tangentlab._runtime import single_blas_thread, torch_threads
    from tangentlab.empirical.measurement import parallel
    from tangentlab.empirical.measurement.metrics import aggregate_rows
    from tangentlab.empirical.measurement.modes import execution_mode
    from tangentlab.empirical.measurement.proxy_schedule import ProxySchedule
    from tangentlab.progress import progress
    from tangentlab.runs import RESULTS_NAME

    with single_blas_thread(), torch_threads(threads), parallel.autocast(dev, dist["autocast"]), \
            parallel.output_directory(out_dir, world) as tmp:
        setup = prepare(traj, cks, cfg, dev, timer, pf)
        t_measure = time.perf_counter()  # after the one-off set-up (imports, first model, data)
        schedule = ProxySchedule.plan([c.step for c in cks], rank=cfg.rank, seed=cfg.seed,
                                      fraction=cfg.fit_fraction, refit=cfg.refit,
                                      methods={s: p.spec for s, p in setup.proxies.items()})
        head = setup.first.head
        mode = execution_mode(world, setup, len(cks))  # everything the three modes do apart
        done = frozenset(i for i in range(len(cks)) if partial.has(i))  # resumed: not kept
        load = lambda ck: load_checkpoint(setup, ck, dev)  # noqa: E731
        # the fixed proxies, and the fit halves the pre-pass collected in full
        fixed, fit_cache = (mode.fixed_proxies(fixed_proxies, setup, schedule, cks, dev, timer,
                                               load, skip=done) if head else ({}, {}))
        ctx = _Context(cfg=cfg, traj=traj, setup=setup, schedule=schedule, fixed=fixed,
                       ones=ones_space(setup.d), dev=dev, timer=timer, fit_cache=fit_cache,
                       causal_idx=frozenset(spread_indices(len(cks), cfg.causal_checkpoints)
                                            if cfg.causal else ()))
        rows, ck_info, per_ck = [], [], []
        previous: dict[str, Any] = (mode.previous_refits(setup, schedule, fixed, cks, timer, load)
                                    if head and cfg.refit else {})
        for i in progress(mode.mine, desc="measure"):
            ck = cks[i]
            distributed.fault_point("measure_checkpoint", i)  # test hook (TANGENTLAB_FAULT)
            if mode.saved(partial, i):
                if not world.is_main:
                    continue
                got, info, per_site = partial.load(i)
            else:
                result = _measure_checkpoint(ctx, i, ck, previous, mode.share)
                if result is None:  # a rank other than 0 in data-parallel mode
                    continue
                got, info, per_site = result
                partial.save(i, got, info, per_site)
            rows += got
            ck_info.append(info)
            per_ck.append(per_site)
            previous = {s: per_site[s].get("refit") for s in setup.sites}
            if on_checkpoint is not None:
                on_checkpoint(i, ck.name)
        rows, ck_info, per_ck = mode.gather(rows, ck_info, per_ck)  # on rank 0, in order
        if not world.is_main:
            return
        with timer("metrics"):
            if len(cks) >= 2:
                for site in setup.sites:
                    tb = RowBase(model=traj.model_name, arch=setup.first.arch,
                                 checkpoint="trajectory", step=schedule.max_step,
                                 layer=layer_of(site), site=site, seed=cfg.seed)
                    rows += _trajectory_site_rows([p[site] for p in per_ck], setup, cfg, tb)
            rows += aggregate_rows(rows, cfg.early_fraction * schedule.max_step,
                                   schedule.max_step)
        scatter = {s: {c["step"]: p[s] for c, p in zip(ck_info, per_ck)} for s in setup.sites}
        integrity = dist.pop("integrity")
        t_start, t_end = dist.pop("t_start"), time.perf_counter()  # rank 0's clock
        dist.update(mode=mode.name, wall_s=round(t_end - t_start, 3),
                    measure_s=round(t_end - t_measure, 3))
        from tangentlab.empirical.bridge.run import maybe_write_bridge  # bridge.csv (issue 20)
        maybe_write_bridge(tmp, setup, cks, rows, cfg, timer, lambda ck: load_checkpoint(setup, ck, dev), traj)
        _write_outputs(tmp, rows, scatter, setup, schedule, cfg, trajectory, traj, ck_info,
                       dev, timer, RESULTS_NAME, dist, integrity, fixed, figures=figures)


def _write_outputs(tmp, rows, scatter, setup: Setup, schedule, cfg: MeasureConfig, trajectory,
                   traj, ck_info, dev, timer, results_name, distributed=None, integrity=None,
                   fixed=None, *, figures: bool = True) -> None:
    """results.csv, the two figures (unless ``figures`` is False) and manifest.json into ``tmp``.

    ``integrity``: the trajectory-integrity report; ``fixed``: {site: Q_T (d, r)}, for the
    manifest's record of each basis's atoms kept.
    """
    import torch

    from tangentlab.empirical.loading.sites import site_info, site_semantics
    from tangentlab.empirical.measurement.figures import enrichment_figure, frequency_figure
    from tangentlab.empirical.measurement.metrics import GEOMETRY_RULE
    from tangentlab.empirical.measurement.preflight import proxy_manifest
    from tangentlab.empirical.measurement.proxy_schedule import step_spans, weighted_median
    from tangentlab.runs import build_manifest, write_manifest, write_results

    first, sites, eval_data = setup.first, list(setup.sites), setup.eval_data
    if integrity is not None:  # checkpoint_integrity_warning(s) rows
        from tangentlab.empirical.loading.integrity import integrity_rows

        rows = rows + integrity_rows(integrity, RowBase(model=traj.model_name, arch=first.arch,
                                                        seed=cfg.seed))
    write_results(rows, tmp / results_name)
    with timer("figures"):
        if first.head and figures:
            enrichment_figure(rows, sites, tmp / "enrichment.png")
        if figures:  # drawing took about 12% of a quick twin simulation
            frequency_figure(scatter, sites, tmp / "frequency_distance.png")
    cut = cfg.early_fraction * schedule.max_step
    phases = {}
    for phase, steps, lo, hi in (
            ("early", [c["step"] for c in ck_info if 0 < c["step"] <= cut], 0.0, cut),
            ("late", [c["step"] for c in ck_info if c["step"] > cut], cut, schedule.max_step)):
        w = step_spans(steps, lo, hi) if steps else []
        phases[phase] = {"steps": steps, "weights": w,
                         "weighted_median_step": weighted_median(steps, w) if steps else None}
    manifest = build_manifest(
        kind="empirical/measure", config=cfg, seeds={"seed": cfg.seed}, device=dev,
        dtype=str(first.dtype).replace("torch.", ""),
        timings=timer.as_dict(),
        extra={
            "trajectory": str(trajectory), "model": traj.model_name, "arch": first.arch,
            "family": first.family, "has_lm_head": first.head,
            "activation_only": not first.head,
            "tie_embeddings": first.tie_embeddings, "hidden_size": setup.d,
            "checkpoints": ck_info,
            "sites": {s: {"semantics": site_semantics(first.model, s),
                          **site_info(first.model, s).to_dict()} for s in sites},
            "stored_dtype": str(first.stored_dtype).replace("torch.", ""),
            "statistics_dtype": resolve_precision(cfg.stats_dtype, dev).manifest(),
            "fit_window": schedule.manifest(),
            "early_late_cut_step": cut,
            "phases": phases,
            "split": eval_data.split_record(),
            "geometry": {"rule": GEOMETRY_RULE, "k": cfg.spread_k,
                         "excluded": "MLM-selected positions (masked, replaced or kept) and "
                                     "exclude_positions; fit half only"},
            "forced_direction_tol": cfg.forced_tol,
            "buckets": {"labels": eval_data.labels, "inner_edges_log1p_count":
                        [float(e) for e in eval_data.edges]},
            "frequency_source": eval_data.frequency_source, "corpus": setup.corpus,
            "eval_split": setup.eval_split,
            "proxies": proxy_manifest(setup.proxies, fixed or {}),
            "eval_tokens_per_checkpoint": int(sum(b.input_ids.numel() for b in eval_data.batches)),
            "seq_len": setup.seq_len, "torch_threads": torch.get_num_threads(),
            "distributed": distributed,
            "integrity": integrity.manifest() if integrity is not None else None,
        },
    )
    write_manifest(tmp, manifest)


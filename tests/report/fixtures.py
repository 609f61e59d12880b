"""Hand-made stage outputs for the report tests (test fixtures, not product output).

Each ``make_*`` function is a stage function (``func(ctx)``) that writes a small, hand-written
results table in the format the pillars write, so the report can be rendered and its verdict
rules exercised without running the real pillars.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tangentlab.pipeline.stages import Stage, StageContext
from tangentlab.runs import atomic_write_json, build_manifest, write_manifest, write_results


def make_theory(ctx: StageContext, *, fail: bool = False) -> None:
    ctx.output.mkdir(parents=True, exist_ok=True)
    ders = [
        {"name": "curvature-visibility", "passed": True, "checks": [
            {"name": "tangent variance", "kind": "symbolic", "passed": True, "residual": 0.0},
            {"name": "mc visibility", "kind": "monte-carlo", "passed": True, "residual": 0.012}]},
        {"name": "river-valley", "passed": not fail, "checks": [
            {"name": "hitting time", "kind": "numeric", "passed": not fail, "residual": 3e-9 if not fail else 0.4}]},
    ]
    atomic_write_json(ctx.output / "verify.json", {"seed": 0, "passed": not fail, "derivations": ders})
    checks = [{**c, "name": f"{d['name']}: {c['name']}"} for d in ders for c in d["checks"]]
    atomic_write_json(ctx.output / "checks.json", checks)
    write_results([{"experiment": "theory", "metric": "residual", "value": c["residual"]}
                   for c in checks], ctx.output / "results.csv")
    write_manifest(ctx.output, build_manifest(kind="theory/verify", config={}, seeds={"seed": 0}))


def make_synthetic(name: str, *, checks_pass: bool = True) -> Callable[[StageContext], None]:
    """A picklable stage function (the pipeline may run it in a worker process)."""
    from functools import partial

    return partial(_write_synthetic, name, checks_pass)


def _write_synthetic(name: str, checks_pass: bool, ctx: StageContext) -> None:
    ctx.output.mkdir(parents=True, exist_ok=True)
    rows = []
    for t in (0.05, 0.1, 0.2, 0.4):
        pred = t * t * 2.0 / 2.0
        rows.append({"experiment": name, "metric": "visibility", "value": pred * 1.03,
                     "ci_low": pred * 0.97, "ci_high": pred * 1.09, "prediction": pred,
                     "t": t, "manifold": "sphere"})
    for alpha in (0.0, 0.25, 0.5):
        pred = 1.0 / (1.0 + alpha)
        rows.append({"experiment": name, "metric": "attenuation", "value": pred + 0.01,
                     "prediction": pred, "alpha": alpha})
    write_results(rows, ctx.output / "results.csv")
    checks = [
        {"name": "visibility sphere", "description": "V(t) vs theory", "measured": 0.0412,
         "predicted": 0.04, "tolerance": 0.1, "passed": True, "detail": "",
         "error_kind": "relative"},
        {"name": "attenuation s=1.1", "description": "frequency attenuation factor",
         "measured": 0.64, "predicted": 0.66, "tolerance": 0.05, "passed": checks_pass, "detail": ""},
    ]
    atomic_write_json(ctx.output / "checks.json", checks)
    write_manifest(ctx.output, build_manifest(kind=f"synthetic/{name}", config={"x": 1},
                                              seeds={"seed": 0}))


def make_train(ctx: StageContext) -> None:
    for step in (0, 10):
        d = ctx.output / "checkpoints" / f"step_{step:06d}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"step": step}))
        (d / "model.safetensors").write_bytes(b"not real weights")
    write_manifest(ctx.output, build_manifest(kind="empirical/train", config={}, seeds={"seed": 0}))


def measure_rows(arch: str, *, enrich_last: float = 3.0, enrich0: float = 1.0,
                 rho_last: float = -0.4) -> list[dict]:
    rows = []
    for step in (0, 10, 100):
        e = enrich0 if step == 0 else enrich_last * (0.8 if step == 10 else 1.0)
        base = {"model": f"tiny-{arch}", "arch": arch, "checkpoint": f"step_{step:06d}", "step": step,
                "site": "blocks.1.resid_post"}
        rows += [
            {**base, "bucket": "all", "metric": "enrichment", "value": e},
            {**base, "bucket": "all", "metric": "enrichment_ci_low", "value": e * 0.9},
            {**base, "bucket": "all", "metric": "enrichment_ci_high", "value": e * 1.1},
            {**base, "bucket": "all", "metric": "p_value", "value": 1 / 21 if e > 1.5 else 0.4},
            {**base, "bucket": "all", "metric": "position", "value": 0.3},
            {**base, "bucket": "all", "metric": "delta_isoscore_tangent", "value": 0.2 if step else 0.05},
            {**base, "bucket": "all", "metric": "delta_isoscore_control_mean", "value": 0.05},
            {**base, "bucket": "all", "metric": "freq_distance_spearman",
             "value": rho_last if step else -0.05, "ci_low": (rho_last if step else -0.05) - 0.1,
             "ci_high": (rho_last if step else -0.05) + 0.1},
            {**base, "bucket": "all", "metric": "freq_distance_pearson", "value": rho_last},
            {**base, "bucket": "all", "metric": "ablation_loss_tangent", "value": 0.5},
            {**base, "bucket": "all", "metric": "ablation_loss_control_mean", "value": 0.1,
             "ci_low": 0.05, "ci_high": 0.15},
        ]
        for q in range(3):
            eb = e * (0.6 + 0.4 * q)  # q2 (most frequent) largest
            rows += [{**base, "bucket": f"q{q}", "metric": "enrichment", "value": eb,
                      "ci_low": eb * 0.95, "ci_high": eb * 1.05}]
    return rows


def make_measure(arch: str, **kw) -> Callable[[StageContext], None]:
    """A picklable stage function writing :func:`measure_rows`."""
    from functools import partial

    return partial(_write_measure, arch, kw)


def _write_measure(arch: str, kw: dict, ctx: StageContext) -> None:
    ctx.output.mkdir(parents=True, exist_ok=True)
    write_results(measure_rows(arch, **kw), ctx.output / "results.csv")
    write_manifest(ctx.output, build_manifest(kind="empirical/measure", config={"n_controls": 20},
                                              seeds={"seed": 0}, extra={"arch": arch}))


def failing(ctx: StageContext) -> None:
    raise RuntimeError("boom: hand-made failure")


def fixture_stages(*, fail_train_decoder: bool = False, theory_fail: bool = False) -> list[Stage]:
    """A stage list shaped like the real one, with hand-made outputs."""
    from functools import partial

    from tangentlab.pipeline.producers import check_output, run_producer
    from tangentlab.pipeline.reproduce import DEFAULT, producers

    table = {p.name: p for p in producers(DEFAULT)}  # the real output checks, on hand-made outputs

    def check(name: str):
        return partial(check_output, table[name])

    stages = [Stage("theory", partial(make_theory, fail=theory_fail), check=check("theory"))]
    for name in ("visibility", "gradient-ratio", "amplification", "proxy-recovery", "river-valley"):
        stages.append(Stage(f"synthetic/{name}", make_synthetic(name), check=check(f"synthetic/{name}")))
    for arch in ("encoder", "decoder"):
        func = failing if (fail_train_decoder and arch == "decoder") else make_train
        stages.append(Stage(f"train/{arch}", func, check=check(f"train/{arch}"), resumable=True))
    for arch in ("encoder", "decoder"):
        stages.append(Stage(f"measure/{arch}", make_measure(arch), check=check(f"measure/{arch}"),
                            depends=(f"train/{arch}",)))
    stages.append(Stage("report", partial(run_producer, table["report"]), output="report.html",
                        check=check("report"), after=tuple(s.name for s in stages), always=True))
    return stages


# ----------------------------------------------------------------- run directories written directly

def activation_only_rows(arch: str) -> list[dict]:
    """A model measured without gradients (no LM head): representation rows, no enrichment."""
    rows = []
    for step in (0, 10, 100):
        base = {"model": f"tiny-{arch}", "arch": arch, "checkpoint": f"step_{step:06d}", "step": step,
                "site": "blocks.1.resid_post", "bucket": "all"}
        rows += [{**base, "metric": "representation_isoscore_star", "value": 0.5 - step / 1000},
                 {**base, "metric": "freq_distance_spearman", "value": -0.2, "ci_low": -0.3, "ci_high": -0.1}]
    return rows


def trajectory_rows(name: str, enrich: dict[int, float], *, buckets: tuple[str, ...] = ("f1", "f2", "f3"),
                    site: str = "blocks.1.resid_post", band_columns: bool = False, half_width: float = 0.05,
                    late: tuple[float, float, float] | None = None) -> list[dict]:
    """A measurement's rows for one site: enrichment per step (CI +- ``half_width`` x value),
    p at its floor, the control band, and bucket rows (the last bucket the most frequent).

    ``band_columns`` writes the new ``band_low``/``band_high`` columns (so ``ci_*`` are CIs);
    ``late`` = (value, ci_low, ci_high) adds a late-window aggregate row.
    """
    rows = []
    for step, e in enrich.items():
        base = {"model": name, "arch": "decoder", "checkpoint": f"step_{step:06d}", "step": step,
                "site": site, "bucket": "all", "proxy": "fixed"}
        ctrl = {"metric": "energy_control_mean", "value": 0.2, "ci_low": 0.15, "ci_high": 0.25}
        if band_columns:
            ctrl = {"metric": "energy_control_mean", "value": 0.2, "ci_low": 0.19, "ci_high": 0.21,
                    "band_low": 0.15, "band_high": 0.25}
        rows += [
            {**base, "metric": "enrichment", "value": e, "ci_low": e * (1 - half_width),
             "ci_high": e * (1 + half_width)},
            {**base, "metric": "p_value", "value": 1 / 21},
            {**base, "metric": "control_enrichment_low", "value": 0.8},
            {**base, "metric": "control_enrichment_high", "value": 1.2},
            {**base, **ctrl},
        ]
        for i, b in enumerate(buckets):
            eb = e * (0.7 + 0.3 * i)
            rows.append({**base, "bucket": b, "metric": "enrichment", "value": eb, "ci_low": eb * 0.97,
                         "ci_high": eb * 1.03})
    if late is not None:
        v, lo, hi = late
        row = {"model": name, "arch": "decoder", "checkpoint": "late", "step": None, "site": site,
               "bucket": "all", "proxy": "fixed", "metric": "enrichment", "value": v, "ci_low": lo,
               "ci_high": hi}
        if band_columns:
            row.update(band_low=lo * 0.9, band_high=hi * 1.1)
        rows.append(row)
    return rows


#: The checkpoint schedule every hand-made measurement records (and its end-to-end run).
FIXTURE_STEPS = (0, 10, 100)


def write_measure_dir(path, rows: list[dict], *, n_controls: int = 20, extra: dict | None = None,
                      device: str = "cpu"):
    """A `tangentlab empirical measure`-style output directory: results.csv + manifest.json."""
    path.mkdir(parents=True, exist_ok=True)
    write_results(rows, path / "results.csv")
    config = {"n_controls": n_controls, "n_batches": 64, "batch_size": 4, "n_boot": 1000,
              "rank": 8}
    extra = {"hidden_size": 64, "eval_tokens_per_checkpoint": 64 * 4 * 64,
             "arch": next((str(r["arch"]) for r in rows if "arch" in r), "decoder"),
             "checkpoints": [{"step": s} for s in FIXTURE_STEPS], **(extra or {})}
    write_manifest(path, build_manifest(kind="empirical/measure", config=config,
                                        seeds={"seed": 0}, device=device, extra=extra))
    return path


def write_end_to_end_run(path, *, passed: bool = True, sims: int = 50, rows=None,
                         setting: dict | None = None):
    """A hand-made end-to-end validation run: every prediction row's checks ``passed`` (or not),
    at the setting of a hand-made measurement (:func:`write_measure_dir`: its batches, tokens,
    replicates and schedule; one unit; ``setting`` entries replace its fields)."""
    from tangentlab.report.verdicts import ROWS
    from tangentlab.validate.planted_scenarios import SCENARIOS

    path.mkdir(parents=True, exist_ok=True)
    keys = rows if rows is not None else [r.key for r in ROWS if r.section == "prediction"]
    checks = [{"name": f"{k} / {n}: {m}", "row": k, "null": n, "metric": m, "passed": passed,
               "measured": 0.0 if m.startswith("wrong") else 1.0, "ci_low": 0.0,
               "ci_high": 0.07 if m.startswith("wrong") else 1.0, "bound_checked": sims >= 45,
               "n": sims, "target": "", "detail": ""}
              for k in keys for n in ("no-effect", "effect")
              for m in (("wrong_supported", "wrong_not_supported") if n == "no-effect" else ("power",))]
    atomic_write_json(path / "checks.json", checks)
    full = {"name": "full", "sims": sims, "units": 1, "n_batches": 64, "batch_size": 4,
            "seq_len": 64, "tokens_per_checkpoint": 64 * 4 * 64, "n_boot": 1000,
            "steps": list(FIXTURE_STEPS), "early_fraction": 0.3,
            "rank_over_dim": [1e-6, 1.0], "scenarios": list(SCENARIOS),
            "scenarios_known": list(SCENARIOS), "bound_checked": sims >= 45}
    write_manifest(path, build_manifest(kind="validate/end-to-end", config={}, seeds={"seed": 0},
                                        extra={"setting": {**full, **(setting or {})}}))
    return path


def write_run(root, measures: dict[str, list[dict]], *, config: dict | None = None,
              measure_extra: dict[str, dict] | None = None, stages: dict[str, dict] | None = None,
              argv: list[str] | None = None, quick: bool = False, validated: bool = True):
    """A reproduce run directory written by hand: manifest with stage records, one measure stage
    per entry of ``measures`` (``measure/<name>``), and any extra ``stages`` records.

    ``validated``: also write a passing end-to-end run at ``validate/end-to-end`` (so the
    prediction rows read their raw verdicts; tests/report/test_gating.py tests the gating)."""
    root.mkdir(parents=True, exist_ok=True)
    if validated:
        write_end_to_end_run(root / "validate" / "end-to-end")
    records = {}
    for name, rows in measures.items():
        write_measure_dir(root / "measure" / name, rows, extra=(measure_extra or {}).get(name))
        records[f"measure/{name}"] = {"status": "done", "config_hash": "abc", "seconds": 1.5,
                                      "cpu_seconds": 1.25, "outputs": [f"measure/{name}"]}
    records.update(stages or {})
    manifest = build_manifest(kind="reproduce", config={"seed": 0, "quick": quick, **(config or {})},
                              seeds={"seed": 0}, device="auto")
    manifest.update(stages=records, stage_order=list(records), quick=quick)
    if argv is not None:
        manifest["argv"] = argv
    atomic_write_json(root / "manifest.json", manifest)
    return root

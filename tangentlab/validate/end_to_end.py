"""``tangentlab validate --end-to-end``: every prediction verdict on planted-truth trajectories.

Each simulation writes planted trajectories (:mod:`tangentlab.validate.planted_trajectories`,
one per unit of the row), measures each with the real protocol
(:func:`tangentlab.empirical.protocol.measure_trajectory`: ``make_batch`` windows on real eval
text, the fit/test split, the proxy schedule, collect, metrics, the causal check) and lets the
report decide: the measure folders are opened as ``measure/<unit>`` stages of a
:class:`~tangentlab.report.load.RunData` and the prediction rows of
:data:`tangentlab.report.verdicts.ROWS` are built by :func:`~tangentlab.report.verdicts.build_verdicts`
(the unit builders of :mod:`tangentlab.report.units`, the rules and ``combine()``). Nothing is
decided on a shortcut path.

Per (row, scenario) the run directory holds the rate of each status with its Wilson 95% interval,
the wrong-status rates the truth implies (:mod:`tangentlab.validate.planted_scenarios`) and a check:

- a wrong-"supported" or wrong-"not supported" rate passes when it is ≤ 0.05 **and** its upper
  Wilson bound is ≤ 0.08 (``bound_checked``); the bound needs at least 45 simulations with no
  error, so a quick run (few simulations) checks the point rate only and says so;
- power (P("supported") where the truth is positive) passes when it is ≥ 0.8.

:func:`validated_rows` reads a run directory back: per row, whether every check passed with its
bound checked (what the report's "validated end to end" rows need).
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError, DataError
from tangentlab.validate.end_to_end_config import SETTINGS, EndToEndConfig, EndToEndMeasure

__all__ = ["EndToEndConfig", "EndToEndMeasure", "SETTINGS", "END_TO_END_KIND", "SimulationResult", "simulate", "decide", "summarize",
           "write_end_to_end", "validated_rows", "WRONG_RATE_MAX", "WRONG_BOUND_MAX", "POWER_MIN",
           "STATUSES_NAME", "format_table", "read_statuses"]

WRONG_RATE_MAX = 0.05
WRONG_BOUND_MAX = 0.08
POWER_MIN = 0.8
#: Per-simulation statuses, one row per (scenario, simulation, row).
STATUSES_NAME = "statuses.csv"
_EXPERIMENT = "validate/end-to-end"
#: The manifest ``kind`` of an end-to-end validation run directory.
END_TO_END_KIND = _EXPERIMENT


@dataclass(frozen=True)
class SimulationResult:
    """One simulation's row statuses (row key → status word, and the combined reason)."""

    scenario: str
    sim: int
    statuses: dict[str, str]
    reasons: dict[str, str]
    seconds: float
    error: str = ""  #: why the simulation raised ("" when it ran); every row is then "not run"


def _seed(cfg: EndToEndConfig, name: str, sim: int, unit: int) -> int:
    import zlib

    return (cfg.seed * 1_000_003 + zlib.crc32(name.encode()) % 100_003 * 1009 + sim * 31
            + unit) % (2**31 - 1)


def decide(measure_dirs: Sequence[Path], run_dir: Path) -> dict[str, tuple[str, str]]:
    """The report's verdict on each prediction row, from stored measure folders.

    ``measure_dirs`` (inside ``run_dir``) become the done stages ``measure/u0``, ``measure/u1``…
    of a :class:`~tangentlab.report.load.RunData`; the rows are built by the report's own code.
    Returns row key → (status, reason).
    """
    from tangentlab.report.load import RunData
    from tangentlab.report.verdicts import ROWS, build_verdicts
    from tangentlab.runs import StageRecord
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    records = {f"measure/u{i}": StageRecord(name=f"measure/u{i}", status="done", config_hash="",
                                            outputs=(str(Path(d).relative_to(run_dir)),))
               for i, d in enumerate(measure_dirs)}
    data = RunData(run_dir=Path(run_dir), manifest={"kind": "reproduce"}, records=records)
    specs = [r for r in ROWS if r.key in PREDICTION_ROWS]
    return {v.key: (v.status, v.reason) for v in build_verdicts(data, specs)}


def simulate(cfg: EndToEndConfig, name: str, sim: int, text, work: Path) -> SimulationResult:
    """Write, measure and decide one simulation of scenario ``name`` under ``work``."""
    from tangentlab.empirical.protocol import measure_trajectory
    from tangentlab.validate.planted_scenarios import scenario
    from tangentlab.validate.planted_trajectories import PlantedSpec, write_trajectory

    t0 = time.perf_counter()
    sc = scenario(name)
    folder = work / name / f"sim{sim:03d}"
    folder.mkdir(parents=True, exist_ok=True)
    measures = []
    for unit in range(cfg.units):
        spec_kw = {"steps": tuple(cfg.steps), **sc.spec, "seed": _seed(cfg, name, sim, unit)}
        if sc.eval_budget_fraction > 0:
            spec_kw["eval_tokens"] = int(sc.eval_budget_fraction * cfg.budget_tokens())
        spec = PlantedSpec(**spec_kw)
        traj = write_trajectory(spec, folder / f"u{unit}-trajectory", text)
        ov = {"rank": spec.m, **cfg.measure, **sc.measure}
        out = folder / f"u{unit}-measure"
        measure_trajectory(traj, out, device="cpu", seed=_seed(cfg, name, sim, unit) % 10_007,
                           overrides=ov)
        shutil.rmtree(traj, ignore_errors=True)
        measures.append(out)
    verdicts = decide(measures, work)
    if not cfg.keep_measures:
        shutil.rmtree(folder, ignore_errors=True)
    return SimulationResult(name, sim, {k: v[0] for k, v in verdicts.items()},
                            {k: v[1] for k, v in verdicts.items()}, time.perf_counter() - t0)


def _simulate_or_record(cfg: EndToEndConfig, name: str, sim: int, text, work: Path
                        ) -> SimulationResult:
    """:func:`simulate`, or, when it raises, a result whose every row is "not run" with the error.

    One simulation that fails (a bug, a non-finite activation) must not cost the hours of the
    others: the run goes on, and :func:`summarize` fails its ``simulations`` check.
    """
    from tangentlab.report.rules import NOT_RUN
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    t0 = time.perf_counter()
    try:
        return simulate(cfg, name, sim, text, work)
    except Exception as exc:  # noqa: BLE001 - recorded, and the run's check fails
        why = f"error: {type(exc).__name__}: {exc}"
        shutil.rmtree(work / name / f"sim{sim:03d}", ignore_errors=True)
        return SimulationResult(name, sim, {r: NOT_RUN for r in PREDICTION_ROWS},
                                {r: why for r in PREDICTION_ROWS}, time.perf_counter() - t0,
                                error=why)


def _job(args):
    cfg, name, sim, text_path, work = args
    import pickle

    from tangentlab._runtime import torch_threads

    text = pickle.loads(Path(text_path).read_bytes())
    with torch_threads(1):
        return _simulate_or_record(cfg, name, sim, text, Path(work))


def _wilson(k: int, n: int) -> tuple[float, float]:
    from tangentlab.validate.battery import wilson_interval

    return wilson_interval(k, n)


def summarize(cfg: EndToEndConfig, results: Sequence[SimulationResult]):
    """(result rows, checks) from the simulations: rates with Wilson intervals, pass/fail."""
    from tangentlab.report.rules import NOT_SUPPORTED, STATUS_WORDS, SUPPORTED
    from tangentlab.validate.battery import BatteryCheck
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS, scenario

    bound = cfg.sims >= 45
    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for name in cfg.scenarios:
        sc = scenario(name)
        got = [r for r in results if r.scenario == name]
        n = len(got)
        for row in PREDICTION_ROWS:
            truth = sc.truth.get(row)
            statuses = [r.statuses.get(row, "not run") for r in got]
            base = {"experiment": _EXPERIMENT, "row": row, "null": name, "truth": truth or "",
                    "n": n, "seed": cfg.seed}
            for word in STATUS_WORDS:
                k = sum(s == word for s in statuses)
                lo, hi = _wilson(k, n)
                rows.append({**base, "metric": "rate_" + word.replace(" ", "_"),
                             "value": k / n if n else float("nan"), "ci_low": lo, "ci_high": hi})
            if truth is None:
                continue
            wanted = []
            if truth in ("null", "negative"):
                wanted.append(("wrong_supported", SUPPORTED))
            if truth in ("null", "positive"):
                wanted.append(("wrong_not_supported", NOT_SUPPORTED))
            for metric, word in wanted:
                k = sum(s == word for s in statuses)
                rate = k / n if n else float("nan")
                lo, hi = _wilson(k, n)
                rows.append({**base, "metric": metric, "value": rate, "ci_low": lo, "ci_high": hi})
                ok = rate <= WRONG_RATE_MAX and (not bound or hi <= WRONG_BOUND_MAX)
                target = (f"<= {WRONG_RATE_MAX:g}" + (f", Wilson upper <= {WRONG_BOUND_MAX:g}"
                                                     if bound else " (point rate only: too few "
                                                     "simulations for the Wilson bound)"))
                chk = BatteryCheck(name=f"{row} / {name}: {metric}", kind="end-to-end",
                                   measured=rate, target=target, low=None, high=WRONG_RATE_MAX,
                                   passed=bool(ok), n=n,
                                   detail=f"{k}/{n} wrong; Wilson 95% [{lo:.3f}, {hi:.3f}]")
                checks.append({**chk.to_dict(), "row": row, "null": name, "metric": metric,
                               "truth": truth, "ci_low": lo, "ci_high": hi,
                               "bound_checked": bound})
            if truth == "positive":
                k = sum(s == SUPPORTED for s in statuses)
                rate = k / n if n else float("nan")
                lo, hi = _wilson(k, n)
                rows.append({**base, "metric": "power", "value": rate, "ci_low": lo,
                             "ci_high": hi})
                chk = BatteryCheck(name=f"{row} / {name}: power", kind="end-to-end",
                                   measured=rate, target=f">= {POWER_MIN:g}", low=POWER_MIN,
                                   high=None, passed=bool(rate >= POWER_MIN), n=n,
                                   detail=f"{k}/{n} supported; Wilson 95% [{lo:.3f}, {hi:.3f}]")
                checks.append({**chk.to_dict(), "row": row, "null": name, "metric": "power",
                               "truth": truth, "ci_low": lo, "ci_high": hi,
                               "bound_checked": bound})
    failed = [r for r in results if r.error]
    checks.append({**BatteryCheck(
        name="simulations: every one ran", kind="end-to-end", measured=float(len(failed)),
        target="0 simulations raised", low=None, high=0.0, passed=not failed, n=len(results),
        detail=("; ".join(f"{r.scenario} #{r.sim}: {r.error}" for r in failed[:5])
                or "none raised")).to_dict(),
        "row": "", "null": "", "metric": "errors", "truth": "", "ci_low": float("nan"),
        "ci_high": float("nan"), "bound_checked": bound})
    return rows, checks


def _run_all(cfg: EndToEndConfig, text, work: Path, nproc: int,
             on_result: Callable[[SimulationResult], None] | None) -> list[SimulationResult]:
    jobs = [(name, sim) for name in cfg.scenarios for sim in range(cfg.sims)]
    out: list[SimulationResult] = []
    if nproc <= 1:
        for name, sim in jobs:
            res = _simulate_or_record(cfg, name, sim, text, work)
            out.append(res)
            if on_result:
                on_result(res)
        return out
    import multiprocessing as mp
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    text_path = work / "shared_text.pkl"
    text_path.write_bytes(pickle.dumps(text))
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=nproc, mp_context=ctx) as pool:
        for res in pool.map(_job, [(cfg, n, s, str(text_path), str(work)) for n, s in jobs]):
            out.append(res)
            if on_result:
                on_result(res)
    text_path.unlink(missing_ok=True)
    return out


def write_end_to_end(out_dir: str | Path, cfg: EndToEndConfig, *, quick: bool, nproc: int = 1,
                     on_result: Callable[[SimulationResult], None] | None = None
                     ) -> tuple[Path, bool]:
    """Run the end-to-end battery and write its run directory atomically.

    ``results.csv`` (long format: one row per (row, null, metric) with its Wilson interval),
    ``checks.json`` (one pass/fail per (row, null, criterion)), ``statuses.csv`` (one row per
    simulation and prediction row) and ``manifest.json``. Returns (path, every check passed).
    """
    from tangentlab.runs import (
        CHECKS_NAME,
        RESULTS_NAME,
        atomic_directory,
        atomic_write_json,
        build_manifest,
        write_manifest,
        write_results,
    )
    from tangentlab.validate.planted_trajectories import shared_text

    cfg.check()
    if nproc < 1:
        raise ConfigError(f"nproc must be >= 1; got {nproc}")
    out = Path(out_dir)
    t0 = time.perf_counter()
    with atomic_directory(out, kind=END_TO_END_KIND) as tmp:  # never replaces another kind
        work = tmp / "simulations"
        work.mkdir()
        text = shared_text(cfg.corpus, cfg.vocab_size, seed=0,
                           max_train_tokens=cfg.max_train_tokens)
        t_text = time.perf_counter() - t0
        results = _run_all(cfg, text, work, nproc, on_result)
        rows, checks = summarize(cfg, results)
        write_results(rows, tmp / RESULTS_NAME)
        write_results([{"metric": "status", "value": r.statuses[k], "null": r.scenario,
                        "sim": r.sim, "row": k, "reason": r.reasons[k],
                        "experiment": _EXPERIMENT} for r in results for k in r.statuses],
                      tmp / STATUSES_NAME)
        atomic_write_json(tmp / CHECKS_NAME, checks)
        if not cfg.keep_measures:
            shutil.rmtree(work, ignore_errors=True)
        sims_s = [r.seconds for r in results]
        manifest = build_manifest(
            kind=END_TO_END_KIND, config=cfg, seeds={"seed": cfg.seed}, device="cpu",
            dtype="float32",
            timings={"shared_text": t_text, "simulations": sum(sims_s),
                     "total": time.perf_counter() - t0},
            extra={"quick": bool(quick), "nproc": nproc, "setting": cfg.setting(),
                   "zipf_slope_train_split": text.zipf,
                   "seconds_per_simulation": (sum(sims_s) / len(sims_s)) if sims_s else None,
                   "checks_passed": sum(bool(c["passed"]) for c in checks),
                   "checks_total": len(checks),
                   "bound_checked": cfg.sims >= 45,
                   "targets": {"wrong_rate_max": WRONG_RATE_MAX,
                               "wrong_wilson_upper_max": WRONG_BOUND_MAX,
                               "power_min": POWER_MIN}})
        write_manifest(tmp, manifest)
    return out, all(bool(c["passed"]) for c in checks)


def read_statuses(run_dir: str | Path) -> list[SimulationResult]:
    """The simulations stored in a run directory's ``statuses.csv`` (to re-summarize them)."""
    from tangentlab.runs import read_results

    df = read_results(Path(run_dir) / STATUSES_NAME)
    out = []
    for (name, sim), g in df.groupby(["null", "sim"], sort=False):
        out.append(SimulationResult(str(name), int(sim), dict(zip(g["row"], g["value"])),
                                    dict(zip(g["row"], g["reason"].fillna(""))), float("nan")))
    return out


def validated_rows(run_dir: str | Path) -> dict[str, bool]:
    """Per prediction row: True when every end-to-end check of the row passed, bound checked.

    Reads ``checks.json`` of an end-to-end run directory. A row whose checks were judged on point
    rates only (a quick run), or that has no check, reads False; so does every row when a
    simulation raised (its ``errors`` check failed).
    """
    import json

    from tangentlab.runs import CHECKS_NAME
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    path = Path(run_dir) / CHECKS_NAME
    if not path.is_file():
        raise DataError(f"{str(path)!r} is missing; pass a directory written by "
                        "`tangentlab validate --end-to-end`")
    checks = json.loads(path.read_text())
    raised = any(c.get("metric") == "errors" and not c.get("passed") for c in checks)
    out = {}
    for row in PREDICTION_ROWS:
        if raised:  # a simulation that raised was never judged: no row is certified
            out[row] = False
            continue
        mine = [c for c in checks if c.get("row") == row]
        out[row] = bool(mine) and all(bool(c.get("passed")) and bool(c.get("bound_checked"))
                                      for c in mine)
    return out


def format_table(checks: Sequence[dict[str, Any]]) -> str:
    """The checks as a Markdown table (row, null, criterion, rate, Wilson 95%, n, pass)."""
    lines = ["| row | null | criterion | rate | Wilson 95% | n | result |",
             "|---|---|---|---|---|---|---|"]
    for c in checks:
        m = c.get("measured")
        rate = "n/a" if m is None or (isinstance(m, float) and math.isnan(m)) else f"{m:.3f}"
        lines.append(f"| {c['row']} | {c['null']} | {c['metric']} | {rate} | "
                     f"[{c['ci_low']:.3f}, {c['ci_high']:.3f}] | {c['n']} | "
                     f"{'pass' if c['passed'] else 'FAIL'} |")
    return "\n".join(lines)

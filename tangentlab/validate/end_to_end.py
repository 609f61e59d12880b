"""``tangentlab validate --end-to-end``: every prediction verdict on planted-truth trajectories.

Each simulation writes planted trajectories (:mod:`tangentlab.validate.planted_trajectories`,
one per unit of the row), measures each with the real protocol
(:func:`tangentlab.empirical.measurement.protocol.measure_trajectory`: ``make_batch`` windows on real eval
text, the fit/test split, the proxy schedule, collect, metrics, the causal check) and lets the
report decide: the measure folders are opened as ``measure/<unit>`` stages of a
:class:`~tangentlab.report.load.RunData` and the prediction rows of
:data:`tangentlab.report.verdicts.ROWS` are built by :func:`~tangentlab.report.verdicts.build_verdicts`
(the unit builders of :mod:`tangentlab.report.units`, the rules and ``combine()``). Nothing is
decided on a shortcut path.

The simulations are judged by :func:`tangentlab.validate.end_to_end_checks.summarize`: per
(row, scenario) the rate of each status with its Wilson 95% interval, the wrong-status rates the
truth implies (:mod:`tangentlab.validate.planted_scenarios`) and power, each with a check; per
row, the wrong "not supported" pooled over the nulls; the enrichment interval against the
planted truth.

The run directory is written in place, one atomic file at a time
(:mod:`tangentlab.validate.end_to_end_records`): its settings first, a record per simulation as
it finishes, then the summary, judged from the records in job order (the config's scenario
order, then simulation index), and ``manifest.json`` last. A kill loses only the simulations in
flight; ``resume=True`` (``--resume``) continues the run, reusing every record, and refuses a
directory written with another config or at another git commit. ``shard="K/N"`` runs one slice
of the jobs (:mod:`tangentlab.validate.end_to_end_config`) into its own directory, and
:mod:`tangentlab.validate.end_to_end_merge` assembles the shards into the run a single process
writes, byte for byte.

Which rows a run certifies is decided in one place, the report's gate
(:func:`tangentlab.report.gating.read_end_to_end`: per row, every check passed with its bound
checked, and no simulation raised).
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError
from tangentlab.validate.end_to_end_checks import (
    EXPERIMENT,
    POWER_MIN,
    WRONG_BOUND_MAX,
    WRONG_RATE_MAX,
    summarize,
)
from tangentlab.validate.end_to_end_config import (
    SETTINGS,
    EndToEndConfig,
    EndToEndMeasure,
    Extension,
    Shard,
)
from tangentlab.validate.end_to_end_records import (
    SIMULATIONS_DIR,
    STATUSES_NAME,
    UNIT_ENRICHMENT,
    SimulationResult,
    format_table,
    read_statuses,
    record_path,
)

__all__ = ["EndToEndConfig", "EndToEndMeasure", "SETTINGS", "END_TO_END_KIND",
           "END_TO_END_SHARD_KIND", "SimulationResult", "Shard", "simulate", "decide", "summarize",
           "write_end_to_end", "write_summary", "WRONG_RATE_MAX",
           "WRONG_BOUND_MAX", "POWER_MIN", "STATUSES_NAME", "format_table", "read_statuses",
           "worker_pool"]

_EXPERIMENT = EXPERIMENT
#: The manifest ``kind`` of an end-to-end validation run directory.
END_TO_END_KIND = _EXPERIMENT
#: The manifest ``kind`` of one finished shard (``--shard K/N``): records, no summary.
END_TO_END_SHARD_KIND = _EXPERIMENT + "-shard"


def _seed(cfg: EndToEndConfig, name: str, sim: int, unit: int) -> int:
    import zlib

    return (cfg.seed * 1_000_003 + zlib.crc32(name.encode()) % 100_003 * 1009 + sim * 31
            + unit) % (2**31 - 1)


def _run_data(measure_dirs: Sequence[Path], run_dir: Path):
    """The measure folders as the stages of a :class:`~tangentlab.report.load.RunData`.

    ``measure_dirs`` (inside ``run_dir``) become the done stages ``measure/u0``, ``measure/u1``…
    of the object the report reads.
    """
    from tangentlab.report.load import RunData
    from tangentlab.runs import StageRecord

    records = {f"measure/u{i}": StageRecord(name=f"measure/u{i}", status="done", config_hash="",
                                            outputs=(str(Path(d).relative_to(run_dir)),))
               for i, d in enumerate(measure_dirs)}
    return RunData(run_dir=Path(run_dir), manifest={"kind": "reproduce"}, records=records)


def decide(measure_dirs: Sequence[Path], run_dir: Path) -> dict[str, tuple[str, str]]:
    """The report's verdict on each prediction row, from stored measure folders.

    The rows are built by the report's own code from :func:`_run_data`. Returns row key →
    (status, reason).
    """
    return _decide(_run_data(measure_dirs, run_dir))


def _decide(data) -> dict[str, tuple[str, str]]:
    from tangentlab.report.verdicts import ROWS, build_verdicts
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    specs = [r for r in ROWS if r.key in PREDICTION_ROWS]
    return {v.key: (v.status, v.reason) for v in build_verdicts(data, specs)}


def enrichment_intervals(measure_dirs: Sequence[Path], run_dir: Path
                         ) -> tuple[tuple[float | None, float | None, float | None], ...]:
    """Per unit, site and checkpoint, the enrichment (value, CI low, CI high), in step order.

    The test the enrichment row reads (:func:`tangentlab.report.units.energy_source`: the
    reachable or constrained test where gradients are forced, else the plain one), read through
    the report's own tables at every checkpoint (the row reads the last and step 0; the
    coverage check needs them all: at the standard setting one interval per unit could not
    tell an interval half as wide from a right one); None for a missing or non-finite number.
    """
    return _intervals(_run_data(measure_dirs, run_dir))


def _intervals(data) -> tuple[tuple[float | None, float | None, float | None], ...]:
    from tangentlab.report.units import energy_source
    from tangentlab.report.verdicts import measure_stages, models

    def num(x):
        return float(x) if x is not None and math.isfinite(x) else None

    out = []
    for model in models(data, measure_stages(data)):
        for site in model.table.sites("enrichment"):
            src = energy_source(model, site)
            for step in src.table.steps(src.enrichment, site):
                e = src.table.get(src.enrichment, site=site, step=step)
                out.append((num(e.value), num(e.ci_low), num(e.ci_high)))
    return tuple(out)


def simulate(cfg: EndToEndConfig, name: str, sim: int, text, work: Path) -> SimulationResult:
    """Write, measure and decide one simulation of scenario ``name`` under ``work``."""
    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.validate.mutants import mutant
    from tangentlab.validate.planted_scenarios import scenario
    from tangentlab.validate.planted_trajectories import write_trajectory

    t0 = time.perf_counter()
    sc = scenario(name)
    folder = work / name / f"sim{sim:03d}"
    shutil.rmtree(folder, ignore_errors=True)  # what a killed attempt at it left
    folder.mkdir(parents=True)
    measures = []
    for unit in range(cfg.units):
        spec_kw = {"steps": tuple(cfg.steps), "seed": _seed(cfg, name, sim, unit),
                   "arch": cfg.arch(unit)}
        if sc.eval_budget_fraction > 0:
            spec_kw["eval_tokens"] = int(sc.eval_budget_fraction * cfg.budget_tokens())
        spec = cfg.planted_spec(name, **spec_kw)
        traj = write_trajectory(spec, folder / f"u{unit}-trajectory", text)
        ov = {"rank": spec.m, **cfg.measure, **sc.measure}
        out = folder / f"u{unit}-measure"
        with mutant(cfg.mutant):  # "" (the default): nothing patched
            measure_trajectory(traj, out, device="cpu",
                               seed=_seed(cfg, name, sim, unit) % 10_007, overrides=ov,
                               figures=False)
        shutil.rmtree(traj, ignore_errors=True)
        measures.append(out)
    with mutant(cfg.mutant):  # the measure folders are read once, for both
        data = _run_data(measures, work)
        verdicts, intervals = _decide(data), _intervals(data)
    if not cfg.keep_measures:
        shutil.rmtree(folder, ignore_errors=True)
    return SimulationResult(name, sim, {k: v[0] for k, v in verdicts.items()},
                            {k: v[1] for k, v in verdicts.items()}, time.perf_counter() - t0,
                            enrichment_intervals=intervals)


def _simulate_or_record(cfg: EndToEndConfig, name: str, sim: int, text, work: Path
                        ) -> SimulationResult:
    """:func:`simulate`, or, when it raises, a result whose every row is "not run" with the error.

    One simulation that fails (a bug, a non-finite activation) must not cost the hours of the
    others: the run goes on, and :func:`summarize` fails its ``simulations`` check.
    """
    from tangentlab.claims.rules import NOT_RUN
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


def _simulate_and_record(cfg: EndToEndConfig, name: str, sim: int, text, out: Path,
                         settings: dict[str, Any]) -> SimulationResult:
    """:func:`_simulate_or_record` under ``out/simulations``, then its record, written atomically."""
    from tangentlab.validate.end_to_end_records import write_record

    res = _simulate_or_record(cfg, name, sim, text, out / SIMULATIONS_DIR)
    write_record(out, res, settings)
    return res


def _job(args):
    cfg, name, sim, text_path, out, settings = args
    import pickle

    from tangentlab._runtime import torch_threads

    text = pickle.loads(Path(text_path).read_bytes())
    with torch_threads(1):
        return _simulate_and_record(cfg, name, sim, text, Path(out), settings)


def _run_all(cfg: EndToEndConfig, text, out: Path, todo: Sequence[tuple[str, int]],
             settings: dict[str, Any], nproc: int,
             on_result: Callable[[SimulationResult], None] | None) -> None:
    """Run the simulations ``todo``; each writes its own record under ``out`` as it finishes.

    With ``nproc`` > 1 they run in spawned worker processes (at most one per simulation), which
    write their records themselves, so that a kill of this process loses only the simulations
    in flight. ``on_result`` sees each result after its record is written.
    """
    workers = min(nproc, len(todo))
    if workers <= 1:
        for name, sim in todo:
            res = _simulate_and_record(cfg, name, sim, text, out, settings)
            if on_result:
                on_result(res)
        return
    import pickle
    from concurrent.futures import as_completed

    text_path = out / SIMULATIONS_DIR / ".shared_text.pkl"
    text_path.parent.mkdir(parents=True, exist_ok=True)  # a fresh run has no record yet
    text_path.write_bytes(pickle.dumps(text))
    pool = worker_pool(workers)
    try:
        futures = [pool.submit(_job, (cfg, n, s, str(text_path), str(out), settings))
                   for n, s in todo]
        for fut in as_completed(futures):
            res = fut.result()
            if on_result:
                on_result(res)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a running simulation still records
        text_path.unlink(missing_ok=True)


def worker_pool(workers: int):
    """A pool of ``workers`` spawned processes for the simulations, each tied to this process.

    Every worker asks for the parent-death signal first
    (:func:`tangentlab._runtime.die_with_parent`), so a killed run leaves no simulation running on behind it (before, its workers went on and
    wrote records into a run that had stopped); the simulation in flight is lost, as promised.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from tangentlab._runtime import die_with_parent

    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                               initializer=die_with_parent)


def _open_run(out: Path, fresh: dict[str, Any], *, resume: bool) -> dict[str, Any]:
    """The settings ``out`` is run under (call it under the run lock).

    ``fresh`` ones, written into a new or empty folder; or, with ``resume``, the stored ones of
    the end-to-end run there, when its fingerprint and shard match ``fresh``.

    Refused: an existing end-to-end run without ``resume`` (OutputPathError); one written with
    another config, commit, shard or extension (ConfigError); anything :func:`check_output_dir` refuses.
    A resumed run loses its manifest first: it is unfinished again until the summary is rewritten.
    """
    from tangentlab.errors import OutputPathError
    from tangentlab.runs import MANIFEST_NAME, check_output_dir, run_kind
    from tangentlab.validate.end_to_end_records import (
        is_end_to_end_dir,
        read_settings,
        settings_mismatch,
        state_text,
        write_settings,
    )

    if is_end_to_end_dir(out):
        stored = read_settings(out)
        if not resume:
            raise OutputPathError(f"--out {str(out)!r} already holds an end-to-end run "
                                  f"({state_text(out, stored)}); pass --resume to continue it, "
                                  "or choose a new --out")
        why = settings_mismatch(stored, fresh)
        for key in ("shard", "extension"):
            if why is None and stored.get(key) != fresh.get(key):
                why = f"{key} ({stored.get(key) or 'none'} vs {fresh.get(key) or 'none'})"
        if why is not None:
            raise ConfigError(f"cannot resume {str(out)!r}: the directory's settings and this "
                              f"run's differ in {why}; rerun with the settings it was written "
                              "with, or choose a new --out")
        (out / MANIFEST_NAME).unlink(missing_ok=True)
        return stored
    if run_kind(out) == END_TO_END_KIND:
        raise OutputPathError(f"--out {str(out)!r} holds an end-to-end run written without "
                              "simulation records; it can be neither resumed nor replaced in "
                              "place; choose a new --out")
    check_output_dir(out, kind=END_TO_END_KIND, existing="refuse")
    out.mkdir(parents=True, exist_ok=True)
    write_settings(out, fresh)
    return fresh


def write_end_to_end(out_dir: str | Path, cfg: EndToEndConfig, *, quick: bool, nproc: int = 1,
                     on_result: Callable[[SimulationResult], None] | None = None,
                     resume: bool = False, shard: str | Shard | None = None,
                     extension: str | Extension | None = None) -> tuple[Path, bool]:
    """Run the end-to-end battery (or one shard of it) into ``out_dir``, one record at a time.

    The layout is :mod:`tangentlab.validate.end_to_end_records`'s: the settings file first, one
    record per finished simulation, then the summary (:func:`write_summary`: ``results.csv``,
    ``statuses.csv``, ``checks.json``) from the records in job order, and ``manifest.json``
    last. ``resume`` continues the run in ``out_dir`` (a new or empty folder starts one),
    reusing every record; ``shard`` (``"K/N"``) runs only that slice of the jobs
    (:class:`~tangentlab.validate.end_to_end_config.Shard`) and writes records and a shard
    manifest, no summary (``tangentlab validate merge`` judges the shards together).
    ``extension`` (``"FIRST:LAST@A,B"``, :class:`~tangentlab.validate.end_to_end_config.
    Extension`) runs more simulations of some scenarios instead of the config's own (sharded
    too, if asked); it is finished like a shard, and merged with the base run.

    Returns (path, every check passed); for a shard or an extension, (path, no simulation
    raised).
    """
    from tangentlab.runs import check_output_dir, remove_partials, run_kind, run_lock
    from tangentlab.validate.end_to_end_config import jobs
    from tangentlab.validate.end_to_end_records import (
        is_end_to_end_dir,
        read_records,
        settings_for,
        write_settings,
    )

    cfg.check()
    if nproc < 1:
        raise ConfigError(f"nproc must be >= 1; got {nproc}")
    part = Shard.parse(shard) if isinstance(shard, str) else shard
    ext = Extension.parse(extension) if isinstance(extension, str) else extension
    every = ext.jobs(cfg) if ext is not None else jobs(cfg)
    mine = part.take(every) if part is not None else every
    out = Path(out_dir)
    if not is_end_to_end_dir(out) and run_kind(out) != END_TO_END_KIND:
        check_output_dir(out, kind=END_TO_END_KIND, existing="refuse")  # before the lock too
    t0 = time.perf_counter()
    with run_lock(out, command="validate --end-to-end"):
        fresh = settings_for(cfg, shard=None if part is None else str(part), quick=quick,
                             jobs=len(mine), extension=None if ext is None else str(ext))
        settings = _open_run(out, fresh, resume=resume)
        remove_partials(out.parent, name=out.name)  # what an atomic write of old left beside it
        todo = [j for j in mine if not record_path(out, *j).is_file()]
        read_records(out, [j for j in mine if j not in todo], settings)  # bad ones: refused now
        timings = {"shared_text": 0.0}
        if todo:
            text = _shared_text(cfg)
            timings["shared_text"] = time.perf_counter() - t0
            if settings.get("zipf_slope_train_split") is None:
                settings = {**settings, "zipf_slope_train_split": text.zipf}
                write_settings(out, settings)
            _run_all(cfg, text, out, todo, settings, nproc, on_result)
        results = read_records(out, mine, settings)
        timings["total"] = time.perf_counter() - t0
        extra = {"nproc": nproc, "simulations_run": len(todo),
                 "simulations_reused": len(mine) - len(todo)}
        if part is not None or ext is not None:
            return out, _finish_shard(out, cfg, settings, results, timings=timings, extra=extra)
        return out, write_summary(out, cfg, settings, results, timings=timings, extra=extra)


def _shared_text(cfg: EndToEndConfig):
    from tangentlab.validate.planted_trajectories import shared_text

    return shared_text(cfg.corpus, cfg.vocab_size, seed=0, max_train_tokens=cfg.max_train_tokens)


def _status_rows(results: Sequence[SimulationResult]) -> list[dict[str, Any]]:
    """The rows of ``statuses.csv``: one ``status`` per (simulation, prediction row).

    Then one ``unit_enrichment`` row per (simulation, unit interval): ``layer`` is the
    interval's index, and a missing number is an empty cell.
    """
    out: list[dict[str, Any]] = []
    for r in results:
        out += [{"metric": "status", "value": r.statuses[k], "null": r.scenario, "sim": r.sim,
                 "row": k, "reason": r.reasons[k], "experiment": _EXPERIMENT}
                for k in r.statuses]
        out += [{"metric": UNIT_ENRICHMENT, "value": v, "ci_low": lo, "ci_high": hi,
                 "null": r.scenario, "sim": r.sim, "row": "enrichment", "layer": i,
                 "experiment": _EXPERIMENT}
                for i, (v, lo, hi) in enumerate(r.enrichment_intervals)]
    return out


def write_summary(out: Path, cfg: EndToEndConfig, settings: dict[str, Any],
                  results: Sequence[SimulationResult], *, timings: dict[str, float],
                  extra: dict[str, Any]) -> bool:
    """Judge ``results`` (every simulation of ``cfg``, in job order) and write the summary.

    ``results.csv`` (long format: one row per (row, null, metric) with its Wilson interval),
    ``statuses.csv`` (one row per simulation and prediction row), ``checks.json`` (one
    pass/fail per (row, null, criterion)), then ``manifest.json`` last (``extra`` added to it).
    Returns whether every check passed.
    """
    from tangentlab.runs import (
        CHECKS_NAME,
        RESULTS_NAME,
        atomic_write_json,
        build_manifest,
        write_manifest,
        write_results,
    )

    rows, checks = summarize(cfg, results)
    write_results(rows, out / RESULTS_NAME)
    write_results(_status_rows(results), out / STATUSES_NAME)
    atomic_write_json(out / CHECKS_NAME, checks)
    sims_s = [r.seconds for r in results]
    manifest = build_manifest(
        kind=END_TO_END_KIND, config=cfg, seeds={"seed": cfg.seed}, device="cpu",
        dtype="float32", timings={**timings, "simulations": sum(sims_s)},
        extra={"quick": bool(settings.get("quick")), "setting": cfg.setting(),
               "zipf_slope_train_split": settings.get("zipf_slope_train_split"),
               "simulations_git": settings["git"],
               "seconds_per_simulation": (sum(sims_s) / len(sims_s)) if sims_s else None,
               "checks_passed": sum(bool(c["passed"]) for c in checks),
               "checks_total": len(checks), "bound_checked": cfg.sims >= 45,
               "targets": {"wrong_rate_max": WRONG_RATE_MAX,
                           "wrong_wilson_upper_max": WRONG_BOUND_MAX, "power_min": POWER_MIN},
               **extra})
    write_manifest(out, manifest)
    return all(bool(c["passed"]) for c in checks)


def _finish_shard(out: Path, cfg: EndToEndConfig, settings: dict[str, Any],
                  results: Sequence[SimulationResult], *, timings: dict[str, float],
                  extra: dict[str, Any]) -> bool:
    """A finished shard's ``manifest.json`` (kind :data:`END_TO_END_SHARD_KIND`; no checks)."""
    from tangentlab.runs import build_manifest, write_manifest

    sims_s = [r.seconds for r in results]
    errors = [f"{r.scenario} #{r.sim}" for r in results if r.error]
    write_manifest(out, build_manifest(
        kind=END_TO_END_SHARD_KIND, config=cfg, seeds={"seed": cfg.seed}, device="cpu",
        dtype="float32", timings={**timings, "simulations": sum(sims_s)},
        extra={"shard": settings["shard"], "quick": bool(settings.get("quick")),
               **({"extension": settings["extension"]} if settings.get("extension") else {}),
               "setting": cfg.setting(), "simulations": len(results), "errors": errors,
               "simulations_git": settings["git"], **extra}))
    return not errors

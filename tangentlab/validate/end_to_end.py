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

import dataclasses
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.config import Config, check_config, config_from_mapping, config_to_dict, option
from tangentlab.errors import ConfigError, DataError

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


_MEASURE_KEYS = ("sites", "n_batches", "batch_size", "seq_len", "n_boot", "rank", "sample_rows",
                 "control_pool", "n_controls", "causal_checkpoints", "causal_controls",
                 "causal_batches", "interval", "threads")


@dataclass(frozen=True)
class EndToEndMeasure(Config, Mapping):
    """The ``measure`` settings every simulation of an end-to-end run shares.

    A field left at ``None`` is not overridden: the measurement's own default applies (for
    ``rank``: the scenario's planted rank). The object reads as a mapping of the fields that
    are set (``{**cfg.measure}`` gives the measure overrides), so it goes straight to
    :func:`tangentlab.empirical.protocol.measure_trajectory`. The bounds are those of
    :class:`tangentlab.empirical.measure_config.MeasureConfig`.

    Attributes:
        sites: the sites measured.
        n_batches, batch_size, seq_len: the eval windows per checkpoint (``seq_len`` 0 or None:
            the planted model's 64).
        n_boot: bootstrap replicates of every interval.
        rank: the proxy rank (None: each scenario's planted rank).
        sample_rows, control_pool, n_controls: rows and controls of the energy test.
        causal_checkpoints, causal_controls, causal_batches: the causal check.
        interval: the interval method.
        threads: torch threads per measurement.
    """

    sites: tuple[str, ...] | None = option(("blocks.-1.resid_post",), min_len=1, unique=True)
    n_batches: int | None = option(64, ge=4, integer=True)
    batch_size: int | None = option(4, ge=1, integer=True)
    seq_len: int | None = option(None, ge=0, integer=True)
    n_boot: int | None = option(1000, ge=2, integer=True)
    rank: int | None = option(None, ge=1, integer=True)
    sample_rows: int | None = option(4096, ge=16, integer=True)
    control_pool: int | None = option(None, ge=1, integer=True)
    n_controls: int | None = option(None, ge=1, integer=True)
    causal_checkpoints: int | None = option(2, ge=1, integer=True)
    causal_controls: int | None = option(None, ge=1, integer=True)
    causal_batches: int | None = option(8, ge=1, integer=True)
    interval: str | None = option(None, choices=(None, "studentized", "bootstrap", "bca",
                                                 "jackknife"))
    threads: int | None = option(1, ge=0, integer=True)

    def _set(self) -> list[str]:
        return [k for k in _MEASURE_KEYS if getattr(self, k) is not None]

    def __getitem__(self, key: str) -> Any:
        """The value of a set field (KeyError for a field left at None or an unknown key)."""
        if key not in _MEASURE_KEYS or getattr(self, key) is None:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        """The names of the fields that are set."""
        return iter(self._set())

    def __len__(self) -> int:
        """How many fields are set."""
        return len(self._set())


def _scenario_names() -> tuple[str, ...]:
    from tangentlab.validate.planted_scenarios import SCENARIOS

    return tuple(SCENARIOS)


@dataclass(frozen=True)
class EndToEndConfig(Config):
    """Settings of the end-to-end battery (the defaults are the full setting, :meth:`full`).

    ``quick()`` runs in the test suite (inside the quick reproduce), ``standard()`` in a default
    reproduce, ``full()`` (the defaults) certifies. Bounds are declared on the fields; a bad
    value is a ConfigError naming the key, the bound and the value.

    Attributes:
        seed: master seed.
        scenarios: names from :data:`tangentlab.validate.planted_scenarios.SCENARIOS`.
        sims: simulations per scenario.
        units: independent planted trajectories per simulation (the units a row combines).
        steps: checkpoint steps of every trajectory (increasing, from 0).
        measure: the measure settings shared by every simulation (:class:`EndToEndMeasure`).
        vocab_size, corpus, max_train_tokens: the shared text (BPE size, built-in corpus,
            training-split tokens counted).
        keep_measures: keep every measure folder under ``simulations/`` (for re-deciding).
    """

    seed: int = option(0, ge=0, integer=True)
    scenarios: tuple[str, ...] = option(_scenario_names(), min_len=1, unique=True,
                                        choices=_scenario_names())
    sims: int = option(50, ge=1, integer=True)
    units: int = option(2, ge=1, integer=True)
    steps: tuple[int, ...] = option((0, 10, 20, 30, 45, 60, 80, 100), ge=0, integer=True,
                                    min_len=2, unique=True)
    measure: EndToEndMeasure = dataclasses.field(default_factory=EndToEndMeasure)
    vocab_size: int = option(512, ge=64, integer=True)
    corpus: str = option("wikipedia", choices=("wikipedia", "bible", "shakespeare"))
    max_train_tokens: int = option(400_000, ge=1000, integer=True)
    keep_measures: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.measure, Mapping) and not isinstance(self.measure, EndToEndMeasure):
            object.__setattr__(self, "measure", config_from_mapping(
                EndToEndMeasure, {**config_to_dict(EndToEndMeasure()), **self.measure},
                where="measure"))
        super().__post_init__()

    def relations(self) -> list[tuple[bool, str]]:
        """The steps start at 0 and increase."""
        steps = list(self.steps)
        return [(steps[0] == 0 and steps == sorted(steps),
                 f"config key 'steps' must start at 0 and increase; got {steps}")]

    @classmethod
    def full(cls, seed: int = 0) -> EndToEndConfig:
        """Every scenario, 50 simulations of 2 units each, 64 eval batches of 4 × 64 tokens."""
        return cls(seed=seed)

    @classmethod
    def standard(cls, seed: int = 0) -> EndToEndConfig:
        """Every scenario, 4 simulations of one unit, 6 checkpoints, the quick measure settings.

        Wide intervals (4 simulations per scenario): a screen of which (row, null) pairs fail,
        not a certificate.
        """
        quick = cls.quick(seed)
        return dataclasses.replace(quick, scenarios=_scenario_names(), sims=4,
                                   steps=(0, 10, 20, 30, 60, 100), keep_measures=False)

    @classmethod
    def quick(cls, seed: int = 0) -> EndToEndConfig:
        """Three scenarios, one simulation of one unit, 3 checkpoints, 16 eval batches.

        Its rates rest on one simulation each: their Wilson intervals are wide, and its checks
        judge the point rates only (nothing is certified).
        """
        from tangentlab.validate.planted_scenarios import QUICK_SCENARIOS

        return cls(seed=seed, scenarios=QUICK_SCENARIOS, sims=1, units=1, steps=(0, 30, 100),
                   max_train_tokens=100_000, keep_measures=True, measure=EndToEndMeasure(
                       n_batches=16, batch_size=4, n_boot=200, sample_rows=1024,
                       control_pool=100, causal_checkpoints=2, causal_batches=4, threads=1))

    @classmethod
    def preset(cls, name: str, seed: int = 0) -> EndToEndConfig:
        """The named setting: ``quick``, ``standard`` or ``full`` (ConfigError for another)."""
        if name not in SETTINGS:
            raise ConfigError(f"end-to-end setting must be one of {', '.join(SETTINGS)}; "
                              f"got {name!r}")
        return getattr(cls, name)(seed)

    def setting_name(self) -> str:
        """``quick``, ``standard`` or ``full`` when this is that preset (any seed), else ``custom``."""
        for name in SETTINGS:
            if dataclasses.replace(self, seed=0) == getattr(type(self), name)(0):
                return name
        return "custom"

    def check(self) -> None:
        """ConfigError for settings that cannot run (the bounds are checked on creation)."""
        check_config(self)

    def seq_len(self) -> int:
        """The eval window length (the measure's ``seq_len``, else the planted model's 64)."""
        from tangentlab.validate.planted_trajectories import PlantedSpec

        return int(self.measure.seq_len or PlantedSpec().seq_len)

    def budget_tokens(self) -> int:
        """Tokens the eval windows read per checkpoint (n_batches × batch_size × seq_len)."""
        m = self.measure
        return int(m.get("n_batches", 64)) * int(m.get("batch_size", 4)) * self.seq_len()

    def setting(self) -> dict[str, Any]:
        """What the report compares against a run's measure settings (the manifest's ``setting``).

        The eval batches, tokens per checkpoint and bootstrap replicates every simulation used,
        the range of r/d its scenarios measured at, the simulations and units, the scenarios
        run and the scenarios known.
        """
        from tangentlab.validate.planted_scenarios import scenario
        from tangentlab.validate.planted_trajectories import PlantedSpec

        rds = []
        for name in self.scenarios:
            sc = scenario(name)
            spec = PlantedSpec(**{k: v for k, v in sc.spec.items()
                                  if k in {f.name for f in dataclasses.fields(PlantedSpec)}})
            rank = sc.measure.get("rank", self.measure.rank or spec.m)
            rds.append(rank / spec.d)
        return {"name": self.setting_name(), "sims": self.sims, "units": self.units,
                "n_batches": int(self.measure.get("n_batches", 64)),
                "batch_size": int(self.measure.get("batch_size", 4)), "seq_len": self.seq_len(),
                "tokens_per_checkpoint": self.budget_tokens(),
                "n_boot": int(self.measure.get("n_boot", 1000)),
                "rank_over_dim": [min(rds), max(rds)], "scenarios": list(self.scenarios),
                "scenarios_known": list(_scenario_names()), "bound_checked": self.sims >= 45}


#: The named end-to-end settings, weakest first.
SETTINGS = ("quick", "standard", "full")


@dataclass(frozen=True)
class SimulationResult:
    """One simulation's row statuses (row key → status word, and the combined reason)."""

    scenario: str
    sim: int
    statuses: dict[str, str]
    reasons: dict[str, str]
    seconds: float


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


def _job(args):
    cfg, name, sim, text_path, work = args
    import pickle

    import tangentlab.validate.planted  # noqa: F401  (registers the family in a fresh worker)
    from tangentlab._runtime import torch_threads

    text = pickle.loads(Path(text_path).read_bytes())
    with torch_threads(1):
        return simulate(cfg, name, sim, text, Path(work))


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
    return rows, checks


def _run_all(cfg: EndToEndConfig, text, work: Path, nproc: int,
             on_result: Callable[[SimulationResult], None] | None) -> list[SimulationResult]:
    jobs = [(name, sim) for name in cfg.scenarios for sim in range(cfg.sims)]
    out: list[SimulationResult] = []
    if nproc <= 1:
        for name, sim in jobs:
            res = simulate(cfg, name, sim, text, work)
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
    import tangentlab.validate.planted  # noqa: F401  (registers the planted family)
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
    rates only (a quick run), or that has no check, reads False.
    """
    import json

    from tangentlab.runs import CHECKS_NAME
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    path = Path(run_dir) / CHECKS_NAME
    if not path.is_file():
        raise DataError(f"{str(path)!r} is missing; pass a directory written by "
                        "`tangentlab validate --end-to-end`")
    checks = json.loads(path.read_text())
    out = {}
    for row in PREDICTION_ROWS:
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

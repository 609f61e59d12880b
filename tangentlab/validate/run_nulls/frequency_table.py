"""The frequency-distance row under permuted frequency tables, on a run's own activations.

``tangentlab validate frequency-null RUN --permutations 200`` (issue 35, item 6) asks how often
the frequency-distance row would read "supported" or "not supported" where frequency can have
nothing to do with the geometry: the run's frequency table (token id → training count) is
shuffled among the ids that occur in it, so each token type keeps its activations, its
occurrences and its spread, and receives another type's frequency. The truth is then "null"
for that row by construction, on the run's real activations, not on a planted model's.

Everything a row reads goes through the code the run's own report used:

- the measurement's plan of each measure directory of RUN, rebuilt from its stored config
  (:func:`~tangentlab.empirical.measurement.preflight.preflight`, ``plan.prepare``): the same
  eval batches, geometry occurrences and seeds;
- the fit half of the first and last checkpoints (``collect.collect_fit_half``), once; the
  frequency-distance rows are then recomputed per table by the measurement's own
  ``metrics.frequency_rows`` (Spearman and Pearson with their document-jackknife intervals);
- each unit's status by the report's ``units.freqdist_unit`` (the rule
  :func:`~tangentlab.claims.rules.negative_correlation_rule`), the row's by
  ``units.combine_units`` over every (measurement, site) unit, as the report combines them.

Table 0 is the run's own, unpermuted: its Spearman values must equal the run's stored rows and
its row status the run's raw status (check ``same_code``), which shows the null runs the run's
code on the run's data. Tables 1..N are permutations drawn from ``[seed, index]``.

Only the frequency-distance row: the frequency-buckets row assigns each test-half row to a
frequency bucket while its gradients are captured, so each permuted table needs the test half
captured again (about the cost of measuring two checkpoints, per table), which this does not do.

Shapes: ``counts`` (vocab,) training counts; a unit is one (measurement, site).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import DataError

__all__ = ["KIND", "NULL_NAME", "FrequencyNull", "permuted_counts", "frequency_table_null",
           "write_frequency_table_null"]

#: ``kind`` of the run directory written.
KIND = "validate/frequency-table-null"
#: One row per (table, unit): the unit's numbers and status, and the row's status.
NULL_NAME = "null.csv"
_ROW = "frequency-distance"
_METRICS = ("freq_distance_spearman", "freq_distance_pearson")
_HINT = "pass a reproduce run directory or a measure directory whose trajectory is still on disk"


@dataclass(frozen=True)
class FrequencyNull:
    """What :func:`frequency_table_null` found.

    Attributes:
        units: one dict per (table, unit): ``table`` (0 = the run's own), ``model``, ``site``,
            ``spearman_step0``, ``spearman``, ``ci_low``, ``ci_high`` (at the last checkpoint),
            ``status`` (the unit's) and ``row_status`` (the row's, every unit combined).
        stored: per unit, the run's own stored Spearman at (first, last) checkpoint.
        run_status: the row's raw status from the run's own ``results.csv``.
        permutations: tables drawn (table 0 not counted).
        seed: the permutations' seed.
    """

    units: tuple[dict[str, Any], ...]
    stored: dict[str, tuple[float, float]]
    run_status: str
    permutations: int
    seed: int

    def row_statuses(self, *, permuted: bool = True) -> list[str]:
        """The row's status per table (the permuted ones, or table 0 alone)."""
        seen: dict[int, str] = {}
        for u in self.units:
            seen.setdefault(int(u["table"]), str(u["row_status"]))
        return [s for t, s in sorted(seen.items()) if (t > 0) == permuted]


def permuted_counts(counts, seed: int, index: int):
    """``counts`` with its positive entries shuffled among themselves (ids with 0 keep 0).

    ``index`` 0 returns a copy of ``counts`` unchanged. Shape (vocab,).
    """
    import numpy as np

    out = np.array(counts, dtype=np.float64, copy=True)
    if index == 0:
        return out
    seen = np.flatnonzero(out > 0)
    out[seen] = out[seen][np.random.default_rng([int(seed), int(index)]).permutation(len(seen))]
    return out


@dataclass
class _Measured:
    """One measure directory of RUN, collected at its first and last checkpoints."""

    name: str
    stage: str
    path: Path
    manifest: dict[str, Any]
    setup: Any
    cfg: Any
    steps: tuple[int, int]
    stats: dict[tuple[int, str], Any]


def _overrides(config: dict[str, Any]) -> dict[str, Any]:
    """The stored measure config's values that differ from today's defaults (lists as tuples)."""
    from tangentlab.empirical.measurement.measure_config import MeasureConfig

    default = MeasureConfig()
    names = {f.name for f in dataclasses.fields(default)}
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in names}
    return {k: v for k, v in given.items() if getattr(default, k) != v}


def _trajectory(run: Path, manifest: dict[str, Any]) -> str:
    """The measured trajectory: the manifest's path, else a reproduce run's ``train/<arch>``."""
    stored = Path(str(manifest.get("trajectory", "")))
    for cand in (stored, run / "train" / str(manifest.get("arch", "")) / "checkpoints"):
        if str(cand) and cand.is_dir():
            return str(cand)
    raise DataError(f"the trajectory measured in {str(run)!r} ({str(stored)!r}) is not on disk; "
                    f"{_HINT}")


def _collect(run: Path, rel: str) -> _Measured:
    """Rebuild one measurement's plan and collect its first and last checkpoints' fit halves."""
    from tangentlab._runtime import single_blas_thread, torch_threads
    from tangentlab.empirical.measurement.collect import collect_fit_half, merge_halves
    from tangentlab.empirical.measurement.plan import load_checkpoint, prepare
    from tangentlab.empirical.measurement.preflight import preflight
    from tangentlab.measure.precision import precision_scope
    from tangentlab.readers import read_json
    from tangentlab.runs import Timer

    mdir = run / rel
    manifest = read_json(mdir / "manifest.json", fields={"config": dict, "arch": str}, hint=_HINT)
    over = _overrides(manifest["config"])
    pf = preflight(_trajectory(run, manifest), None, seed=int(over.pop("seed", 0)),
                   overrides=over)
    cks = list(pf.checkpoints)
    if len(cks) < 2:
        raise DataError(f"{str(mdir)!r} measured one checkpoint; the frequency-distance rule "
                        "compares the last with the first")
    two, stats = [cks[0], cks[-1]], {}
    with single_blas_thread(), torch_threads(1), precision_scope(pf.cfg.stats_dtype, "cpu"):
        setup = prepare(pf.trajectory, two, pf.cfg, "cpu", Timer(), pf)
        for ck in two:
            lm = load_checkpoint(setup, ck, "cpu")
            fit = collect_fit_half(lm, setup.sites, setup.eval_data, setup.plans, setup.uniq)
            for site in setup.sites:
                stats[(int(ck.step), site)] = merge_halves(fit[site], None)
    name = Path(rel).name if rel != "." else str(manifest.get("arch"))
    return _Measured(name, f"measure/{name}", mdir, manifest, setup, pf.cfg,
                     (int(two[0].step), int(two[1].step)), stats)


def _units(ms: Sequence[_Measured], counts_of, table: int) -> list[dict[str, Any]]:
    """Each unit's frequency-distance numbers and status under table ``table``."""
    import pandas as pd

    from tangentlab.empirical.measurement.metrics import frequency_rows
    from tangentlab.empirical.measurement.plan import layer_of
    from tangentlab.empirical.measurement.records import RowBase
    from tangentlab.measure.precision import precision_scope
    from tangentlab.report import units as U
    from tangentlab.report.tables import ResultTable

    out = []
    for m in ms:
        counts = counts_of(m, table)
        rows = []
        with precision_scope(m.cfg.stats_dtype, "cpu"):
            for (step, site), st in m.stats.items():
                base = RowBase(model=m.name, arch=m.setup.first.arch, checkpoint=f"step_{step}",
                               step=step, layer=layer_of(site), site=site, seed=m.cfg.seed,
                               method=m.setup.proxies[site].spec if site in m.setup.proxies
                               else None)
                got, _ = frequency_rows(st, counts, m.setup.uniq, m.cfg, base)
                rows += [r for r in got if r["metric"] in _METRICS]
        model = U.Model(m.name, m.stage, ResultTable(pd.DataFrame(rows)), m.manifest)
        for site in m.setup.sites:
            unit, t = U.freqdist_unit(model, site), model.table
            rho = t.get(_METRICS[0], site=site, step=float(m.steps[1]))
            out.append({"table": table, "model": m.name, "site": site,
                        "spearman_step0": t.get(_METRICS[0], site=site, step=float(m.steps[0])).value,
                        "spearman": rho.value, "ci_low": rho.ci_low, "ci_high": rho.ci_high,
                        "status": unit.status, "unit": unit})
    row = U.combine_units([u.pop("unit") for u in out]).status
    return [{**u, "row_status": row} for u in out]


def _stored(ms: Sequence[_Measured]) -> tuple[dict[str, tuple[float, float]], str]:
    """The run's own stored Spearman per unit at (first, last), and the row's raw status."""
    from tangentlab.report import units as U
    from tangentlab.report.tables import ResultTable

    stored, units = {}, []
    for m in ms:
        model = U.Model(m.name, m.stage, ResultTable.read(m.path / "results.csv"), m.manifest)
        for site in m.setup.sites:
            got = [model.table.get(_METRICS[0], site=site, step=float(s)).value for s in m.steps]
            stored[f"{m.name} {site}"] = (got[0], got[1])
            units.append(U.freqdist_unit(model, site))
    return stored, U.combine_units(units).status


def frequency_table_null(run_dir: str | Path, *, permutations: int = 200, seed: int = 0
                         ) -> FrequencyNull:
    """The frequency-distance row of ``run_dir`` under ``permutations`` shuffled tables.

    ``run_dir``: a reproduce run (its ``measure/<arch>`` directories) or one measure directory.
    DataError where a measurement or its trajectory cannot be read.
    """
    from tangentlab.validate.twin import read_run_setting

    run = Path(run_dir)
    rels = read_run_setting(run).measures  # the same measurements a twin reads
    ms = [_collect(run, rel) for rel in rels]
    def counts_of(m: _Measured, table: int):
        return permuted_counts(m.setup.eval_data.counts, seed, table)

    units = [u for t in range(permutations + 1) for u in _units(ms, counts_of, t)]
    stored, status = _stored(ms)
    return FrequencyNull(tuple(units), stored, status, int(permutations), int(seed))


def _checks(res: FrequencyNull) -> list[dict[str, Any]]:
    """``same_code`` (table 0 equals the run), then the wrong-status rates with Wilson bounds.

    The row's (what the report decides) and the worst single unit's (the rule's own
    calibration: intersection-union makes the row's rates small even where a unit's are not).
    """
    import math

    from tangentlab.claims.rules import NOT_SUPPORTED, SUPPORTED

    own = [u for u in res.units if u["table"] == 0]
    gaps = [_gap(u["spearman"], res.stored[f"{u['model']} {u['site']}"][1])
            + _gap(u["spearman_step0"], res.stored[f"{u['model']} {u['site']}"][0]) for u in own]
    same = all(math.isfinite(g) and g <= 1e-9 for g in gaps) and \
        res.row_statuses(permuted=False) == [res.run_status]
    checks = [{"name": "same_code", "row": _ROW, "passed": bool(same), "n": len(own),
               "measured": max(gaps, default=float("nan")), "target": "<= 1e-9 and the same status",
               "detail": f"table 0 (the run's own): row {res.row_statuses(permuted=False)}, the "
                         f"run's raw status {res.run_status!r}"}]
    n = res.permutations
    per_unit: dict[str, list[str]] = {}
    for u in res.units:
        if u["table"] > 0:
            per_unit.setdefault(f"{u['model']} {u['site']}", []).append(str(u["status"]))
    for word in (SUPPORTED, NOT_SUPPORTED):
        tag = word.replace(" ", "_")
        k = sum(s == word for s in res.row_statuses())
        checks.append(_rate_check(f"wrong_{tag}", k, n, f"{k} of {n} permuted tables read "
                                  f"{word!r} (the row: every unit combined)"))
        worst, kw = max(((name, sum(s == word for s in got)) for name, got in per_unit.items()),
                        key=lambda x: x[1], default=("none", 0))
        checks.append(_rate_check(f"unit_wrong_{tag}", kw, n, f"the unit that read {word!r} "
                                  f"most often: {worst}, {kw} of {n} tables"))
    return checks


def _gap(ours: Any, stored: Any) -> float:
    """|ours − stored|; 0 when both are missing (None or NaN), infinite when one is."""
    import math

    a, b = (math.nan if v is None else float(v) for v in (ours, stored))
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b)


def _rate_check(name: str, k: int, n: int, detail: str) -> dict[str, Any]:
    """A wrong-status rate k/n passing at <= 0.05 with its upper Wilson bound <= 0.08."""
    from tangentlab.validate.battery import wilson_interval
    from tangentlab.validate.end_to_end_checks import WRONG_BOUND_MAX, WRONG_RATE_MAX

    lo, hi = wilson_interval(k, n) if n else (float("nan"), float("nan"))
    return {"name": name, "row": _ROW, "n": n, "measured": k / n if n else float("nan"),
            "ci_low": lo, "ci_high": hi,
            "passed": bool(n and k / n <= WRONG_RATE_MAX and hi <= WRONG_BOUND_MAX),
            "target": f"<= {WRONG_RATE_MAX}, Wilson upper <= {WRONG_BOUND_MAX}", "detail": detail}


def write_frequency_table_null(run_dir: str | Path, out_dir: str | Path, *,
                               permutations: int = 200, seed: int = 0) -> tuple[Path, bool]:
    """Run :func:`frequency_table_null` and write ``null.csv``, ``checks.json``, ``manifest.json``.

    Built under a temporary name and renamed (:func:`tangentlab.runs.atomic_directory`);
    ``--out`` is checked before anything runs. Returns (the directory, every check passed).
    """
    import csv
    import io
    import time

    from tangentlab.errors import ConfigError
    from tangentlab.runs import (
        CHECKS_NAME,
        atomic_directory,
        atomic_write_json,
        atomic_write_text,
        build_manifest,
        check_output_dir,
        write_manifest,
    )

    if int(permutations) < 1:
        raise ConfigError(f"permutations must be at least 1; got {permutations}")
    check_output_dir(out_dir, kind=KIND)
    t0 = time.perf_counter()
    res = frequency_table_null(run_dir, permutations=permutations, seed=seed)
    checks = _checks(res)
    buf = io.StringIO()
    fields = ("table", "model", "site", "spearman_step0", "spearman", "ci_low", "ci_high",
              "status", "row_status")
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(res.units)
    passed = all(c["passed"] for c in checks)
    with atomic_directory(out_dir, kind=KIND) as tmp:
        atomic_write_text(tmp / NULL_NAME, buf.getvalue())
        atomic_write_json(tmp / CHECKS_NAME, checks)
        write_manifest(tmp, build_manifest(
            kind=KIND, config={"run": str(Path(run_dir)), "permutations": int(permutations),
                               "seed": int(seed)}, seeds={"permutations": int(seed)},
            timings={"total": time.perf_counter() - t0},
            extra={"row": _ROW, "run_status": res.run_status, "passed": passed,
                   "stored_spearman": {k: list(v) for k, v in res.stored.items()}}))
    return Path(out_dir), passed

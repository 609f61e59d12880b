"""The end-to-end run's records on disk: its settings file and one record per simulation.

An end-to-end run directory (``tangentlab validate --end-to-end``) is written in place, one file
at a time, each with the atomic writers of :mod:`tangentlab.runs`, so that a kill loses at most
the simulations in flight:

- ``end_to_end.json`` (:data:`SETTINGS_NAME`), written first: the run's settings. ``kind``
  (:data:`SETTINGS_KIND`), ``config`` (the :class:`EndToEndConfig` as a dict), ``config_hash``
  (:func:`tangentlab.config.config_hash` of it), ``git`` (:func:`tangentlab.runs.git_commit`:
  ``commit`` and ``dirty``), ``shard`` (``"K/N"``, or null for the whole run), ``quick``,
  ``zipf_slope_train_split`` (of the shared text), ``jobs`` (simulations this directory runs)
  and, for a merged directory, ``merged_from`` (the directories it was assembled from). It
  marks the folder as an end-to-end run, finished or not.
- ``simulations/<scenario>/sim<NNN>.json`` (:func:`record_path`), one per finished simulation:
  ``kind`` (:data:`RECORD_KIND`), ``scenario``, ``sim``, ``statuses`` (prediction row → status
  word), ``reasons`` (row → the combined reason), ``seconds``, ``error`` ("" when it ran),
  ``enrichment_intervals`` (each unit's enrichment ``[value, CI low, CI high]`` at every
  checkpoint, from the test the enrichment row reads; null where a number is missing), ``config_hash``, ``git`` and
  ``shard``: the settings fingerprint it was run under.
- ``manifest.json``, written last (after ``results.csv``, ``checks.json`` and ``statuses.csv``,
  or, for a shard, alone): a directory holding the settings file and no manifest is unfinished.

A scenario name holding ``/`` (``rd-1/64``) is a nested folder, as the measure folders are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import DataError

__all__ = ["SimulationResult", "SETTINGS_NAME", "SETTINGS_KIND", "SIMULATIONS_DIR", "RECORD_KIND",
           "STATUSES_NAME", "UNIT_ENRICHMENT",
           "record_path", "write_record", "read_record", "find_records", "settings_for",
           "write_settings", "read_settings", "is_end_to_end_dir", "settings_mismatch",
           "state_text", "read_records", "require_finished", "read_statuses", "format_table",
           "ENRICHMENT_FIGURE", "enrichment_calibration", "write_enrichment_figure",
           "wrong_status", "Progress", "progress"]

#: The run's settings file (written first; marks the folder as an end-to-end run).
SETTINGS_NAME = "end_to_end.json"
#: ``kind`` of the settings file.
SETTINGS_KIND = "validate/end-to-end settings"
#: Per-simulation statuses of a finished run, one row per (scenario, simulation, prediction row).
STATUSES_NAME = "statuses.csv"
#: The ``metric`` of a unit's last-checkpoint enrichment interval in ``statuses.csv``.
UNIT_ENRICHMENT = "unit_enrichment"
#: The folder of the per-simulation records (and, with ``keep_measures``, the measure folders).
SIMULATIONS_DIR = "simulations"
#: ``kind`` of one simulation's record.
RECORD_KIND = "validate/end-to-end simulation"
_RECORD_NAME = re.compile(r"sim(\d+)\.json")
_HINT = "rerun the simulation (resume the run with --resume after deleting the file)"


@dataclass(frozen=True)
class SimulationResult:
    """One simulation's row statuses (row key → status word, and the combined reason)."""

    scenario: str
    sim: int
    statuses: dict[str, str]
    reasons: dict[str, str]
    seconds: float
    error: str = ""  #: why the simulation raised ("" when it ran); every row is then "not run"
    #: per unit and checkpoint, the enrichment (value, CI low, CI high) of the test the enrichment
    #: row reads (None where a number is missing): the coverage check of
    #: :func:`~tangentlab.validate.end_to_end_checks.summarize` compares them with the truth
    enrichment_intervals: tuple[tuple[float | None, float | None, float | None], ...] = ()


def record_path(out: str | Path, scenario: str, sim: int) -> Path:
    """Where the record of simulation ``sim`` of ``scenario`` lives in run directory ``out``."""
    return Path(out) / SIMULATIONS_DIR / scenario / f"sim{sim:03d}.json"


def write_record(out: str | Path, result: SimulationResult, settings: dict[str, Any]) -> Path:
    """Write one simulation's record atomically (fingerprint taken from ``settings``)."""
    from tangentlab.runs import atomic_write_json

    return atomic_write_json(record_path(out, result.scenario, result.sim), {
        "kind": RECORD_KIND, "scenario": result.scenario, "sim": int(result.sim),
        "statuses": dict(result.statuses), "reasons": dict(result.reasons),
        "seconds": float(result.seconds), "error": result.error,
        "enrichment_intervals": [list(iv) for iv in result.enrichment_intervals],
        "config_hash": settings["config_hash"], "git": settings["git"],
        "shard": settings["shard"]})


def read_record(path: str | Path) -> tuple[SimulationResult, dict[str, Any]]:
    """(the simulation, its whole record) from a record file; DataError naming a bad field."""
    from tangentlab.readers import read_json

    data = read_json(path, fields={"kind": str, "scenario": str, "sim": int, "statuses": dict,
                                   "reasons": dict, "seconds": float, "error": str,
                                   "config_hash": str, "git": dict}, hint=_HINT)
    if data["kind"] != RECORD_KIND:
        raise DataError(f"{str(path)!r} is a {data['kind']!r} file, not a simulation record "
                        f"({RECORD_KIND!r}); {_HINT}")
    res = SimulationResult(data["scenario"], data["sim"], {str(k): str(v) for k, v in
                                                           data["statuses"].items()},
                           {str(k): str(v) for k, v in data["reasons"].items()},
                           float(data["seconds"]), data["error"],
                           _intervals(data.get("enrichment_intervals", []), path))
    return res, data


def _intervals(raw: Any, path: str | Path) -> tuple[tuple[float | None, ...], ...]:
    """A record's ``enrichment_intervals`` as tuples; DataError for a malformed entry."""
    ok = isinstance(raw, list) and all(
        isinstance(iv, list) and len(iv) == 3
        and all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in iv)
        for iv in raw)
    if not ok:
        raise DataError(f"{str(path)!r}: enrichment_intervals must be a list of [value, CI low, "
                        f"CI high] triples (numbers or null); got {str(raw)[:80]}; {_HINT}")
    return tuple(tuple(None if x is None else float(x) for x in iv) for iv in raw)


def find_records(out: str | Path) -> dict[tuple[str, int], Path]:
    """Every record file under ``out/simulations``: (scenario, sim) → path, read from the path.

    Raises DataError for a record whose file name does not match its folder's scenario and
    index (the scenario is the folder path under ``simulations/``).
    """
    root = Path(out) / SIMULATIONS_DIR
    found: dict[tuple[str, int], Path] = {}
    if not root.is_dir():
        return found
    for path in sorted(root.rglob("sim*.json")):
        m = _RECORD_NAME.fullmatch(path.name)
        if m is None or not path.is_file():
            continue
        scenario = path.parent.relative_to(root).as_posix()
        found[(scenario, int(m.group(1)))] = path
    return found


def settings_for(cfg, *, shard: str | None, quick: bool, jobs: int,
                 zipf: float | None = None, extension: str | None = None) -> dict[str, Any]:
    """The settings file's content for ``cfg`` run at this checkout's git commit.

    ``extension``: the ``"FIRST:LAST@A,B"`` of a run of more simulations (recorded only when
    given, so the settings of every other run read as before).
    """
    from tangentlab.config import config_hash, config_to_dict
    from tangentlab.runs import git_commit

    out = {"kind": SETTINGS_KIND, "config": config_to_dict(cfg), "config_hash": config_hash(cfg),
           "git": git_commit(), "shard": shard, "quick": bool(quick), "jobs": int(jobs),
           "zipf_slope_train_split": zipf}
    return out if extension is None else {**out, "extension": extension}


def write_settings(out: str | Path, settings: dict[str, Any]) -> Path:
    """Write ``end_to_end.json`` atomically."""
    from tangentlab.runs import atomic_write_json

    return atomic_write_json(Path(out) / SETTINGS_NAME, settings)


def read_settings(out: str | Path) -> dict[str, Any]:
    """The settings file of run directory ``out``; DataError when missing or malformed."""
    from tangentlab.readers import read_json

    path = Path(out) / SETTINGS_NAME
    data = read_json(path, fields={"kind": str, "config": dict, "config_hash": str, "git": dict,
                                   "jobs": int}, optional={"shard": str},
                     hint="pass a directory written by `tangentlab validate --end-to-end`")
    if data["kind"] != SETTINGS_KIND:
        raise DataError(f"{str(path)!r} is a {data['kind']!r} file, not an end-to-end run's "
                        f"settings ({SETTINGS_KIND!r})")
    return data


def is_end_to_end_dir(out: str | Path) -> bool:
    """Whether ``out`` holds an end-to-end run written with records (finished or not)."""
    return (Path(out) / SETTINGS_NAME).is_file()


def settings_mismatch(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The first fingerprint field in which two settings differ, said in words; None if none.

    Compared: ``config_hash`` (naming the config keys that differ) and the git commit (a dirty
    tree is not compared: the commit is what can be checked out again).
    """
    if a["config_hash"] != b["config_hash"]:
        keys = sorted(k for k in set(a["config"]) | set(b["config"])
                      if a["config"].get(k) != b["config"].get(k))
        return (f"config_hash ({a['config_hash']} vs {b['config_hash']}; config differs in "
                f"{', '.join(keys) or 'its encoding'})")
    ca, cb = a["git"].get("commit"), b["git"].get("commit")
    if ca != cb:
        return f"git commit ({str(ca)[:12]} vs {str(cb)[:12]})"
    return None


def state_text(out: str | Path, settings: dict[str, Any]) -> str:
    """The run's state, for messages: ``finished``, or ``unfinished: k of n simulations recorded``."""
    from tangentlab.runs import MANIFEST_NAME

    if (Path(out) / MANIFEST_NAME).is_file():
        return "finished"
    return f"unfinished: {len(find_records(out))} of {settings['jobs']} simulations recorded"


def read_records(out: str | Path, jobs: list[tuple[str, int]],
                 settings: dict[str, Any]) -> list[SimulationResult]:
    """The simulations ``jobs`` read from their records in ``out``, in the order of ``jobs``.

    DataError for a missing record (naming the simulation), one whose content is not its
    path's simulation, or one run under another config hash or git commit than ``settings``.
    """
    out = Path(out)
    results = []
    for name, sim in jobs:
        path = record_path(out, name, sim)
        if not path.is_file():
            raise DataError(f"{str(out)!r} has no record of simulation {name} #{sim} "
                            f"({str(path)!r}); resume the run with --resume")
        res, data = read_record(path)
        if (res.scenario, res.sim) != (name, sim):
            raise DataError(f"{str(path)!r} records simulation {res.scenario} #{res.sim}, not "
                            f"{name} #{sim}; {_HINT}")
        ours = (settings["config_hash"], settings["git"].get("commit"))
        theirs = (data["config_hash"], data["git"].get("commit"))
        if theirs != ours:
            raise DataError(f"{str(path)!r} was run under config_hash {theirs[0]} at commit "
                            f"{str(theirs[1])[:12]}, not its directory's {ours[0]} at "
                            f"{str(ours[1])[:12]}; {_HINT}")
        results.append(res)
    return results


# -- reading a finished run back (a directory with the settings file and no manifest is
# unfinished; a shard is refused; a directory without the settings file is read as it is) ------


def require_finished(run_dir: Path) -> None:
    """DataError when ``run_dir`` holds an unfinished end-to-end run, or a shard of one.

    A directory without the settings file (written before records were kept, or by hand) is
    read as it is.
    """
    if not is_end_to_end_dir(run_dir):
        return
    settings = read_settings(run_dir)
    if settings.get("shard"):
        raise DataError(f"{str(run_dir)!r} holds shard {settings['shard']} of an end-to-end run, "
                        "which judges nothing alone; merge the shards with `tangentlab validate "
                        "merge`")
    if settings.get("extension"):
        raise DataError(f"{str(run_dir)!r} holds extension {settings['extension']} of an "
                        "end-to-end run, which judges nothing alone; merge it with its run with "
                        "`tangentlab validate merge RUN EXTENSION --out MERGED`")
    state = state_text(run_dir, settings)
    if state != "finished":
        raise DataError(f"{str(run_dir)!r} holds an end-to-end run that is not finished "
                        f"({state}); finish it by rerunning its command with --resume")


def read_statuses(run_dir: str | Path) -> list[SimulationResult]:
    """The simulations stored in a run directory's ``statuses.csv`` (to re-summarize them).

    DataError for an unfinished run or a shard (their ``statuses.csv`` is absent or stale).
    """
    from tangentlab.runs import read_results

    require_finished(Path(run_dir))
    df = read_results(Path(run_dir) / STATUSES_NAME)
    out = []
    for (name, sim), g in df.groupby(["null", "sim"], sort=False):
        st = g[g["metric"] == "status"]
        iv = g[g["metric"] == UNIT_ENRICHMENT].sort_values("layer")
        intervals = tuple(tuple(_num(x) for x in t)
                          for t in zip(iv["value"], iv["ci_low"], iv["ci_high"]))
        out.append(SimulationResult(str(name), int(sim), dict(zip(st["row"], st["value"])),
                                    dict(zip(st["row"], st["reason"].fillna(""))), float("nan"),
                                    enrichment_intervals=intervals))
    return out


def _num(x: Any) -> float | None:
    """A stored cell as a float, None for an empty or non-finite one."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def format_table(checks: Sequence[dict[str, Any]]) -> str:
    """Checks as Markdown: unused (``certificate.checks_table`` is); ``end_to_end`` re-exports it."""
    lines = ["| row | null | criterion | rate | Wilson 95% | n | result |",
             "|---|---|---|---|---|---|---|"]
    for c in checks:
        m = c.get("measured")
        rate = "n/a" if m is None or (isinstance(m, float) and math.isnan(m)) else f"{m:.3f}"
        lines.append(f"| {c['row']} | {c['null']} | {c['metric']} | {rate} | "
                     f"[{c['ci_low']:.3f}, {c['ci_high']:.3f}] | {c['n']} | "
                     f"{'pass' if c['passed'] else 'FAIL'} |")
    return "\n".join(lines)


#: The figure of a finished run's enrichment intervals against the planted truth.
ENRICHMENT_FIGURE = "enrichment_calibration.png"


def enrichment_calibration(run_dir: str | Path) -> tuple[Any, dict[int, list[bool]]]:
    """The enrichment intervals of a finished run against the planted truth, where it is exact.

    Over the scenarios whose enrichment is exact (1 at every step:
    :func:`tangentlab.validate.planted_scenarios.enrichment_truth`): ``z``, the sorted
    standardised errors (estimate − truth) / (half-width / 1.96) of each unit's interval at its
    last checkpoint (one per unit and simulation, so independent draws), and per checkpoint index
    whether each unit's interval there covers the truth. Empty when no scenario has an exact
    truth.
    """
    import numpy as np

    from tangentlab.validate.planted_scenarios import enrichment_truth

    run = Path(run_dir)
    steps = len(read_settings(run).get("config", {}).get("steps") or [])
    z, by_step = [], {}
    for r in read_statuses(run):
        truth, ivs = enrichment_truth(r.scenario), r.enrichment_intervals
        if truth is None or not steps or len(ivs) % steps:
            continue
        for i, (v, lo, hi) in enumerate(ivs):
            if None in (v, lo, hi) or hi <= lo:
                continue
            by_step.setdefault(i % steps, []).append(lo <= truth <= hi)
            if i % steps == steps - 1:
                z.append((v - truth) / ((hi - lo) / 2 / 1.96))
    return np.sort(np.asarray(z, dtype=float)), by_step


def write_enrichment_figure(run_dir: str | Path) -> Path | None:
    """Draw :func:`enrichment_calibration` into the run as :data:`ENRICHMENT_FIGURE`; its path.

    Left, the ECDF of z against the standard normal CDF (a calibrated interval), with the DKW
    simultaneous 95% band around the ECDF (half-width sqrt(ln(2/0.05) / 2n)); right, the coverage
    at each checkpoint (all units) with its Wilson 95% interval, against the nominal 0.95. None
    (nothing drawn) when no scenario of the run has an exact truth, or the folder holds no
    run's settings and statuses (a stand-in written by hand).
    """
    import io
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from scipy.stats import norm

    from tangentlab.atomic import atomic_write_bytes
    from tangentlab.validate.battery import wilson_interval

    if not is_end_to_end_dir(run_dir) or not (Path(run_dir) / STATUSES_NAME).is_file():
        return None
    z, by_step = enrichment_calibration(run_dir)
    if not z.size:
        return None
    n = z.size
    ecdf, eps = np.arange(1, n + 1) / n, math.sqrt(math.log(2 / 0.05) / (2 * n))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.step(z, ecdf, where="post", label=f"ECDF of z ({n} unit intervals, last checkpoint)")
    a.fill_between(z, np.clip(ecdf - eps, 0, 1), np.clip(ecdf + eps, 0, 1), step="post",
                   alpha=0.25, label="DKW simultaneous 95% band")
    grid = np.linspace(min(z.min(), -4), max(z.max(), 4), 200)
    a.plot(grid, norm.cdf(grid), "k--", label="standard normal (a calibrated interval)")
    a.set(xlabel="z = (estimate - truth) / (half-width / 1.96)", ylabel="fraction",
          title="enrichment: standardised error where the truth is exact")
    a.legend(fontsize=7)
    ks = sorted(by_step)
    cov = [float(np.mean(by_step[k])) for k in ks]
    wil = [wilson_interval(int(sum(by_step[k])), len(by_step[k])) for k in ks]
    b.errorbar(ks, cov, yerr=[[c - w[0] for c, w in zip(cov, wil)],
                              [w[1] - c for c, w in zip(cov, wil)]], fmt="o", capsize=3)
    b.axhline(0.95, color="k", ls="--", lw=1)
    b.set(xlabel="checkpoint index", ylabel="coverage of the truth", ylim=(0.5, 1.02),
          title="coverage per checkpoint (Wilson 95%)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return atomic_write_bytes(Path(run_dir) / ENRICHMENT_FIGURE, buf.getvalue())


def wrong_status(status: str, truth: str | None) -> bool:
    """Whether a row's ``status`` is wrong under its scenario's ``truth``, as the checks count it.

    "supported" under a null or negative truth, "not supported" under a null or positive one
    (the per-scenario ``wrong_supported`` and ``wrong_not_supported`` checks of
    :func:`tangentlab.validate.end_to_end_checks.summarize`); "inconclusive" is never wrong
    (under a positive truth it is a lack of power, judged by the power check).
    """
    from tangentlab.claims.rules import NOT_SUPPORTED, SUPPORTED

    return ((status == SUPPORTED and truth in ("null", "negative"))
            or (status == NOT_SUPPORTED and truth in ("null", "positive")))


@dataclass(frozen=True)
class Progress:
    """How far one end-to-end directory got (``tangentlab validate status``).

    Attributes:
        path: the directory; commit, dirty: the git state its simulations run at.
        part: ``"whole run"``, ``"shard K/N"``, ``"extension FIRST:LAST@..."`` or ``"merged"``.
        finished: whether its manifest is written.
        total, done, wrong: per scenario, in the config's order: the simulations it runs, those
            recorded, and the wrong statuses among them (:func:`wrong_status`).
        errors: recorded simulations that raised.
        seconds: each recorded simulation's seconds (its own process's wall time).
        jobs: the (scenario, simulation index) pairs it runs, recorded or not.
    """

    path: Path
    commit: str
    dirty: bool
    part: str
    finished: bool
    total: dict[str, int]
    done: dict[str, int]
    wrong: dict[str, int]
    errors: int
    seconds: tuple[float, ...]
    jobs: frozenset = frozenset()

    @property
    def remaining(self) -> int:
        """Simulations still to run."""
        return sum(self.total.values()) - sum(self.done.values())

    def core_hours_left(self) -> float:
        """The remaining simulations at the mean recorded seconds, in hours of one process."""
        if not self.seconds:
            return float("nan")
        return self.remaining * sum(self.seconds) / len(self.seconds) / 3600.0


def progress(out: str | Path) -> Progress:
    """The :class:`Progress` of end-to-end directory ``out`` (finished or not).

    DataError for a directory without an end-to-end settings file, or with a bad record.
    """
    from tangentlab.config import config_from_mapping
    from tangentlab.runs import MANIFEST_NAME
    from tangentlab.validate.end_to_end_config import (
        EndToEndConfig,
        Extension,
        Shard,
        jobs,
        merged_jobs,
    )
    from tangentlab.validate.planted_scenarios import scenario

    out = Path(out)
    if not is_end_to_end_dir(out):
        raise DataError(f"{str(out)!r} holds no end-to-end run ({SETTINGS_NAME}); pass a "
                        "directory written by `tangentlab validate --end-to-end`")
    st = read_settings(out)
    cfg = config_from_mapping(EndToEndConfig, st["config"])
    if st.get("extension"):
        part, mine = f"extension {st['extension']}", Extension.parse(st["extension"]).jobs(cfg)
    elif st.get("extensions"):
        part = "merged"
        mine = merged_jobs(cfg, [Extension.parse(e) for e in st["extensions"]])
    else:
        part, mine = "whole run", jobs(cfg)
    if st.get("shard"):
        part = f"shard {st['shard']}" + ("" if part == "whole run" else f" of the {part}")
        mine = Shard.parse(st["shard"]).take(mine)
    total = {n: sum(m == n for m, _ in mine) for n in cfg.scenarios}
    done, wrong = dict.fromkeys(total, 0), dict.fromkeys(total, 0)
    seconds, errors = [], 0
    wanted = frozenset(mine)
    for key, path in find_records(out).items():
        if key not in wanted:
            continue
        res, _ = read_record(path)
        done[res.scenario] += 1
        seconds.append(res.seconds)
        errors += bool(res.error)
        truth = scenario(res.scenario).truth
        wrong[res.scenario] += sum(wrong_status(s, truth.get(row))
                                   for row, s in res.statuses.items())
    git = st.get("git") or {}
    return Progress(out, str(git.get("commit") or "unknown"), bool(git.get("dirty")), part,
                    (out / MANIFEST_NAME).is_file(), {n: k for n, k in total.items() if k},
                    {n: done[n] for n in total if total[n]},
                    {n: wrong[n] for n in total if total[n]}, errors, tuple(seconds), wanted)

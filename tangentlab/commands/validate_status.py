"""``tangentlab validate status DIR...``: how far end-to-end directories got, and their total.

A verb of ``tangentlab validate`` (registered by :mod:`tangentlab.commands.validate`); the
counting is :func:`tangentlab.validate.end_to_end_records.progress`. For a twin run as shards
over days (``certification/twin-default/s*/``), the last block adds the shards up, so one command
says how many simulations each null has, whether any erred, and what is left.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

__all__ = ["add_status", "STATUS_TABLE_HEADER"]


def add_status(verbs, *, parent_flags: Callable) -> None:
    """Add the ``status`` verb to ``validate``'s verbs."""
    ps = verbs.add_parser(
        "status", help="how far end-to-end directories got, and whether they are stale",
        description=(
            "For each end-to-end directory (a run, a shard, an extension or a merged run, "
            "finished or not): its part and commit, the simulations recorded of those it runs "
            "(per scenario, with the wrong statuses so far), the mean seconds per simulation "
            "and the process-hours left at that rate, and whether this checkout's verdict path "
            "(tangentlab.claims.fingerprints) still equals that of the commit its simulations "
            "run at: a stale one would certify nothing today. With --statuses FILE: also every "
            "recorded simulation's statuses as CSV, the small text to commit while a long run "
            "goes on (of one DIR, or of the disjoint parts of one run, as for the total). With "
            "more than one DIR, a last block adds them up (the "
            "simulations recorded per scenario, the wrong statuses, the raised ones and the "
            "process-hours left) when they are disjoint parts of one run: one config, one "
            "commit, no simulation in two of them (the shards; not a merged run beside its "
            "shards). Then one line, for the one DIR or the total: each prediction row's wrong "
            "statuses among the recorded ones and, where a scenario plants the row positive, "
            "how often it read 'supported' (the power so far). Exit code 0, 2 on bad input."))
    ps.add_argument("dirs", nargs="+", metavar="DIR", help="end-to-end directories")
    ps.add_argument("--statuses", metavar="FILE", default=None,
                    help="write one CSV row per (recorded simulation, prediction row) of the "
                         "DIRs (one, or the disjoint parts of one run: the shards): scenario, "
                         "sim, row, status, truth, wrong, seconds, commit (refused when FILE is "
                         "a folder or a file other than such a CSV)")
    ps.set_defaults(func=lambda args: _status(args, parent_flags))


def _status(args: argparse.Namespace, parent_flags: Callable) -> int:
    """``validate status DIR...``: three lines per directory, then their total (see the verb)."""
    from tangentlab.errors import ConfigError
    from tangentlab.validate.end_to_end_records import progress

    given = parent_flags(args)
    if given:
        raise ConfigError(f"status reads end-to-end directories; drop {' and '.join(given)}")
    if args.statuses is not None:
        _status_table_path(args.statuses)
    every = [progress(d) for d in args.dirs]
    why = _not_one_run(args.dirs, every) if len(every) > 1 else None  # the parts of one run?
    if args.statuses is not None and why:
        raise ConfigError(f"--statuses writes the table of one directory or of one run's "
                          f"disjoint parts, and {why}")
    for d, p in zip(args.dirs, every):
        _print_progress(f"{d}: {p.part} at commit {p.commit[:12]}{' (dirty)' if p.dirty else ''}, "
                        f"{'finished' if p.finished else 'unfinished'}", p)
        print("  " + _verdict_path_state(p.commit))
    if len(every) > 1:
        _print_together(args.dirs, every, why)
    if why:  # not the parts of one run (--statuses was refused above): no rows line
        return 0
    recorded = list(_recorded(args.dirs))  # read once, for the line and FILE
    print("  " + _row_line(recorded))
    if args.statuses is not None:
        n = _write_status_table(recorded, args.statuses)
        print(f"wrote {args.statuses}: {n} rows")
    return 0


#: The header of the table ``validate status --statuses`` writes (and the only file it replaces).
STATUS_TABLE_HEADER = "scenario,sim,row,status,truth,wrong,seconds,commit"


def _status_table_path(path: str):
    """``path`` as a Path; OutputPathError for a folder or a file other than a status table."""
    from pathlib import Path

    from tangentlab.errors import OutputPathError

    out = Path(path)
    if out.is_dir():
        raise OutputPathError(f"--statuses {path!r} is a directory; give a file name, e.g. "
                              f"{str(out / 'statuses.csv')!r}")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise OutputPathError(f"--statuses {path!r} lies under {str(parent)!r}, which is a file, "
                              "not a folder; give a path in a folder")
    if out.exists() and not out.is_file():
        raise OutputPathError(f"--statuses {path!r} exists and is not a regular file (a device "
                              "or a pipe?); give a new file name")
    if out.exists():
        with open(out, encoding="utf-8", errors="replace") as fh:
            if fh.readline().strip() != STATUS_TABLE_HEADER:
                raise OutputPathError(f"--statuses {path!r} exists and is not a status table; "
                                      "choose a new file (only such a table is replaced)")
    return out


def _recorded(dirs: Sequence[str]):
    """Every recorded simulation under ``dirs``, sorted by scenario and index.

    Yields (its :class:`~tangentlab.validate.end_to_end_records.SimulationResult`, its
    scenario's truth per row, the commit it ran at). ``dirs``: one directory, or disjoint parts
    of one run (the caller checks, as for the total).
    """
    from tangentlab.validate.end_to_end_records import find_records, read_record
    from tangentlab.validate.planted_scenarios import scenario

    records = {key: rec for d in dirs for key, rec in find_records(d).items()}
    for _, rec in sorted(records.items()):
        res, whole = read_record(rec)
        yield res, scenario(res.scenario).truth, str((whole.get("git") or {}).get("commit")
                                                      or "unknown")[:12]


def _write_status_table(recorded: Sequence[tuple], path: str) -> int:
    """Write the ``recorded`` simulations' statuses (:func:`_recorded`) to CSV ``path``; row count.

    One row per (simulation, prediction row): the status, the scenario's
    truth for the row ("" where it plants none), whether the status is wrong under it
    (:func:`~tangentlab.validate.end_to_end_records.wrong_status`), the simulation's seconds and
    the commit it ran at. OutputPathError for a folder or an existing file that is not such a
    table; written atomically.
    """
    import csv
    import io

    from tangentlab.atomic import atomic_write_text
    from tangentlab.validate.end_to_end_records import wrong_status

    out = _status_table_path(path)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(STATUS_TABLE_HEADER.split(","))
    n = 0
    for res, truth, commit in recorded:
        for row, status in res.statuses.items():
            writer.writerow([res.scenario, res.sim, row, status, truth.get(row) or "",
                             int(wrong_status(status, truth.get(row))), f"{res.seconds:.1f}",
                             commit])
            n += 1
    atomic_write_text(out, buf.getvalue())
    return n


def _row_line(recorded: Sequence[tuple]) -> str:
    """Per prediction row, the wrong statuses and the power so far, in one line.

    Over the ``recorded`` simulations (:func:`_recorded`): the wrong statuses among them, and
    where a scenario plants the row positive, how often it read "supported", in all and per such
    scenario in battery order (the power check is per scenario, so a row can read well in all
    and fail in one). One line, e.g. ``rows: enrichment 0 wrong of 472, supported 120 of 120
    where positive (effect 24/24, drift 24/24, ...); ...``.
    """
    from tangentlab.claims.rules import SUPPORTED
    from tangentlab.validate.end_to_end_records import wrong_status
    from tangentlab.validate.planted_scenarios import SCENARIOS

    count: dict[str, list[int]] = {}  # row -> [wrong, recorded]
    power: dict[str, dict[str, list[int]]] = {}  # row -> scenario -> [supported, positive]
    for res, truth, _ in recorded:
        for row, status in res.statuses.items():
            c = count.setdefault(row, [0, 0])
            c[0] += wrong_status(status, truth.get(row))
            c[1] += 1
            if truth.get(row) == "positive":
                p = power.setdefault(row, {}).setdefault(res.scenario, [0, 0])
                p[0] += status == SUPPORTED
                p[1] += 1
    if not count:
        return "rows: no simulation recorded yet"
    order = {name: i for i, name in enumerate(SCENARIOS)}

    def positive(row: str) -> str:
        by = sorted(power.get(row, {}).items(), key=lambda kv: order.get(kv[0], len(order)))
        if not by:
            return ""
        k, m = (sum(c[i] for _, c in by) for i in (0, 1))
        return (f", supported {k} of {m} where positive ("
                + ", ".join(f"{name} {k}/{m}" for name, (k, m) in by) + ")")

    return "rows: " + "; ".join(f"{row} {w} wrong of {n}" + positive(row)
                                for row, (w, n) in count.items())


def _verdict_path_state(commit: str) -> str:
    """Whether this checkout's verdict path equals ``commit``'s, in one line."""
    from tangentlab.claims.fingerprints import stale_modules
    from tangentlab.errors import DataError
    from tangentlab.validate.certificate import fingerprints_at

    try:
        stale = stale_modules(fingerprints_at(commit))
    except DataError as exc:
        return f"verdict path: not compared with this checkout ({exc})"
    if not stale:
        return (f"verdict path: this checkout's equals commit {commit[:12]}'s (a certificate "
                "from these simulations would be current)")
    return (f"verdict path: STALE against this checkout, {len(stale)} module(s) differ: "
            + ", ".join(stale[:4]) + (", ..." if len(stale) > 4 else "")
            + " (a certificate from these simulations would read 'certificate stale')")


def _print_progress(head: str, p) -> None:
    """Print two lines of :class:`~tangentlab.validate.end_to_end_records.Progress` ``p``.

    ``head`` with the counts, the rate and the hours left; then each scenario's count (with its
    wrong statuses).
    """
    rate = (f"{sum(p.seconds) / len(p.seconds):.0f} s per simulation (mean of "
            f"{len(p.seconds)}), about {p.core_hours_left():.1f} process-hours left"
            if p.seconds else "no simulation recorded yet")
    print(f"{head}: {sum(p.done.values())} of {sum(p.total.values())} simulations; {rate}; "
          f"{p.errors} raised")
    print("  " + ", ".join(f"{n} {p.done[n]}/{p.total[n]}"
                           + (f" ({p.wrong[n]} wrong)" if p.wrong[n] else "") for n in p.total))


def _print_together(dirs: Sequence[str], every: Sequence, why: str | None) -> None:
    """The total of ``every`` directory's progress, or one line saying ``why`` there is none.

    ``why``: :func:`_not_one_run`'s answer (None: they are disjoint parts of one run).
    """
    from pathlib import Path

    from tangentlab.validate.end_to_end_records import Progress

    if why:
        print(f"together: no total: {why}")
        return
    names = list(dict.fromkeys(n for p in every for n in p.total))
    total, done, wrong = ({n: sum(getattr(p, field).get(n, 0) for p in every) for n in names}
                          for field in ("total", "done", "wrong"))
    total = Progress(Path(), every[0].commit, any(p.dirty for p in every), "together",
                     all(p.finished for p in every), total, done, wrong,
                     sum(p.errors for p in every), tuple(s for p in every for s in p.seconds))
    _print_progress(f"together ({len(dirs)} directories, "
                    f"{sum(p.finished for p in every)} finished)", total)


def _not_one_run(dirs: Sequence[str], every: Sequence) -> str | None:
    """Why ``dirs`` (with their progress ``every``) are not disjoint parts of one run, or None.

    One run: one config hash and one commit (what ``validate merge`` asks); disjoint: no
    simulation is run by two of the directories (a merged run beside its shards, a shard given
    twice, or shards cut two ways would count simulations twice).
    """
    from itertools import combinations

    from tangentlab.validate.end_to_end_records import read_settings

    hashes = {read_settings(d)["config_hash"] for d in dirs}
    commits = {p.commit for p in every}
    if len(hashes) > 1 or len(commits) > 1:
        return (f"the {len(dirs)} directories are not the parts of one run ({len(hashes)} "
                f"configs, {len(commits)} commits)")
    for (a, pa), (b, pb) in combinations(zip(dirs, every), 2):
        if both := sorted(pa.jobs & pb.jobs):
            name, sim = both[0]
            return (f"{a} and {b} both run {len(both)} simulation(s) ({name} #{sim} first); "
                    "give each part of the run once (the shards, or the merged run alone)")
    return None

"""Reading an end-to-end run directory back: its checks, its statuses, a table of its checks.

Only a finished run is read: a directory holding the settings file of
:mod:`tangentlab.validate.end_to_end_records` but no ``manifest.json`` (unfinished), or a shard
of a run, is a DataError that says what to do. A directory without the settings file (written
before the records were kept, or by hand) is read as it is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tangentlab.errors import DataError
from tangentlab.validate.end_to_end_records import STATUSES_NAME, SimulationResult

__all__ = ["require_finished", "read_statuses", "validated_rows", "format_table"]


def require_finished(run_dir: Path) -> None:
    """DataError when ``run_dir`` holds an unfinished end-to-end run, or a shard of one.

    A directory without the settings file (written before records were kept, or by hand) is
    read as it is.
    """
    from tangentlab.validate.end_to_end_records import is_end_to_end_dir, read_settings, state_text

    if not is_end_to_end_dir(run_dir):
        return
    settings = read_settings(run_dir)
    if settings.get("shard"):
        raise DataError(f"{str(run_dir)!r} holds shard {settings['shard']} of an end-to-end run, "
                        "which judges nothing alone; merge the shards with `tangentlab validate "
                        "merge`")
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
        out.append(SimulationResult(str(name), int(sim), dict(zip(g["row"], g["value"])),
                                    dict(zip(g["row"], g["reason"].fillna(""))), float("nan")))
    return out


def validated_rows(run_dir: str | Path) -> dict[str, bool]:
    """Per prediction row: True when every end-to-end check of the row passed, bound checked.

    Reads ``checks.json`` of an end-to-end run directory. A row whose checks were judged on point
    rates only (a quick run), or that has no check, reads False; so does every row when a
    simulation raised (its ``errors`` check failed). DataError for an unfinished run or a shard.
    """
    import json

    from tangentlab.runs import CHECKS_NAME
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    require_finished(Path(run_dir))
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

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
from tangentlab.validate.end_to_end_records import STATUSES_NAME, UNIT_ENRICHMENT, SimulationResult

__all__ = ["require_finished", "read_statuses", "format_table"]


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

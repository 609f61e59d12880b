"""The tidy results table of a run directory: ``results.csv``, one measured number per row.

The standard columns are :data:`RESULT_COLUMNS`; a row may carry extra columns (e.g.
``manifold``, ``t``), which are written after the standard ones in sorted order. Missing values
are written as empty cells; floats with ``repr``, so a table round-trips exactly. A table is
written atomically (:mod:`tangentlab.atomic`), and a damaged one (empty, cut mid-row, not CSV) is
a :class:`~tangentlab.errors.DataError` naming the file. :mod:`tangentlab.runs` re-exports every
public name here.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tangentlab.atomic import atomic_write_text
from tangentlab.errors import DataError

__all__ = ["RESULT_COLUMNS", "RESULTS_NAME", "write_results", "read_results"]

#: The file name of a run's results table.
RESULTS_NAME = "results.csv"

#: The standard columns of a tidy results table, in order. ``value`` is the measured number,
#: ``prediction`` the theory's value for the same quantity where there is one, ``ci_low`` /
#: ``ci_high`` its confidence interval (always an interval, never a min–max), ``band_low`` /
#: ``band_high`` a spread such as the min and max over controls or checkpoints, ``n`` the sample
#: size behind it.
RESULT_COLUMNS: tuple[str, ...] = (
    "experiment",
    "model",
    "arch",
    "checkpoint",
    "step",
    "layer",
    "site",
    "bucket",
    "subspace",
    "method",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "band_low",
    "band_high",
    "n",
    "prediction",
    "seed",
)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value)
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return _cell(value.item())
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def write_results(rows: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write tidy ``rows`` as CSV to ``path`` atomically.

    Columns: the standard :data:`RESULT_COLUMNS` first (all of them, empty where unused), then
    any extra keys in sorted order. Each row must have ``metric`` and ``value``.
    Floats are written with ``repr`` so the file round-trips exactly (same seed, same bytes).
    """
    rows = [dict(r) for r in rows]
    for i, row in enumerate(rows):
        if "metric" not in row or "value" not in row:
            raise DataError(f"results row {i} lacks 'metric' or 'value': {row!r}")
    extra = sorted({k for r in rows for k in r} - set(RESULT_COLUMNS))
    columns = list(RESULT_COLUMNS) + extra
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return atomic_write_text(path, buf.getvalue())


def read_results(path: str | Path):
    """Read a tidy results CSV (a file, or a run directory holding ``results.csv``) as a DataFrame."""
    import pandas as pd

    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_NAME
    if not p.is_file():
        raise DataError(f"no results table at {str(p)!r}; run the experiment first")
    _check_not_cut(p)
    try:
        return pd.read_csv(p, keep_default_na=True)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{p} is not a readable CSV table ({first}); restore it or re-run the "
                        "stage that wrote it") from None


def _check_not_cut(path: Path) -> None:
    """Refuse an empty results file, and one whose last line was cut short.

    Every results table this package writes ends with a newline. A file that does not, and whose
    last line has fewer fields than its header, was cut mid-row (a copy or a disk that filled).
    Reads the header line and the file's last 64 KiB only (the table itself is read once, by
    pandas).
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.readline()
        fh.seek(max(0, size - 65536))
        tail = fh.read()
    if not head.strip() and not tail.strip():
        raise DataError(f"{path} is empty ({size} bytes); a results table has a header line "
                        "and one row per measured number: restore it or re-run the stage that "
                        "wrote it")
    if tail.endswith(b"\n"):
        return
    last = tail.decode("utf-8", errors="replace").splitlines()[-1]
    if head.rstrip(b"\r\n") == tail.rstrip(b"\r\n") or not last:
        return  # one line only: the header itself (check_results judges its columns)
    n_head = len(next(csv.reader([head.decode("utf-8", errors="replace").rstrip("\r\n")])))
    n_last = len(next(csv.reader([last])))
    if n_last < n_head:
        raise DataError(f"{path} ends in the middle of a row (its last line has {n_last} "
                        f"of {n_head} fields and no newline): the file was cut short; "
                        "restore it or re-run the stage that wrote it")

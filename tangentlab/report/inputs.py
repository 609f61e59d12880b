"""Check the stored tables the report reads before any rule sees them.

A damaged ``results.csv`` (a number overwritten by text, a missing column) must stop the report
with a typed error, never move a verdict silently: text in a numeric column would otherwise read
as "no value" and turn a supported row into an inconclusive one without a word.
"""

from __future__ import annotations

import math
from pathlib import Path

from tangentlab.errors import DataError

__all__ = ["REQUIRED_COLUMNS", "NUMERIC_COLUMNS", "check_results"]

#: Columns every results table must have.
REQUIRED_COLUMNS: tuple[str, ...] = ("metric", "value")
#: Columns whose every cell must be a number or empty.
NUMERIC_COLUMNS: tuple[str, ...] = ("value", "ci_low", "ci_high", "band_low", "band_high", "step",
                                    "prediction")


def _is_number(x) -> bool:
    if x is None:
        return True
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return True
    try:
        float(str(x))
    except ValueError:
        return False
    return True


def check_results(df, path: str | Path):
    """Return ``df`` (a results table read from ``path``) if its columns hold what they should.

    Raises:
        DataError: a required column is missing, or a numeric column holds text; the message
            names the file, the column, the first bad row (1-based data row, and its line in the
            file) and the value found.
    """
    path = Path(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{path} has no {', '.join(repr(c) for c in missing)} column (it has "
                        f"{', '.join(map(str, df.columns)) or 'none'}); a results table holds one "
                        "measured number per row in the columns metric and value")
    for col in NUMERIC_COLUMNS:
        if col not in df.columns or df[col].dtype.kind in "iufb":
            continue
        for i, x in enumerate(df[col].tolist()):
            if isinstance(x, float) and math.isnan(x):
                continue
            if not _is_number(x):
                raise DataError(
                    f"{path}: column {col!r} holds {str(x)[:40]!r} at data row {i + 1} (line "
                    f"{i + 2} of the file), not a number; every {col} must be a number or empty. "
                    "The table is damaged: restore it or re-run the stage that wrote it")
    return df

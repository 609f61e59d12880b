"""One row of ``bridge.csv``: its columns, and the builder every bridge module uses.

A row is an input, a comparison (closed form against measurement, judged by
:func:`~tangentlab.claims.bridge_rules.agreement`) or a peer baseline (context). A measured or
predicted side given as a string is the reason it is :data:`~tangentlab.claims.bridge_rules.
NOT_MEASURABLE`, carried into the note.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tangentlab.claims.bridge_rules import NOT_MEASURABLE, agreement

__all__ = ["COLUMNS", "bridge_row", "interval"]

#: Columns of a bridge row (``bridge.csv`` adds model, arch, site, phase, checkpoint, step).
COLUMNS = ("quantity", "bucket", "role", "predicted", "predicted_low", "predicted_high",
           "measured", "measured_low", "measured_high", "status", "n", "note")


def bridge_row(quantity: str, role: str, *, bucket: str = "all", measured=None, predicted=None,
         status: str = "", n: int | None = None, note: str = "") -> dict[str, Any]:
    """One row (:data:`COLUMNS`); ``measured``/``predicted``: (value, low, high) or a reason."""
    nan = float("nan")
    m = measured if isinstance(measured, tuple) else (nan, nan, nan)
    p = predicted if isinstance(predicted, tuple) else (nan, nan, nan)
    reasons = [x for x in (measured, predicted) if isinstance(x, str) and x]
    if role == "comparison":
        status = agreement(*p, *m)
    elif not status:
        status = "measured" if isinstance(measured, tuple) and math.isfinite(m[0]) else NOT_MEASURABLE
    note = "; ".join([*([f"{NOT_MEASURABLE}: " + r for r in reasons]), *([note] if note else [])])
    return {"quantity": quantity, "bucket": bucket, "role": role,
            "predicted": p[0], "predicted_low": p[1], "predicted_high": p[2],
            "measured": m[0], "measured_low": m[1], "measured_high": m[2],
            "status": status, "n": n, "note": note}


def interval(value: float, reps: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """(value, low, high): the percentile interval of the finite replicates ``reps``."""
    reps = np.asarray(reps, dtype=np.float64)
    reps = reps[np.isfinite(reps)]
    if reps.size < 2 or not math.isfinite(value):
        return (float(value), float("nan"), float("nan"))
    a = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return (float(value), float(lo), float(hi))

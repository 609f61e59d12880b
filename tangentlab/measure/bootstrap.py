"""The percentile bootstrap interval the Zipf and pinning fits share.

>>> import numpy as np
>>> reps, lo, hi = percentile_interval([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, minimum=3, what="x")
>>> (float(lo), float(hi))
(2.0, 4.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tangentlab.errors import InsufficientSamplesError

__all__ = ["percentile_interval"]


def percentile_interval(replicates: Sequence[float] | np.ndarray, confidence: float, *,
                        minimum: int, what: str) -> tuple[np.ndarray, float, float]:
    """The replicates ``(n,)`` as float64 and their central ``confidence`` percentile interval.

    Raises:
        InsufficientSamplesError: fewer than ``minimum`` replicates could be computed; ``what``
            says what to pass instead (the message ends with it).
    """
    reps = np.asarray(replicates, dtype=np.float64)
    if reps.size < minimum:
        raise InsufficientSamplesError(f"only {reps.size} bootstrap replicates could be "
                                       f"computed (at least {minimum} needed); {what}")
    a = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [a, 1 - a])
    return reps, float(lo), float(hi)

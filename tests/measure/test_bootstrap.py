"""The percentile bootstrap interval the Zipf and pinning fits share (measure/bootstrap.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import InsufficientSamplesError
from tangentlab.measure import bootstrap, pinning, zipf


def test_interval_is_the_central_quantiles_and_too_few_replicates_are_refused():
    reps = np.random.default_rng(0).standard_normal(400)
    arr, lo, hi = bootstrap.percentile_interval(list(reps), 0.9, minimum=10, what="pass more")
    assert arr.dtype == np.float64 and (lo, hi) == tuple(np.quantile(reps, [0.05, 0.95]))
    with pytest.raises(InsufficientSamplesError, match=r"only 3 .*at least 10 needed\); pass more"):
        bootstrap.percentile_interval([1.0, 2.0, 3.0], 0.9, minimum=10, what="pass more")


def test_zipf_and_pinning_share_it():
    assert zipf.percentile_interval is pinning.percentile_interval is bootstrap.percentile_interval

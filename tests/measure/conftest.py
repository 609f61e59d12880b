"""Fixtures for tests/measure.

The measurement tests do many small (d <= 128) linear-algebra calls. On the 2-core machines a
multi-threaded BLAS makes those several times slower when other processes compete for the cores
(measured: 20 ms against 3 ms per control test at d=128), so numpy's BLAS runs single-threaded
here. Results do not depend on the thread count beyond float rounding.
"""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True)
def _single_threaded_blas():
    with threadpool_limits(limits=1, user_api="blas"):
        yield

"""The pre-pass memory budget of :mod:`tangentlab.empirical.measurement.collect`."""

import pytest

from tangentlab.empirical.measurement.collect import FIT_CACHE_BYTES, fit_cache_budget
from tangentlab.errors import ConfigError


def test_fit_cache_budget_reads_megabytes_and_refuses_text(monkeypatch):
    monkeypatch.delenv("TANGENTLAB_FIT_CACHE_MB", raising=False)
    assert fit_cache_budget() == FIT_CACHE_BYTES
    monkeypatch.setenv("TANGENTLAB_FIT_CACHE_MB", "1.5")
    assert fit_cache_budget() == 3 * 2**19
    monkeypatch.setenv("TANGENTLAB_FIT_CACHE_MB", "0")
    assert fit_cache_budget() == -1  # nothing kept, not even an empty record
    monkeypatch.setenv("TANGENTLAB_FIT_CACHE_MB", "lots")
    with pytest.raises(ConfigError, match="TANGENTLAB_FIT_CACHE_MB must be a number"):
        fit_cache_budget()

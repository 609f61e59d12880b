"""The tested subspaces and their pools, with the per-measurement cache (issue 21)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tangentlab.empirical.measurement.proxy_schedule import energy_test_subspaces, ones_space


def _proxies(d: int, r: int, seed: int):
    rng = np.random.default_rng(seed)
    fixed = np.linalg.qr(rng.standard_normal((d, r)))[0]
    refit = np.linalg.qr(rng.standard_normal((d, r)))[0]
    return SimpleNamespace(fixed=fixed, refit=refit)


CFG = SimpleNamespace(control_pool=12, seed=3)


def test_cached_pools_equal_uncached_ones_and_are_shared_read_only():
    d, r = 24, 3
    ones = ones_space(d)
    a, b = _proxies(d, r, 0), _proxies(d, r, 1)
    b.fixed = a.fixed  # the fixed proxy is the same at every checkpoint
    cache: dict = {}
    first = energy_test_subspaces(a, CFG, ones, cache)
    second = energy_test_subspaces(b, CFG, ones, cache)
    for got, proxies in ((first, a), (second, b)):
        want = energy_test_subspaces(proxies, CFG, ones)  # no cache: everything drawn anew
        for space in (0, 1):
            for label in ("fixed", "refit"):
                for x, y in zip(got[space][label], want[space][label], strict=True):
                    np.testing.assert_array_equal(x, y)
    # the full-space pool of one shape is one array; the fixed proxy's pools are reused
    assert first[0]["fixed"][2] is first[0]["refit"][2] is second[0]["refit"][2]
    assert first[1]["fixed"][2] is second[1]["refit"][2]
    assert first[0]["fixed"][1] is second[0]["fixed"][1]
    assert first[1]["fixed"][1] is second[1]["fixed"][1]
    # the refit proxy changed, so its complement pool was drawn anew
    assert not np.array_equal(first[0]["refit"][1], second[0]["refit"][1])
    with pytest.raises(ValueError, match="read-only"):
        first[0]["fixed"][1][0, 0, 0] = 1.0
    keys = {k[0] for k in cache}
    assert keys == {"full", "normal"} and len(cache) == 4  # 2 full shapes + 2 fixed pools


def test_without_a_refit_proxy_only_the_fixed_one_is_tested():
    d, r = 16, 2
    p = _proxies(d, r, 2)
    p.refit = None
    plain, constrained = energy_test_subspaces(p, CFG, ones_space(d), {})
    assert list(plain) == ["fixed"] and list(constrained) == ["fixed"]
    Q, pool, full = plain["fixed"]
    assert pool.shape == (12, d, r) and full.shape == (12, d, r)
    assert np.allclose(np.einsum("dr,kds->krs", Q, pool), 0, atol=1e-12)  # complement controls
    assert constrained["fixed"][0].shape == (d - 1, r)

"""frequency-attenuation: independent Monte Carlo, hypothesis properties, mutations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tangentlab.errors import ValidationError
from tangentlab.theory import get
from tangentlab.theory.attenuation import (
    attenuation,
    attenuation_limit,
    occurrence_visibility,
    type_visibility,
    visibility_by_rank,
)


def test_pooled_visibilities_match_independent_monte_carlo():
    rng = np.random.default_rng(5)
    V, s, al, t0, m = 40, 1.0, 0.25, 0.05, 1
    kappa = 3.0
    r = np.arange(1, V + 1)
    f = r**-s / np.sum(r**-s)
    t_r = t0 * r ** (s * al)
    n = 400_000
    # occurrence pooling: draw tokens by frequency; type pooling: uniform over types
    for pool, p in (("occurrence", f), ("type", np.full(V, 1 / V))):
        tok = rng.choice(V, size=n, p=p)
        u = t_r[tok] * rng.standard_normal(n)
        q = 0.5 * kappa * u**2
        # per-token centred pooling (trace term off)
        qc = q - (np.bincount(tok, q, V) / np.maximum(np.bincount(tok, minlength=V), 1))[tok]
        uc = u - (np.bincount(tok, u, V) / np.maximum(np.bincount(tok, minlength=V), 1))[tok]
        est = np.var(qc) / np.var(uc)
        fn = occurrence_visibility if pool == "occurrence" else type_visibility
        assert est == pytest.approx(fn(s, al, t0, kappa**2, m, V), rel=0.05)
        # uncentred pooling: between-token centroid spread (tr A)^2 = kappa^2 for a curve
        est_u = np.var(q) / np.var(u)
        assert est_u == pytest.approx(fn(s, al, t0, kappa**2, m, V, trace_sq_sum=kappa**2),
                                      rel=0.05)
    att = occurrence_visibility(s, al, t0, 1.0, 2, V) / type_visibility(s, al, t0, 1.0, 2, V)
    assert attenuation(s, al, V) == pytest.approx(att, rel=1e-12)


def test_visibility_by_rank():
    v = visibility_by_rank(np.array([1, 4]), 1.0, 0.5, 0.1, 2.0, 2, 10)
    assert v == pytest.approx(np.array([0.1**2, (0.1 * 2) ** 2]) * 2.0 / 4)
    with pytest.raises(ValidationError, match="rank"):
        visibility_by_rank(11, 1.0, 0.5, 0.1, 2.0, 2, 10)
    with pytest.raises(ValidationError):
        attenuation(-1.0, 0.5, 10)
    with pytest.raises(ValidationError):
        attenuation(1.0, -0.1, 10)


def test_no_pinning_attenuation_is_exactly_one():
    # Issue 10, item 7: alpha = 0 was refused, although every token then has spread t0 and the
    # two pools see the same visibility.
    assert attenuation(1.0, 0.0, 10) == 1.0
    assert np.all(attenuation(np.array([0.5, 1.0, 1.5]), 0.0, 1000) == 1.0)
    assert attenuation_limit(1.5, 0.0) == 1.0 and attenuation_limit(0.5, 0.0) == 1.0
    ratio = occurrence_visibility(1.0, 0.0, 0.1, 2.0, 2, 30) / type_visibility(1.0, 0.0, 0.1, 2.0,
                                                                              2, 30)
    assert ratio == pytest.approx(1.0, rel=1e-12)
    # and just above 0 it is below 1 and continuous
    assert 0.99 < attenuation(1.0, 1e-4, 10) < 1.0


@given(s=st.floats(0.05, 3.0), al=st.floats(0.01, 2.0), V=st.integers(2, 3000))
def test_attenuation_below_one(s, al, V):
    if 4 * s * al * np.log(V) > 600:  # outside float64 range of the harmonic sums
        return
    a = attenuation(s, al, V)
    assert 0 < a < 1


def test_attenuation_limit_values():
    assert attenuation_limit(2.0, 0.1) == 0.0  # s - 2 s alpha > 1
    lim = attenuation_limit(0.8, 0.25)
    assert 0 < lim < 1
    assert attenuation(0.8, 0.25, 300_000) == pytest.approx(lim, rel=0.02)


def test_mutation_pinning_exponent_fails_verify():
    d = get("frequency-attenuation").mutated("pinning", lambda e: e.func(e.lhs, e.rhs**2))
    assert not d.verify(seed=0).passed

"""river-valley: simulated optimizers, the ordering flip, band, switch point, mutations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tangentlab.errors import ValidationError
from tangentlab.theory import get
from tangentlab.theory.river_valley import hitting_time, oscillation_band, sign_faster, switch_point


def _run(step, x0, eps, max_steps=200_000):
    x = x0
    for k in range(max_steps):
        if abs(x) <= eps:
            return k
        x = step(x)
    return math.inf


def test_hitting_times_match_independent_iteration():
    x0, lam, eta, eps, es = 3.0, 0.05, 0.5, 0.08, 0.1
    gd = _run(lambda x: x - eta * lam * x, x0, eps)
    sg = _run(lambda x: x - es * np.sign(x), x0, eps)
    assert hitting_time("gd", x0, lam, eta, eps) == gd
    assert hitting_time("sign", x0, lam, eta, eps, eta_sign=es) == sg
    # sign descent cannot enter eps < eta/2 unless the lattice lands there
    assert hitting_time("sign", 1.05, lam, eta, 0.01, eta_sign=0.1) == math.inf


def test_two_stage_switch_point_is_optimal_by_brute_force():
    x0, lam, eta, eps, es = 2.37, 0.02, 0.9, 0.01, 0.1
    times = []
    for k1 in range(0, 30):
        def step(x, k=[0], k1=k1):  # noqa: B006 - step counter
            k[0] += 1
            return x - es * np.sign(x) if k[0] <= k1 else x - eta * lam * x
        times.append(_run(step, x0, eps))
    k_best = int(switch_point(x0, lam, eta, eps, eta_sign=es))
    assert times[k_best] == min(times)
    assert hitting_time("two-stage", x0, lam, eta, eps, eta_sign=es) == min(times)
    assert min(times) < hitting_time("gd", x0, lam, eta, eps)


def test_oscillation_band():
    es = 0.1
    x = 1.234
    for _ in range(40):
        x = x - es * np.sign(x)
    amp = max(abs(x), abs(x - es * np.sign(x)))
    assert amp == pytest.approx(oscillation_band(es, 1.234))
    assert es / 2 <= amp < es
    assert oscillation_band(es) == es


@given(x0=st.floats(0.5, 30.0), lam=st.floats(0.01, 0.5), eta=st.floats(0.1, 1.0),
       es=st.floats(0.01, 0.5), e=st.floats(0.5, 2.0))
def test_ordering_flips_where_derivation_says(x0, lam, eta, es, e):
    eps = e * es
    assume(eta * lam < 1 and x0 > eps)
    gam = -math.log(1 - eta * lam)
    margin = (x0 - eps) / es - math.log(x0 / eps) / gam
    assume(abs(margin) > 2)  # away from the rounding zone of the discrete times
    sim_gd = _run(lambda x: x - eta * lam * x, x0, eps)
    sim_sign = _run(lambda x: x - es * np.sign(x), x0, eps)
    assert (sim_sign < sim_gd) == bool(sign_faster(x0, lam, eta, eps, eta_sign=es))
    assert (sim_sign < sim_gd) == (margin < 0)


def test_bad_parameters():
    with pytest.raises(ValidationError):
        hitting_time("adam", 1.0, 0.1, 0.1, 0.01)
    with pytest.raises(ValidationError):
        hitting_time("gd", 1.0, 0.1, -0.1, 0.01)


def test_mutation_gd_step_fails_verify():
    d = get("river-valley").mutated("gd_step", lambda e: e.func(e.lhs, e.rhs * 0.99))
    assert not d.verify(seed=0).passed


def test_mutation_sign_step_fails_verify():
    d = get("river-valley")
    k = d.symbols["k"]
    mut = d.mutated("sign_solution", lambda e: e.func(e.lhs, e.rhs.subs(k, 2 * k)))
    rep = mut.verify(seed=0)
    assert not rep.passed
    assert "simulated hitting times and band" in {c.name for c in rep.failures}

"""Removed variance and mean-ablation (issue 10.5) and the constrained gradient space (10.6)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tangentlab.errors import RankError, ShapeError
from tangentlab.measure import energy_fraction, normal_controls
from tangentlab.measure.constrained import (
    complement_space,
    forced_direction_cosines,
    normalised_enrichment,
    reachable_baseline,
    restrict_to_complement,
)
from tangentlab.measure.controls import mean_ablate, removed_variance


def _acts(seed, n=600, d=30, spread=0.3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * np.exp(spread * rng.standard_normal(d)) + 5.0


def _pca(H, r):
    w, V = np.linalg.eigh(np.cov(H.T))
    return V[:, ::-1][:, :r]


@given(seed=st.integers(0, 10_000), r=st.integers(1, 4), s=st.floats(0.1, 1.0))
def test_removed_variance_is_what_the_mean_ablation_removes(seed, r, s):
    H = _acts(seed)
    S = np.cov(H.T)
    Q = _pca(H, r)
    assert removed_variance(Q, S) == pytest.approx(np.trace(Q.T @ S @ Q), rel=1e-12)
    # the actual mean-ablation, on the same rows, agrees (also along a scaled basis)
    for B in (Q, np.sqrt(s) * Q):
        Hp = mean_ablate(H, B)
        assert np.trace(S) - np.trace(np.cov(Hp.T)) == pytest.approx(removed_variance(B, S),
                                                                     rel=1e-9)
    # a plain rank-r complement control removes less (Q is the top-r PCA subspace)
    N = normal_controls(Q, 10, seed)
    assert np.all(removed_variance(N, S) < removed_variance(Q, S))


def test_removed_variance_formula_for_a_scaled_direction():
    S = np.diag([4.0, 1.0, 2.0])
    v = np.array([[0.0], [0.0], [1.0]])
    for s in (0.3, 0.7, 1.0):
        assert removed_variance(s * v, S) == pytest.approx((1 - (1 - s**2) ** 2) * 2.0)
    assert removed_variance(np.eye(3)[:, :2], S) == pytest.approx(5.0)


def test_forced_cosines_detect_each_constraint():
    rng = np.random.default_rng(0)
    d, n = 24, 300
    H = rng.standard_normal((n, d)) + 2.0
    G = rng.standard_normal((n, d))
    free = forced_direction_cosines(G, H)
    assert free["ones_max"] > 0.3 and free["n"] == n
    G1 = G - G.mean(axis=1, keepdims=True)  # ⟂ 1
    c1 = forced_direction_cosines(G1, H)
    assert c1["ones_max"] < 1e-12 and c1["centred_max"] > 0.3
    Hc = H - H.mean(axis=1, keepdims=True)
    u = Hc / np.linalg.norm(Hc, axis=1, keepdims=True)
    G2 = G1 - np.sum(G1 * u, 1, keepdims=True) * u  # ⟂ 1 and ⟂ centred h
    c2 = forced_direction_cosines(G2, H)
    # (⟂ 1 and ⟂ centred h imply ⟂ h, since h = centred h + mean * 1)
    assert c2["ones_max"] < 1e-12 and c2["centred_max"] < 1e-12 and c2["raw_max"] < 1e-12
    hr = H / np.linalg.norm(H, axis=1, keepdims=True)
    G3 = G - np.sum(G * hr, 1, keepdims=True) * hr  # RMSNorm: ⟂ h
    c3 = forced_direction_cosines(G3, H)
    assert c3["raw_max"] < 1e-12 and c3["ones_max"] > 0.1  # RMSNorm forces h, not 1
    G3[0] = 0
    assert forced_direction_cosines(G3, H)["n_zero"] == 1


def test_forcing_lowers_raw_energy_but_not_constrained_energy():
    # A gradient field forced ⟂ 1 (isotropic otherwise) and a subspace containing 1.
    rng = np.random.default_rng(4)
    d, n = 16, 20000
    G = rng.standard_normal((n, d))
    G = G - G.mean(axis=1, keepdims=True)
    ones = np.ones((d, 1)) / np.sqrt(d)
    v = np.eye(d)[:, :1] - ones * ones[0, 0]
    Q = np.hstack([ones, v / np.linalg.norm(v)])  # (d, 2), contains 1
    C = G.T @ G / n
    raw = energy_fraction(Q, C)
    assert raw / (2 / d) < 0.6  # raw energy about half the isotropic baseline
    space = complement_space(ones)
    Qc = restrict_to_complement(Q, space)
    assert Qc.shape == (d - 1, 1)  # the 1 direction is unreachable and dropped
    Gc = space.coordinates(G)
    Cc = Gc.T @ Gc / n
    constrained = energy_fraction(Qc, Cc)
    assert constrained / (1 / (d - 1)) == pytest.approx(1.0, abs=0.05)
    # per-row version: the reachable baseline of Q under g ⟂ 1 (forced as 'centred' with h = 0
    # mean rows would be degenerate; use raw with h = 1 for every row)
    b = reachable_baseline(Q, np.ones((5, d)), forced="raw")
    assert b == pytest.approx((2 - 1) / (d - 1))
    assert raw / b == pytest.approx(1.0, abs=0.05)
    with pytest.raises(RankError):
        restrict_to_complement(ones, ones)


def test_reachable_baseline_and_normalised_enrichment():
    rng = np.random.default_rng(1)
    d = 12
    H = rng.standard_normal((50, d))
    Q = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    b_raw = reachable_baseline(Q, H)
    hr = H / np.linalg.norm(H, axis=1, keepdims=True)
    expect = np.mean([np.trace(Q.T @ (np.eye(d) - np.outer(h, h)) @ Q) for h in hr]) / (d - 1)
    assert b_raw == pytest.approx(expect, rel=1e-12)
    stack = np.stack([Q, Q])
    assert np.allclose(reachable_baseline(stack, H, forced="centred"),
                       reachable_baseline(Q, H, forced="centred"))
    assert normalised_enrichment(0.2, 0.1, [0.1, 0.1], [0.1, 0.1]) == pytest.approx(2.0)
    with pytest.raises(ShapeError):
        reachable_baseline(Q, H, forced="ln")


def _rms_null(seed, *, d=16, r=4, n_batches=16, rows=32, small=0.3):
    """A null at an RMSNorm-like site: g_i isotropic in h_i's complement, with a norm that
    depends on h_i's direction (rows whose h_i lies in span(Q) have gradients ``small`` times
    as large). Returns Q, the batches of (H, G)."""
    rng = np.random.default_rng(seed)
    Q = np.eye(d)[:, :r]
    out = []
    for _ in range(n_batches):
        inside = rng.random(rows) < 0.5
        H = rng.standard_normal((rows, d))
        H[inside, r:] = 0.0
        H[~inside, :r] = 0.0
        G = rng.standard_normal((rows, d))
        u = H / np.linalg.norm(H, axis=1, keepdims=True)
        G -= np.einsum("nd,nd->n", G, u)[:, None] * u
        G[inside] *= small
        out.append((H, G))
    return Q, out


def test_weighted_reachable_baseline_is_the_null_expectation_and_calibrates_p():
    # Issue 18, item 6: unweighted, the baseline of Q averages rows whose gradients are small
    # (h in span(Q): g loses a direction inside Q) with rows whose gradients carry the energy,
    # so E_T / b_T is inflated under the null and p sits at its floor too often.
    from tangentlab.measure import batch_control_test, batch_energies, full_space_controls

    d, r = 16, 4
    nulls, floor_w, floor_u, ratio_w, ratio_u = 200, 0, 0, [], []
    for s in range(nulls):
        Q, bs = _rms_null(s, d=d, r=r)
        H = np.concatenate([h for h, _ in bs])
        w = np.concatenate([np.sum(g * g, 1) for _, g in bs])
        full = full_space_controls(Q, 40, s)
        pool = normal_controls(Q, 40, s)
        be = batch_energies(Q, pool, [g for _, g in bs], full_controls=full)
        e_t = be.tangent.sum() / be.trace.sum()
        for weights, ratios in ((w, ratio_w), (None, ratio_u)):
            b_t = reachable_baseline(Q, H, forced="raw", weights=weights)
            b_f = reachable_baseline(full, H, forced="raw", weights=weights)
            b_c = reachable_baseline(pool, H, forced="raw", weights=weights)
            ratios.append(e_t / b_t)
            from dataclasses import replace

            sc = replace(be, tangent=be.tangent / b_t, controls=be.controls / b_c[None],
                         full=be.full / b_f[None])
            p = batch_control_test(sc, n_controls=20, n_boot=2).p_value
            if weights is None:
                floor_u += p <= 1 / 21 + 1e-12
            else:
                floor_w += p <= 1 / 21 + 1e-12
    # weighted: the energy over its baseline is 1 on average (exact expectation), p calibrated
    assert np.mean(ratio_w) == pytest.approx(1.0, abs=0.03)
    assert floor_w / nulls <= 0.06
    # unweighted: biased up, and p at its floor far above the nominal 1/21
    assert np.mean(ratio_u) > 1.1 and floor_u / nulls > 0.2
    with pytest.raises(ShapeError, match="one value per row"):
        reachable_baseline(Q, H, weights=w[:-1])

"""batch_energies / batch_control_test: per-batch scalars and intervals that cover (issue 10.3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tangentlab.errors import (
    InsufficientSamplesError,
    NotOrthonormalError,
    ShapeError,
    ValidationError,
)
from tangentlab.measure import (
    BatchEnergies,
    batch_control_test,
    batch_energies,
    control_test,
    energy_fraction,
    energy_fractions,
    normal_controls,
    oracle_energy,
    random_subspace,
)


def _batches(seed, B=6, n=20, d=10):
    rng = np.random.default_rng(seed)
    scale = np.r_[3.0, 2.0, np.ones(d - 2)]
    return [rng.standard_normal((n, d)) * scale for _ in range(B)]


def test_batch_energies_equal_energy_of_pooled_rows():
    bs = _batches(0)
    Q = np.eye(10)[:, :2]
    pool = normal_controls(Q, 30, seed=1)
    be = batch_energies(Q, pool, bs)
    X = np.concatenate(bs)
    C = X.T @ X / len(X)
    assert be.tangent.shape == (6,) and be.controls.shape == (6, 30) and be.trace.shape == (6,)
    assert be.tangent.sum() / be.trace.sum() == pytest.approx(energy_fraction(Q, C), rel=1e-12)
    assert np.allclose(be.controls.sum(0) / be.trace.sum(), energy_fractions(pool, C), rtol=1e-12)
    # the row-projection path (a pool small enough that (K + 1) r <= d) gives the same numbers
    be_small = batch_energies(Q, pool[:3], bs)
    assert np.allclose(be_small.controls, be.controls[:, :3], rtol=1e-12)
    assert np.allclose(be_small.tangent, be.tangent, rtol=1e-12)
    # torch input of any dtype, and a generator of batches
    bt = batch_energies(Q, pool, (torch.tensor(b, dtype=torch.float64) for b in bs))
    assert np.allclose(bt.controls, be.controls, rtol=1e-12) and bt.rows.tolist() == [20] * 6
    assert be.controls.dtype == np.float64


def test_point_estimates_match_control_test_with_the_same_controls():
    bs = _batches(3)
    Q = random_subspace(10, 2, 4)
    pool = normal_controls(Q, 50, seed=5)
    X = np.concatenate(bs)
    C = X.T @ X / len(X)
    ref = control_test(Q, C, n_controls=20, seed=5)  # energy, oracle and position only
    be = batch_energies(Q, pool, bs)
    res = batch_control_test(be, n_controls=20, n_boot=200, seed=0, oracle=oracle_energy(C, 2))
    e_ctrl = energy_fractions(pool[:20], C)
    assert res.energy == pytest.approx(ref.energy, rel=1e-12)
    assert np.allclose(res.controls, e_ctrl, rtol=1e-12)
    assert res.enrichment == pytest.approx(res.energy / e_ctrl.mean(), rel=1e-12)
    assert res.p_value == (1 + np.sum(e_ctrl >= res.energy)) / 21
    assert res.oracle == pytest.approx(ref.oracle) and res.position == pytest.approx(ref.position)
    assert res.control_band_low == pytest.approx(e_ctrl.min(), rel=1e-12)
    assert res.control_band_high == pytest.approx(e_ctrl.max(), rel=1e-12)
    assert res.energy_ci_low < res.energy < res.energy_ci_high
    assert res.enrichment_ci_low < res.enrichment < res.enrichment_ci_high
    assert res.n_replicates == res.n_replicates_kept == 200
    d = res.to_dict()
    assert isinstance(d["controls"], list) and d["interval"] == "bootstrap"
    # no oracle given: NaN, not a made-up number
    assert np.isnan(batch_control_test(be, n_boot=10).oracle)


@pytest.mark.parametrize("interval", ["bootstrap", "bca", "jackknife", "studentized"])
def test_each_interval_brackets_the_estimate_and_is_reproducible(interval):
    be = batch_energies(np.eye(10)[:, :2], normal_controls(np.eye(10)[:, :2], 40, 1), _batches(7))
    a = batch_control_test(be, n_boot=300, seed=3, interval=interval)
    b = batch_control_test(be, n_boot=300, seed=3, interval=interval)
    assert repr(a.to_dict()) == repr(b.to_dict())
    assert a.energy_ci_low < a.energy < a.energy_ci_high
    assert a.enrichment_ci_low < a.enrichment < a.enrichment_ci_high
    assert a.n_replicates == (6 if interval == "jackknife" else 300)


def test_control_draw_is_inside_the_interval():
    # With identical batches, resampling batches changes nothing: the interval's whole width comes
    # from redrawing controls. The old fixed-control bootstrap has zero width here.
    rng = np.random.default_rng(2)
    one = rng.standard_normal((40, 10)) * np.r_[3.0, np.ones(9)]
    bs = [one] * 8
    Q = np.eye(10)[:, :1]
    be = batch_energies(Q, normal_controls(Q, 200, 0), bs)
    res = batch_control_test(be, n_boot=500, seed=0)
    assert res.energy_ci_high - res.energy_ci_low < 1e-12
    assert res.enrichment_ci_high - res.enrichment_ci_low > 0.05 * res.enrichment
    sums = np.stack([b.T @ b for b in bs])
    old = control_test(Q, sums.sum(0) / 320, n_controls=20, seed=0, batches=sums, n_boot=200)
    assert old.enrichment_ci_high - old.enrichment_ci_low < 1e-9


def test_non_finite_replicates_are_counted_not_dropped():
    d = 6
    Q = np.eye(d)[:, :1]
    bs = [np.zeros((5, d)), np.random.default_rng(0).standard_normal((5, d))]
    be = batch_energies(Q, normal_controls(Q, 10, 0), bs)
    res = batch_control_test(be, n_controls=5, n_boot=400, seed=1)
    # about a quarter of the replicates draw the all-zero batch twice: 0/0
    assert res.n_replicates == 400
    assert 40 < res.n_replicates - res.n_replicates_kept < 160


def test_concat_and_errors():
    Q = np.eye(10)[:, :2]
    pool = normal_controls(Q, 20, 1)
    bs = _batches(1)
    a, b = batch_energies(Q, pool, bs[:3]), batch_energies(Q, pool, bs[3:])
    ab = a.concat(b)
    full = batch_energies(Q, pool, bs)
    assert isinstance(ab, BatchEnergies) and ab.n_batches == 6
    assert np.allclose(ab.controls, full.controls) and np.allclose(ab.trace, full.trace)
    with pytest.raises(ShapeError, match="same Q and pool"):
        a.concat(batch_energies(Q, pool[:5], bs))
    with pytest.raises(ValidationError, match="exceeds the control pool"):
        batch_control_test(a, n_controls=21)
    with pytest.raises(ValidationError, match="interval"):
        batch_control_test(a, interval="percentile")
    with pytest.raises(InsufficientSamplesError, match="at least 2 batches"):
        batch_control_test(batch_energies(Q, pool, bs[:1]))
    with pytest.raises(InsufficientSamplesError, match="empty"):
        batch_energies(Q, pool, [])
    with pytest.raises(ShapeError, match=r"\(K, 10, 2\)"):
        batch_energies(Q, pool[:, :, :1], bs)
    with pytest.raises(NotOrthonormalError):
        batch_energies(Q, pool * 2, bs)
    with pytest.raises(ShapeError, match=r"grad_batches\[0\]"):
        batch_energies(Q, pool, [np.ones((3, 9))])


@pytest.mark.slow
def test_coverage_by_simulation_new_covers_old_does_not():
    # Issue 10, item 3: a known enrichment, window-shared context and batch scales; nominal 95%.
    # Measured (seed 0, 1000 simulations): new 0.941 (energy) / 0.966 (enrichment) over 32
    # batches; old fixed-control percentile bootstrap over 8 batches 0.851 / 0.808.
    from tangentlab.validate.studies import coverage_study

    st = coverage_study(n_sims=600, n_batches=32, old_batches=8, pool=100, n_boot=500, seed=0)
    print(st.to_dict())
    assert 0.93 <= st.coverage_enrichment <= 0.97
    assert 0.92 <= st.coverage_energy <= 0.97
    assert st.old_coverage_enrichment < 0.9 and st.old_coverage_energy < 0.9
    assert st.replicates_dropped == 0


def test_grouped_batch_energies_split_rows_by_label():
    from tangentlab.measure import grouped_batch_energies

    bs = _batches(2)
    rng = np.random.default_rng(0)
    labs = [rng.integers(0, 3, size=len(b)) for b in bs]
    labs[0][:] = 0  # batch 0 holds only label 0
    Q = np.eye(10)[:, :2]
    pool = normal_controls(Q, 15, 3)
    out = grouped_batch_energies(Q, pool, bs, labs)
    assert list(out) == [0, 1, 2]
    for lab, be in out.items():
        ref = batch_energies(Q, pool, [b[g == lab] for b, g in zip(bs, labs)])
        assert np.allclose(be.tangent, ref.tangent) and np.allclose(be.controls, ref.controls)
        assert be.rows.tolist() == ref.rows.tolist()
    assert out[1].rows[0] == 0 and out[1].trace[0] == 0
    total = sum(be.trace for be in out.values())
    assert np.allclose(total, batch_energies(Q, pool, bs).trace)
    with pytest.raises(ShapeError, match="one label per row"):
        grouped_batch_energies(Q, pool, bs[:1], [labs[0][:-1]])


@pytest.mark.parametrize("n, d, m", [(5, 8, 6), (400, 8, 300)])  # row route, Gram route
def test_grouped_energy_sums_agree_with_per_row_projection(n, d, m):
    """Both routes (every row projected, or each group's Gram matrix) give the same sums."""
    import torch

    from tangentlab.measure.batch_energy import _grouped_energy_sums

    rng = np.random.default_rng(3)
    g, bases = rng.standard_normal((n, d)), rng.standard_normal((d, m))
    inv = rng.integers(0, 3, n)
    inv[0], inv[1], inv[2] = 0, 1, 2
    want = np.zeros((3, m))
    np.add.at(want, inv, (g @ bases) ** 2)
    got = _grouped_energy_sums(torch.from_numpy(g), torch.from_numpy(bases), inv, 3)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_float32_projection_agrees_with_float64():
    bs = _batches(4, d=40)
    Q = np.eye(40)[:, :2]
    pool = normal_controls(Q, 10, 0)
    a = batch_energies(Q, pool, bs)
    b = batch_energies(Q, pool, bs, dtype="float32")
    assert np.allclose(a.controls, b.controls, rtol=1e-5) and not np.array_equal(a.controls,
                                                                                  b.controls)
    with pytest.raises(ValidationError, match="dtype"):
        batch_energies(Q, pool, bs, dtype="float16")


# -- issue 18: the p-value from full-space controls, calibrated at every r/d ---------------------


def _null_p_values(d, r, sims, seed, *, full):
    """Null p-values: Q Haar, C a rotated log-normal spectrum; two 'batches' whose sum is C."""
    from tangentlab.measure import full_space_controls

    rng = np.random.default_rng([seed, d, r])
    out = np.empty((sims, 2))
    for s in range(sims):
        lam = np.exp(0.8 * rng.standard_normal(d))
        U = np.linalg.qr(rng.standard_normal((d, d)))[0]
        L = U * np.sqrt(lam)  # C = L L^T; the rows L^T give G^T G = C exactly
        Q = random_subspace(d, r, int(rng.integers(2**31)))
        cseed = int(rng.integers(2**31))
        be = batch_energies(Q, normal_controls(Q, 20, cseed), [L.T / 2, L.T / 2],
                            full_controls=full_space_controls(Q, 20, cseed) if full else None)
        res = batch_control_test(be, n_controls=20, n_boot=2, seed=s)
        out[s] = res.p_value, res.p_value_complement
        assert res.p_value_controls == ("full" if full else "complement")
    return out


@pytest.mark.parametrize("d, r", [(64, 1), (64, 4), (32, 8)])  # r/d = 1/64, 1/16, 1/4
def test_p_value_from_full_space_controls_is_calibrated_at_every_r_over_d(d, r):
    # Under the null (C's law rotation invariant, Q independent of it) the full-space controls
    # are exchangeable with Q: P(p <= 1/21) = 1/21 = 0.048 exactly, whatever r/d. Measured
    # (seed 0, 800 nulls): full 0.054 / 0.051 / 0.048, complement 0.058 / 0.060 / 0.109.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small projections: threads only contend on a shared machine
    try:
        p = _null_p_values(d, r, 800, 0, full=True)
    finally:
        torch.set_num_threads(threads)
    assert np.mean(p[:, 0] <= 0.05) <= 0.06
    if r / d >= 0.25:  # the complement p-value, read on the same nulls, is anti-conservative
        assert np.mean(p[:, 1] <= 0.05) > 0.08


def test_stream_bases_are_q_then_the_pool_then_the_full_pool_as_column_blocks():
    """The device layout built in _setup: base j of [Q, controls, full] is columns j r..(j+1) r."""
    import torch

    from tangentlab.measure import EnergyStream, full_space_controls

    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((9, 3)))[0]
    pool, full = normal_controls(Q, 4, 1), full_space_controls(Q, 2, 1)
    s = EnergyStream(Q, pool, full_controls=full)
    s.add(torch.ones(2, 9, dtype=torch.float64))
    B = s._bases.numpy()
    assert B.shape == (9, (1 + 4 + 2) * 3)
    for j, base in enumerate([Q, *pool, *full]):
        assert np.array_equal(B[:, 3 * j:3 * (j + 1)], base)
    assert np.array_equal(EnergyStream(Q, pool)._parts_np[1], pool)  # no full pool: no block


def test_full_space_controls_ride_along_and_concat():
    from tangentlab.measure import full_space_controls, grouped_batch_energies

    Q = np.eye(10)[:, :2]
    pool, full = normal_controls(Q, 12, 1), full_space_controls(Q, 7, 1)
    bs = _batches(5)
    be = batch_energies(Q, pool, bs, full_controls=full)
    plain = batch_energies(Q, pool, bs)
    ref = batch_energies(Q, full, bs)  # the full controls as an ordinary pool
    assert np.allclose(be.controls, plain.controls) and np.allclose(be.tangent, plain.tangent)
    assert be.full.shape == (6, 7) and np.allclose(be.full, ref.controls)
    # independent of the complement draws of the same seed, and of Q itself
    assert not np.allclose(np.abs(full[0]), np.abs(pool[0]))
    assert np.allclose(full, full_space_controls(np.eye(10)[:, 3:5], 7, 1))
    ab = batch_energies(Q, pool, bs[:2], full_controls=full).concat(
        batch_energies(Q, pool, bs[2:], full_controls=full))
    assert np.allclose(ab.full, be.full)
    with pytest.raises(ShapeError, match="same Q and pools"):
        ab.concat(plain)
    labs = [np.arange(len(b)) % 2 for b in bs]
    g = grouped_batch_energies(Q, pool, bs, labs, full_controls=full)
    assert np.allclose(g[0].plus(g[1]).full, be.full)
    assert BatchEnergies.zeros(6, 10, 2, 12, 7).plus(be).full_size == 7
    # the p-value reads the full controls only when there are enough of them
    assert batch_control_test(be, n_controls=7, n_boot=2).p_value_controls == "full"
    assert batch_control_test(be, n_controls=10, n_boot=2).p_value_controls == "complement"


@pytest.mark.parametrize("grouped", [True, False])
def test_a_stream_group_gives_each_stream_what_it_gives_alone(grouped):
    """One projection per batch for several streams (shared full pool once) changes nothing."""
    import torch

    from tangentlab.measure import (
        EnergyStream,
        EnergyStreamGroup,
        normal_controls,
        random_subspaces,
    )

    d, r, L = 20, 3, 3 if grouped else 1
    rng = np.random.default_rng(5)
    Qs = [np.linalg.qr(rng.standard_normal((d, r)))[0] for _ in range(2)]
    full = random_subspaces(d, r, 7, 1)  # one array: both proxies share it
    pools = [normal_controls(Q, 9, 2) for Q in Qs]
    alone = [EnergyStream(Q, P, full_controls=full, n_groups=L) for Q, P in zip(Qs, pools)]
    fresh = [EnergyStream(Q, P, full_controls=full, n_groups=L) for Q, P in zip(Qs, pools)]
    # a third stream without full controls rides along
    alone.append(EnergyStream(Qs[0], pools[1][:, :, :], n_groups=L))
    fresh.append(EnergyStream(Qs[0], pools[1][:, :, :], n_groups=L))
    group = EnergyStreamGroup(fresh)
    for b in range(4):
        g = torch.from_numpy(rng.standard_normal((50 + 10 * b, d)) * np.linspace(0.5, 2, d))
        idx = torch.from_numpy(rng.integers(0, L, size=g.shape[0])) if grouped else None
        for s in alone:
            s.add(g, idx)
        group.add(g, idx)
    # the shared pool's columns were projected once: 2 own blocks + 1 full + 1 own block
    assert group._bases.shape[1] == (2 * (1 + 9) + 7 + (1 + 9)) * r
    for a, f in zip(alone, fresh, strict=True):
        for ea, ef in zip(a.finish(), f.finish(), strict=True):
            np.testing.assert_allclose(ef.tangent, ea.tangent, rtol=1e-13)
            np.testing.assert_allclose(ef.controls, ea.controls, rtol=1e-13)
            np.testing.assert_array_equal(ef.trace, ea.trace)
            np.testing.assert_array_equal(ef.rows, ea.rows)
            assert (ef.full is None) == (ea.full is None)
            if ea.full is not None:
                np.testing.assert_allclose(ef.full, ea.full, rtol=1e-13)


def test_a_stream_group_refuses_mismatched_streams():
    from tangentlab.errors import ShapeError, ValidationError
    from tangentlab.measure import EnergyStream, EnergyStreamGroup, normal_controls

    Q = np.eye(10)[:, :2]
    P = normal_controls(Q, 3, 0)
    with pytest.raises(ValidationError, match="at least one stream"):
        EnergyStreamGroup([])
    with pytest.raises(ShapeError, match="same d, r and n_groups"):
        EnergyStreamGroup([EnergyStream(Q, P, n_groups=2), EnergyStream(Q, P)])
    with pytest.raises(ValidationError, match="statistics' dtype"):
        EnergyStreamGroup([EnergyStream(Q, P, proj_dtype="float32")])
    group = EnergyStreamGroup([EnergyStream(Q, P, n_groups=2)])
    with pytest.raises(ValidationError, match="2 groups"):
        group.add(np.ones((4, 10)))

"""Noise-corrected II and visibility, local dimension, the neighbourhood rule, the marker."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import InsufficientSamplesError, ValidationError
from tangentlab.measure.curvature import fit_second_fundamental_form
from tangentlab.measure.curvature_stats import (
    local_curvature,
    local_curvature_at,
    local_dimension,
    n_quadratic_parameters,
    neighbourhood_size,
)
from tangentlab.synthetic.manifolds import Sphere


def _sphere_patch(m, d, t, sig, k, seed):
    M = Sphere(m, ambient_dim=d, rotation_seed=1)
    p = M.sample(1, seed=0)[0]
    rng = np.random.default_rng(seed)
    Y = M.chart(np.repeat(p[None], k, 0), rng.standard_normal((k, m)) * t)
    return Y + sig * rng.standard_normal(Y.shape), float(M.frame(p[None]).ii_norm_sq[0])


def test_rule_and_parameter_count():
    assert n_quadratic_parameters(2) == 6 and n_quadratic_parameters(32) == 561
    assert neighbourhood_size(2) == 200 and neighbourhood_size(32) == 2244
    assert neighbourhood_size(32, n_points=1000) == 1000
    with pytest.raises(ValidationError):
        neighbourhood_size(2, factor=1.0)


def test_exact_quadric_matches_the_plain_fit():
    rng = np.random.default_rng(0)
    u = 0.1 * rng.standard_normal((300, 3))
    A = np.diag([1.0, 2.0, -0.5])
    Y = np.c_[u, 0.5 * np.einsum("ni,ij,nj->n", u, A, u), np.zeros(300)]
    f = local_curvature(Y, m=3, point=np.zeros(5))
    ref = fit_second_fundamental_form(Y, np.zeros(5), k=300, m=3)
    # the local-PCA frame tilts a little towards the curvature (both fits use it)
    assert f.ii_norm_sq == pytest.approx(np.sum(A * A), rel=0.01)
    assert f.ii_raw == pytest.approx(ref.second_fundamental_norm2, rel=1e-6)


def test_noise_correction_removes_the_noise_bias():
    # with noise in d = 200 the raw sum of squared coefficients is far too large
    Y, ii = _sphere_patch(2, 200, 0.14, 1e-2, 400, seed=3)
    f = local_curvature(Y, 2)
    assert f.measurable
    assert f.ii_raw > 1.3 * ii
    assert abs(f.ii_one_scale / ii - 1) < 0.15  # the noise-corrected one-scale fit
    lo, hi = f.ii_ci  # the two-scale extrapolation pays for its bias in variance here
    assert lo < f.ii_norm_sq < hi and lo < ii < hi


def test_visibility_matches_the_theory_with_noise():
    t = 0.1
    vals = []
    for seed in range(5):
        Y, ii = _sphere_patch(4, 64, t, 1e-4, 400, seed=seed)
        vals.append(local_curvature(Y, 4).visibility)
    assert np.mean(vals) == pytest.approx(t * t * ii / 8, rel=0.1)


def test_not_measurable_marker_when_noise_swamps_curvature():
    Y, _ = _sphere_patch(2, 768, 0.05, 3e-3, 200, seed=0)
    f = local_curvature(Y, 2)
    assert not f.measurable and np.isnan(f.ii_norm_sq) and np.isnan(f.visibility)
    assert "noise" in f.reason


def test_local_dimension_multiscale():
    for m, d in ((2, 64), (4, 64), (8, 256)):
        Y, _ = _sphere_patch(m, d, 0.2 / np.sqrt(m), 1e-3, neighbourhood_size(m), seed=1)
        assert local_dimension(Y).m == m
    res = local_dimension(Y, n_boot=10, seed=0)
    assert res.ci_low <= res.m <= res.ci_high


def test_knn_wrapper_and_too_few_points():
    Y, _ = _sphere_patch(2, 10, 0.1, 0.0, 500, seed=0)
    f = local_curvature_at(Y, Y[0], m=2)
    assert f.k == 200
    with pytest.raises(InsufficientSamplesError):
        local_curvature(Y[:8], m=2)


def test_docstring_examples_run():
    import doctest

    import tangentlab.measure.curvature_stats as mod

    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0


def test_two_scale_check_marks_higher_order_bias():
    # little noise, radius 0.2 on a unit 2-sphere: the quadratic fit is biased by the chart's
    # quartic terms (about +8%) far beyond its tiny interval; without the extrapolation the
    # check must say so
    Y, ii = _sphere_patch(2, 64, 0.2 / np.sqrt(2), 1e-4, 200, seed=0)
    f = local_curvature(Y, 2, extrapolate=False)
    assert f.measurable and not f.ii_measurable and np.isnan(f.ii_norm_sq)
    assert "neighbourhood size" in f.ii_reason
    assert np.isfinite(f.visibility)  # the visibility is not affected
    g = local_curvature(Y, 2, scale_check=False)
    assert g.ii_measurable and not g.ii_ci[0] <= ii <= g.ii_ci[1]


@pytest.mark.parametrize("m", [2, 4, 8])
def test_the_two_scale_extrapolation_removes_the_higher_order_bias(m):
    """The same patches (radius 0.2): the one-scale estimate is 4-8% high in every replicate;
    extrapolated across the two scales the mean is within 1% of the truth and most intervals
    cover it (issue 36: the delta-method interval leaves out the frame's own uncertainty, so it
    undercovers a little at this noise; the calibration experiment measures by how much)."""
    one, two, hits = [], [], 0
    for seed in range(12):
        Y, ii = _sphere_patch(m, 64, 0.2 / np.sqrt(m), 1e-4, neighbourhood_size(m), seed=seed)
        f = local_curvature(Y, m)
        assert f.ii_measurable, f.ii_reason
        one.append(f.ii_one_scale / ii - 1)
        two.append(f.ii_norm_sq / ii - 1)
        hits += f.ii_ci[0] <= ii <= f.ii_ci[1]
    assert min(one) > 0.03  # the broken variant: the plain fit misses in every replicate
    assert abs(np.mean(two)) < 0.01 and hits >= 8

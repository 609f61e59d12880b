"""The frequency-biased token model."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import ValidationError
from tangentlab.synthetic.manifolds import Sphere
from tangentlab.synthetic.tokens import TokenModel, pinning_spreads, zipf_frequencies


def test_zipf_and_pinning_laws():
    f = zipf_frequencies(10, 1.2)
    assert f.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(f[0] / f[4], 5**1.2)
    t = pinning_spreads(f, 0.1, 0.5)
    assert t[0] == pytest.approx(0.1)
    np.testing.assert_allclose(t[4] / t[0], 5 ** (1.2 * 0.5))


def test_occurrences_lie_on_manifold_with_pinned_spread():
    s = Sphere(2, 1.0, ambient_dim=4, rotation_seed=0)
    tm = TokenModel(s, n_types=5, zipf_s=1.0, pin_alpha=1.0, t0=0.01, seed=0)
    c = tm.sample_per_type(4000, seed=1)
    np.testing.assert_allclose(s.project(c.points), c.points, atol=1e-12)
    for r in range(5):
        sel = c.token_ids == r
        # geodesic distance to the centroid is |u|; E|u|² = m t_r²
        d2 = (s.distance(np.repeat(tm.centroids[r : r + 1], sel.sum(), 0), c.points[sel]) ** 2).mean()
        assert d2 == pytest.approx(2 * tm.spreads[r] ** 2, rel=0.06)


def test_sampler_follows_zipf_and_is_reproducible():
    tm = TokenModel(Sphere(2), n_types=20, zipf_s=1.0, pin_alpha=0.5, t0=0.02, seed=3)
    a = tm.sample(20000, seed=7)
    b = tm.sample(20000, seed=7)
    np.testing.assert_array_equal(a.points, b.points)
    counts = np.bincount(a.token_ids, minlength=20) / 20000
    f = tm.frequencies[:3]
    assert np.all(np.abs(counts[:3] - f) < 5 * np.sqrt(f * (1 - f) / 20000))
    assert not np.array_equal(tm.sample(100, seed=8).points, a.points[:100])


def test_bad_token_model_parameters():
    with pytest.raises(ValidationError):
        TokenModel(Sphere(2), n_types=1, zipf_s=1.0, pin_alpha=0.5, t0=0.1, seed=0)
    with pytest.raises(ValidationError):
        TokenModel(Sphere(2), n_types=10, zipf_s=1.0, pin_alpha=0.5, t0=-0.1, seed=0)
    with pytest.raises(ValidationError):
        TokenModel(Sphere(2), n_types=10, zipf_s=1.0, pin_alpha=-1.0, t0=0.1, seed=0)


def test_patch_centroids_stay_near_patch_center():
    s = Sphere(2, 1.0, ambient_dim=5, rotation_seed=1)
    tm = TokenModel(s, n_types=200, zipf_s=1.0, pin_alpha=0.5, t0=0.01, seed=2, patch_radius=0.05)
    d = s.distance(np.repeat(tm.patch_center[None], 200, 0), tm.centroids)
    # geodesic distance |v| with v ~ N(0, 0.05² I_2): E|v|² = 2 · 0.05²
    assert np.mean(d**2) == pytest.approx(2 * 0.05**2, rel=0.25)
    g = TokenModel(s, n_types=200, zipf_s=1.0, pin_alpha=0.5, t0=0.01, seed=2)
    assert g.patch_center is None and np.mean(s.distance(np.repeat(tm.patch_center[None], 200, 0), g.centroids)) > 1.0

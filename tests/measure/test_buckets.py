"""Per-token curvature and the measured attenuation against the closed form (planted model)."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab import theory
from tangentlab.errors import InsufficientSamplesError
from tangentlab.measure.buckets import measured_attenuation, per_token_curvature, pooled_visibility
from tangentlab.synthetic.manifolds import Sphere
from tangentlab.synthetic.tokens import TokenModel


@pytest.fixture(scope="module")
def planted():
    tm = TokenModel(Sphere(2, ambient_dim=8, rotation_seed=0), n_types=20, zipf_s=1.0,
                    pin_alpha=0.5, t0=0.02, seed=0)
    c = tm.sample_per_type(250, seed=1)
    doc = np.tile(np.arange(250), 20)
    fits = per_token_curvature(c.points, c.token_ids, doc, m=2, seed=0)
    return tm, fits


def test_per_token_visibility_follows_the_pinning_law(planted):
    tm, fits = planted
    assert sorted(fits) == list(range(20)) and all(f.k == 200 for f in fits.values())
    v = np.array([fits[t].visibility for t in range(20)])
    want = theory.predict("frequency-attenuation", "visibility_by_rank", rank=np.arange(1, 21),
                          s=1.0, alpha=0.5, t0=0.02, ii_norm_sq=2.0, m=2, n_types=20)
    assert np.median(np.abs(v / want - 1)) < 0.15


def test_measured_attenuation_matches_the_closed_form(planted):
    tm, fits = planted
    freq = {t: float(tm.frequencies[t]) for t in fits}
    res = measured_attenuation(fits, freq, n_boot=300, seed=0)
    want = theory.predict("frequency-attenuation", "attenuation", s=1.0, alpha=0.5, n_types=20)
    assert res.value == pytest.approx(want, rel=0.1)
    assert res.ci_low < res.value < res.ci_high and res.n_not_measurable == 0
    assert pooled_visibility(fits, freq) < pooled_visibility(fits)


def test_too_few_documents():
    X = np.random.default_rng(0).standard_normal((50, 4))
    with pytest.raises(InsufficientSamplesError):
        per_token_curvature(X, np.zeros(50, int), np.arange(50), m=2)

"""The prediction path against the theory's own predict, and its propagated intervals."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab import theory
from tangentlab.errors import ValidationError
from tangentlab.measure.pinning import pinning_exponent
from tangentlab.measure.zipf import fit_zipf
from tangentlab.theory.measured_inputs import (
    Measured,
    measured,
    predict_attenuation,
    predict_bucket_visibility,
)


def _fixed(v, n=40):
    return Measured(v, np.full(n, v))


def test_attenuation_equals_theory_predict():
    s, beta, V = 1.1, 0.33, 300
    p = predict_attenuation(_fixed(s), _fixed(beta), n_types=V)
    want = theory.predict("frequency-attenuation", "attenuation", s=s, alpha=beta / s, n_types=V)
    assert p.value == pytest.approx(want, rel=1e-12)
    assert p.ci_low == pytest.approx(want) and p.ci_high == pytest.approx(want)


def test_single_rank_bucket_is_visibility_by_rank():
    s, beta, t0, ii, m, V = 1.0, 0.25, 0.02, 3.0, 2, 100
    p = predict_bucket_visibility([7], _fixed(s), _fixed(beta), _fixed(t0), _fixed(ii), m, V)
    want = theory.predict("frequency-attenuation", "visibility_by_rank", rank=7, s=s,
                          alpha=beta / s, t0=t0, ii_norm_sq=ii, m=m, n_types=V)
    assert p.value == pytest.approx(float(want), rel=1e-12)
    # a bucket pools tangent-weighted: between its ranks' visibilities
    pb = predict_bucket_visibility(np.arange(5, 10), _fixed(s), _fixed(beta), _fixed(t0),
                                   _fixed(ii), m, V)
    lo, hi = (theory.predict("frequency-attenuation", "visibility_by_rank", rank=r, s=s,
                             alpha=beta / s, t0=t0, ii_norm_sq=ii, m=m, n_types=V) for r in (5, 9))
    assert lo < pb.value < hi


def test_the_interval_propagates_input_uncertainty():
    rng = np.random.default_rng(0)
    s = Measured(1.0, 1.0 + 0.02 * rng.standard_normal(200))
    narrow = predict_attenuation(s, _fixed(0.3, 200), n_types=500)
    wide = predict_attenuation(s, Measured(0.3, 0.3 + 0.05 * rng.standard_normal(200)), 500)
    assert narrow.ci_low < narrow.value < narrow.ci_high
    assert (wide.ci_high - wide.ci_low) > 1.5 * (narrow.ci_high - narrow.ci_low)


def test_from_real_fits_end_to_end():
    rng = np.random.default_rng(1)
    V = 200
    p = np.arange(1, V + 1.0) ** -1.0
    tok = rng.choice(V, size=40_000, p=p / p.sum())
    doc = np.repeat(np.arange(400), 100)
    zf = fit_zipf(tok, doc, n_boot=50, seed=0)
    H = rng.standard_normal((tok.size, 4)) * ((tok + 1.0) ** 0.3)[:, None]
    pf = pinning_exponent(H, tok, doc, np.arange(1, V + 1), k=6, n_boot=50, seed=0)
    pred = predict_attenuation(measured(zf, "s"), measured(pf, "beta"), n_types=V)
    want = theory.predict("frequency-attenuation", "attenuation", s=1.0, alpha=0.3, n_types=V)
    assert pred.ci_low < want < pred.ci_high
    assert pred.n_replicates == 50


def test_bad_ranks():
    with pytest.raises(ValidationError):
        predict_bucket_visibility([0], _fixed(1.0), _fixed(0.2), _fixed(0.1), _fixed(1.0), 2, 10)


def test_docstring_examples_run():
    import doctest

    import tangentlab.theory.measured_inputs as mod

    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0

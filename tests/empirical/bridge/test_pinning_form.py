"""The power-law form test of the pinning spreads: calibrated under one power law, and it
catches a law whose slope flattens with rank (the shape the default decoder's fits suggest)."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.empirical.bridge.pinning_form import MIN_TOKENS, power_law_curvature
from tangentlab.errors import InsufficientSamplesError, ValidationError


def _tokens(seed: int, n: int = 200, *, head: float, tail: float, knee: float = 60.0):
    """Ranks of n tokens (Zipf-spread over 1..2000) and spreads with slope ``head`` below rank
    ``knee`` and ``tail`` above, continuous at the knee; log-normal noise whose sd grows with
    rank (rarer tokens: noisier spreads)."""
    rng = np.random.default_rng(seed)
    r = np.unique(np.exp(rng.uniform(0, np.log(2000), size=3 * n)).astype(int) + 1)[:n]
    lr, lk = np.log(r), np.log(knee)
    law = np.where(lr <= lk, head * lr, head * lk + tail * (lr - lk))
    sd = 0.05 + 0.03 * lr
    return r, np.exp(law + rng.normal(0.0, sd))


def test_one_power_law_is_kept_at_the_nominal_rate():
    covered = [power_law_curvature(*_tokens(s, head=0.12, tail=0.12), n_boot=200, seed=s)
               for s in range(80)]
    rate = np.mean([not f.power_law_rejected for f in covered])
    assert rate >= 0.87, rate  # nominal 0.95; 80 simulations: se about 0.024
    f = covered[0]
    assert abs(f.slope_head - 0.12) < 0.08 and abs(f.slope_tail - 0.12) < 0.08


def test_a_slope_that_flattens_with_rank_is_caught():
    fits = [power_law_curvature(*_tokens(s, head=0.17, tail=0.05), n_boot=200, seed=s)
            for s in range(40)]
    caught = np.mean([f.power_law_rejected and f.curvature < 0 for f in fits])
    assert caught >= 0.9, caught
    assert np.median([f.slope_head - f.slope_tail for f in fits]) > 0.05
    # the other way round (steepening) reads c > 0
    up = power_law_curvature(*_tokens(0, head=0.02, tail=0.2), n_boot=200)
    assert up.power_law_rejected and up.curvature > 0


def test_bad_input_is_named():
    r, t = _tokens(0, head=0.1, tail=0.1)
    with pytest.raises(ValidationError, match="one value per token"):
        power_law_curvature(r, t[:-1])
    bad = r.copy()
    bad[0] = 0
    with pytest.raises(ValidationError, match=">= 1"):
        power_law_curvature(bad, t)
    with pytest.raises(ValidationError, match="positive"):
        power_law_curvature(r, -t)
    with pytest.raises(ValidationError, match="confidence"):
        power_law_curvature(r, t, confidence=1.0)
    with pytest.raises(InsufficientSamplesError, match=f"{MIN_TOKENS} tokens"):
        power_law_curvature(r[: MIN_TOKENS - 1], t[: MIN_TOKENS - 1])


def test_no_interval_is_no_rejection():
    """Fewer than 2 bootstrap fits leave the interval NaN: that is no evidence against the law."""
    r, t = _tokens(0, head=0.17, tail=0.0)
    f = power_law_curvature(r, t, n_boot=1)
    assert np.isnan(f.ci_low) and not f.power_law_rejected
    assert power_law_curvature(r, t, n_boot=200).power_law_rejected  # the same law, with one


def test_the_curvature_row_of_a_failed_pinning_fit_says_why():
    from tangentlab.empirical.bridge.pinning_form import curvature_row

    row = curvature_row(None, "raw", "only 3 tokens reach 8 documents", n_boot=0,
                        confidence=0.95, seed=0)
    assert row["quantity"] == "pinning_curvature_raw" and row["n"] is None
    assert row["status"] == "not measurable here" and "only 3 tokens" in row["note"]
    assert np.isnan(row["measured"])
    assert "the pinning fit failed" in curvature_row(None, "raw", "", n_boot=0, confidence=0.95,
                                                     seed=0)["note"]

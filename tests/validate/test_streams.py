"""The known-truth streams: their stated truth is the truth the coverage study measures against."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import ValidationError
from tangentlab.measure import energy_fractions, normal_controls
from tangentlab.validate.streams import make_gradient_model, token_windows, true_enrichment


def test_gradient_model_truth_matches_samples():
    gm = make_gradient_model(16, 2, signal=1.0, context=0.5, scale_sigma=0.3,
                             spectrum_sigma=0.8, seed=0)
    C = gm.second_moment()
    e_true, q_true = true_enrichment(gm.Q, C)
    bs = gm.batches(600, 16, seed=1, windows_per_batch=2)
    per = np.array([[np.sum((b @ gm.Q) ** 2), np.sum(b * b)] for b in bs])
    e_hat = per[:, 0].sum() / per[:, 1].sum()
    # ratio-estimator standard error over batches
    z = per[:, 0] - e_hat * per[:, 1]
    se = np.sqrt(np.sum(z**2)) / per[:, 1].sum()
    assert abs(e_hat - e_true) < 4 * se
    # the enrichment truth: Haar controls of the complement hold r/(d-r) of the rest
    ctrl = energy_fractions(normal_controls(gm.Q, 4000, 2), C)
    assert e_true / ctrl.mean() == pytest.approx(q_true, rel=0.02)
    assert bs[0].shape == (32, 16)


def test_planted_subspace_and_bad_parameters():
    Q = np.eye(8)[:, :2]
    gm = make_gradient_model(8, 2, signal=3.0, context=0.0, scale_sigma=0.0, spectrum_sigma=0.0,
                             seed=0, Q=Q)
    assert np.array_equal(gm.Q, Q)
    assert true_enrichment(Q, gm.second_moment())[1] == pytest.approx(4.0)  # (1 + 3) / 1
    with pytest.raises(ValidationError):
        make_gradient_model(8, 2, signal=-1.0, context=0.0, scale_sigma=0.0, spectrum_sigma=0.0,
                            seed=0)
    with pytest.raises(ValidationError):
        make_gradient_model(8, 2, signal=1.0, context=0.0, scale_sigma=0.0, spectrum_sigma=0.0,
                            seed=0, Q=np.eye(8)[:, :3])


def test_token_windows_share_context_within_a_window():
    tw = token_windows(d=16, m=2, n_types=50, zipf_s=1.0, pin_alpha=0.0, t0=0.01, n_windows=40,
                       window=32, context=1.0, noise=0.0, patch_radius=0.01, seed=0)
    assert tw.H.shape == (1280, 16) and tw.window_ids.max() == 39
    assert np.allclose(tw.spreads, 0.01)  # alpha = 0: no pinning
    # rows of one window are much closer to each other than to other windows' rows
    within = np.mean([tw.H[tw.window_ids == w].std(0).mean() for w in range(40)])
    assert within < 0.2 * tw.H.std(0).mean()
    assert np.allclose(tw.tangent.T @ tw.tangent, np.eye(2))

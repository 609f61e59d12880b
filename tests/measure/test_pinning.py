"""Pinning exponent: a planted alpha is recovered; a norm-only confound shows in raw beta only."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import InsufficientSamplesError, ShapeError
from tangentlab.measure.pinning import (
    _FastDraw,
    pinning_exponent,
    pinning_with_norm_null,
    token_ranks,
)
from tangentlab.synthetic.manifolds import Sphere
from tangentlab.synthetic.tokens import TokenModel


def test_planted_alpha_on_the_token_model():
    s, alpha = 1.0, 0.3
    tm = TokenModel(Sphere(3, ambient_dim=16, rotation_seed=0), n_types=150, zipf_s=s,
                    pin_alpha=alpha, t0=0.02, seed=0)
    c = tm.sample(30_000, seed=1)
    doc = np.random.default_rng(2).integers(0, 2000, size=c.token_ids.size)
    fit = pinning_exponent(c.points, c.token_ids, doc, np.arange(1, 151), k=8, n_boot=100, seed=0)
    assert fit.ci_low < s * alpha < fit.ci_high
    assert abs(fit.beta - s * alpha) < 0.05
    assert fit.n_tokens > 50


def test_norm_only_confound():
    # direction spread is the same for every token; only the norm grows with rank
    rng = np.random.default_rng(0)
    V, per, d = 60, 40, 12
    tok = np.repeat(np.arange(V), per)
    doc = np.tile(np.arange(per), V)
    dirs = rng.standard_normal((V, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    X = dirs[tok] + 0.05 * rng.standard_normal((tok.size, d))
    H = X * ((tok + 1.0) ** 0.4)[:, None]
    fits = pinning_with_norm_null(H, tok, doc, np.arange(1, V + 1), k=10, n_boot=100, seed=0)
    assert fits["raw"].ci_low > 0.3  # raw: looks pinned (beta ~ 0.4)
    assert fits["direction"].ci_low < 0 < fits["direction"].ci_high
    assert abs(fits["direction"].beta) < 0.05
    assert fits["direction"].normalised and not fits["raw"].normalised


def test_one_occurrence_per_document_is_enforced():
    # a token whose occurrences share one document has only one usable occurrence
    tok = np.r_[np.repeat(np.arange(5), 10), np.full(10, 5)]
    doc = np.r_[np.tile(np.arange(10), 5), np.zeros(10, dtype=int)]
    H = np.random.default_rng(0).standard_normal((tok.size, 4))
    fit = pinning_exponent(H, tok, doc, np.arange(1, 7), k=5, n_boot=20, seed=0)
    assert 5 not in fit.tokens.tolist() and fit.n_tokens == 5


def test_fast_draw_takes_one_row_per_document_and_k_per_token():
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 10, 2000)
    doc = rng.integers(0, 100, 2000)
    X = np.c_[np.arange(2000.0), np.zeros(2000)]  # row index recoverable from the points
    draw = _FastDraw(X, tok, doc, None)
    tokens, spread = draw(5, rng)
    assert np.all(np.diff(tokens) > 0) and spread.shape == tokens.shape and np.all(spread > 0)


def test_token_ranks_and_bad_inputs():
    assert token_ranks([5, 9, 1, 9]).tolist() == [3, 1, 4, 2]
    H = np.zeros((4, 2))
    with pytest.raises(ShapeError):
        pinning_exponent(H, [0, 1, 2, 3], [0, 1, 2, 3], [1, 2])
    with pytest.raises(InsufficientSamplesError):
        pinning_exponent(np.eye(4), [0, 0, 1, 1], [0, 1, 0, 1], [1, 2], k=2, n_boot=20)


def test_docstring_examples_run():
    import doctest

    import tangentlab.measure.pinning as mod

    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0

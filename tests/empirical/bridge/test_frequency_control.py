"""The frequency-weighting control of the dimension rows: it finds a gap the frequency weighting
makes, and none where every type samples the same manifold."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.empirical.bridge.frequency_control import (
    MIN_TYPES,
    dimension_by_type,
    frequency_control_rows,
)
from tangentlab.errors import InsufficientSamplesError, ValidationError

pytest.importorskip("skdim")


def _occurrences(seed: int, *, frequent_dim: int, rare_dim: int, n_types: int = 300):
    """Zipf-many occurrences per type (type i occurs about 2000 / i times, at least 2): the 20
    most frequent types lie on a ``frequent_dim``-dimensional subspace, the rest on a
    ``rare_dim``-dimensional one, in d = 32."""
    rng = np.random.default_rng(seed)
    counts = np.maximum(2, (2000 / np.arange(1, n_types + 1)).astype(int))
    tokens = np.repeat(np.arange(n_types), counts)
    dims = np.where(tokens < 20, frequent_dim, rare_dim)
    X = rng.normal(size=(tokens.size, 32))
    X[np.arange(32)[None, :] >= dims[:, None]] = 0.0
    return X, tokens


def test_the_frequency_weighting_shows_as_a_gap():
    X, t = _occurrences(0, frequent_dim=2, rare_dim=8)
    w = dimension_by_type(X, t, draws=6)
    assert w.n_points == 300 and w.draws == 6 and 0.0 <= w.same_type_neighbour <= 1.0
    assert w.per_type_low <= w.per_type <= w.per_type_high
    # the stream is mostly the 2-dimensional frequent types; one per type is mostly 8-dimensional
    assert w.by_frequency_high < w.per_type_low
    assert w.by_frequency < 5 < w.per_type


def test_no_gap_where_every_type_samples_the_same_manifold():
    X, t = _occurrences(1, frequent_dim=5, rare_dim=5)
    w = dimension_by_type(X, t, draws=6)
    assert abs(w.per_type - w.by_frequency) < 1.0
    assert max(w.per_type_low, w.by_frequency_low) <= min(w.per_type_high, w.by_frequency_high)


def test_within_type_spread_shows_as_a_gap_too_and_the_share_says_so():
    """The control's known confound: every type on one 3-dimensional manifold, each type's
    occurrences spread a little in 2 other dimensions. The weighted draw repeats frequent types,
    TwoNN reads their within-type spread, and a gap appears with no frequency-dependent geometry;
    the share of same-type nearest neighbours is what tells the reader."""
    rng = np.random.default_rng(3)
    n_types = 300
    counts = np.maximum(2, (2000 / np.arange(1, n_types + 1)).astype(int))
    tokens = np.repeat(np.arange(n_types), counts)
    centre = np.zeros((n_types, 32))
    centre[:, :3] = rng.normal(size=(n_types, 3))
    X = centre[tokens]
    X[:, 3:5] += 0.01 * rng.normal(size=(tokens.size, 2))
    w = dimension_by_type(X, tokens, draws=4)
    assert w.by_frequency < w.per_type - 0.5  # a gap, although every type shares the manifold
    assert w.same_type_neighbour > 0.3  # ... and the share shows where it comes from
    flat = dimension_by_type(*_occurrences(1, frequent_dim=5, rare_dim=5), draws=4)
    assert flat.same_type_neighbour < 0.05  # occurrences without a type signature: no share


def test_rows_and_bad_input():
    X, t = _occurrences(2, frequent_dim=2, rare_dim=8, n_types=60)
    rows = frequency_control_rows(X, t, seed=0)
    assert [r["quantity"] for r in rows] == ["twonn_per_type", "twonn_by_frequency"]
    assert all(r["role"] == "baseline" and r["status"] == "context" and r["n"] == 60 for r in rows)
    few = frequency_control_rows(X[: 5], t[: 5])  # one type: no control, said why
    assert all(np.isnan(r["measured"]) and f"{MIN_TYPES} token types" in r["note"] for r in few)
    with pytest.raises(ValidationError, match="one token id per row"):
        dimension_by_type(X, t[:-1])
    with pytest.raises(ValidationError, match="draws"):
        dimension_by_type(X, t, draws=1)
    with pytest.raises(InsufficientSamplesError):
        dimension_by_type(X[:5], t[:5])

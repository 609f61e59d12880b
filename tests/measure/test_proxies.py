"""Tests for tangentlab.measure.proxies (the scikit-learn contract and each extractor)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tangentlab.errors import (
    ConfigError,
    InsufficientSamplesError,
    NonFiniteError,
    RankError,
    ShapeError,
    UnknownNameError,
    ValidationError,
)
from tangentlab.measure import (
    PROXY_NAMES,
    ICAProxy,
    PCAProxy,
    SemiNMFProxy,
    TopKSAEProxy,
    make_proxy,
    principal_angles,
    random_subspace,
)

FAST = {
    "pca": {},
    "seminmf": {"max_iter": 50},
    "ica": {"max_iter": 200},
    "sae": {"n_steps": 60, "batch_size": 64},
}


def planted(seed: int, n: int = 400, d: int = 12, r: int = 3, noise: float = 0.05):
    """Rows near a planted r-dim subspace: X = Z B^T + noise, with Z >= 0 (sparse-ish)."""
    rng = np.random.default_rng(seed)
    B = random_subspace(d, r, seed)
    Z = rng.exponential(1.0, size=(n, r)) * (rng.random((n, r)) < 0.7)
    return Z @ B.T * 3 + noise * rng.standard_normal((n, d)), B


@pytest.mark.parametrize("name", PROXY_NAMES)
def test_contract(name):
    X, _ = planted(0)
    est = make_proxy(name, n_components=3, random_state=1, **FAST[name])
    params = est.get_params()
    assert params["n_components"] == 3 and params["random_state"] == 1
    assert not hasattr(est, "components_")  # __init__ only stores
    assert est.fit(X) is est
    assert est.components_.shape == (3, 12)
    Q = est.basis()
    assert Q.shape == (12, 3) and np.allclose(Q.T @ Q, np.eye(3), atol=1e-10)
    Z = est.transform(X)
    assert Z.shape == (400, 3)
    assert est.inverse_transform(Z).shape == X.shape
    # same seed, same result
    again = make_proxy(name, **params).fit(X)
    assert np.allclose(again.components_, est.components_)
    # sklearn's clone works through get_params
    from sklearn.base import clone

    assert clone(est).get_params() == params
    with pytest.raises(ConfigError, match="unknown"):
        make_proxy(name, n_components=3, not_a_param=1)
    with pytest.raises(ConfigError):
        est.set_params(bogus=2)
    assert est.set_params(n_components=2) is est and est.n_components == 2


@settings(max_examples=8)
@given(seed=st.integers(min_value=0, max_value=10_000))
def test_pca_recovers_planted_subspace(seed):
    X, B = planted(seed, noise=0.01)
    Q = PCAProxy(n_components=3, center=False).fit(X).basis()
    assert np.max(principal_angles(Q, B)) < 0.05


@pytest.mark.parametrize("name", ["seminmf", "ica", "sae"])
def test_other_proxies_find_planted_subspace(name):
    X, B = planted(4, n=600, noise=0.01)
    params = dict(FAST[name])
    if name == "sae":
        params.update(n_steps=400, k=3, center=False)
    Q = make_proxy(name, n_components=3, random_state=0, **params).fit(X).basis()
    assert np.max(principal_angles(Q, B)) < 0.15, name


@settings(max_examples=8)
@given(seed=st.integers(min_value=0, max_value=10_000), init=st.sampled_from(["kmeans", "random"]))
def test_seminmf_codes_nonnegative_and_loss_nonincreasing(seed, init):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((80, 7))  # mixed signs: the dictionary must be free
    est = SemiNMFProxy(n_components=3, max_iter=60, tol=0.0, init=init, random_state=seed).fit(X)
    assert np.all(est.codes_ >= 0)
    assert np.all(est.transform(X) >= 0)
    L = est.loss_history_
    assert np.all(np.diff(L) <= 1e-9 * L[0]), np.diff(L).max()
    assert L[-1] < L[0]
    assert (est.components_ < 0).any()  # dictionary is free to be negative


def test_seminmf_reconstructs_nonnegative_mixture():
    rng = np.random.default_rng(0)
    D = rng.standard_normal((2, 6))
    Z = rng.random((200, 2))
    est = SemiNMFProxy(n_components=2, max_iter=500, tol=1e-12).fit(Z @ D)
    rel = np.sqrt(est.loss_history_[-1]) / np.linalg.norm(Z @ D)
    assert rel < 0.05


def test_sae_sparsity_and_loss_decrease():
    X, _ = planted(1)
    est = TopKSAEProxy(n_components=6, k=2, n_steps=150, batch_size=64).fit(X)
    Z = est.transform(X)
    assert np.all((Z > 0).sum(axis=1) <= 2)
    assert np.allclose(np.linalg.norm(est.components_, axis=1), 1.0, atol=1e-5)
    L = est.loss_history_
    assert L[-20:].mean() < L[:20].mean()


def test_ica_basis_spans_pca_subspace():
    X, _ = planted(2, noise=0.2)
    ica = ICAProxy(n_components=3, random_state=0).fit(X)
    pca = PCAProxy(n_components=3).fit(X)
    assert np.max(principal_angles(ica.basis(), pca.basis())) < 1e-6


def test_bad_inputs():
    X, _ = planted(0, n=50)
    with pytest.raises(UnknownNameError, match="choose one of"):
        make_proxy("nmf")
    with pytest.raises(RankError):
        PCAProxy(n_components=12).fit(X)
    with pytest.raises(RankError):
        PCAProxy(n_components=0).fit(X)
    with pytest.raises(InsufficientSamplesError):
        PCAProxy(n_components=3).fit(X[:3])
    bad = X.copy()
    bad[5, 5] = np.inf
    with pytest.raises(NonFiniteError):
        SemiNMFProxy(n_components=2).fit(bad)
    with pytest.raises(ShapeError):
        PCAProxy(n_components=2).fit(X[0])
    est = PCAProxy(n_components=2)
    with pytest.raises(ValidationError, match="not fitted"):
        est.transform(X)
    est.fit(X)
    with pytest.raises(ShapeError):
        est.transform(X[:, :5])
    with pytest.raises(ConfigError):
        SemiNMFProxy(n_components=2, init="magic").fit(X)
    with pytest.raises(ConfigError):
        TopKSAEProxy(n_components=2, k=5).fit(X)
    with pytest.raises(ConfigError):
        PCAProxy(n_components=2, random_state="seed").fit(X)

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


# -- BasisProxy: a given basis or dictionary as the proxy ------------------------------------------
def _span_equal(A, B, tol=1e-8):
    from tangentlab.measure.subspace import orthonormalize

    return np.max(principal_angles(orthonormalize(A), orthonormalize(B))) < tol


def test_basis_proxy_from_npy_columns_rows_and_square(tmp_path):
    from tangentlab.measure.proxies import BasisProxy
    from tangentlab.measure.subspace import orthonormalize

    rng = np.random.default_rng(0)
    d, r = 12, 3
    B = rng.standard_normal((d, r))
    X = rng.standard_normal((50, d))
    np.save(tmp_path / "cols.npy", B)
    np.save(tmp_path / "rows.npy", B.T)
    for name, orient in (("cols.npy", "columns"), ("rows.npy", "rows")):
        est = make_proxy(f"basis:{tmp_path / name}", n_components=3, random_state=0)
        assert isinstance(est, BasisProxy) and est.fit(X) is est
        Q = est.basis()
        assert Q.shape == (d, r) and np.allclose(Q.T @ Q, np.eye(r), atol=1e-12)
        assert _span_equal(Q, B)
        assert np.allclose(Q, orthonormalize(B))  # QR of the atoms, first direction kept
        assert orient in est.variant_ and "QR" in est.variant_
        assert est.source_["orientation"] == orient and est.source_["atoms"] == r
        Z = est.transform(X)
        assert Z.shape == (50, r) and np.allclose(est.inverse_transform(Z), X @ Q @ Q.T)
    # a square matrix is read as columns unless told otherwise
    S = rng.standard_normal((d, d))
    np.save(tmp_path / "sq.npy", S)
    cols = BasisProxy(str(tmp_path / "sq.npy"), n_components=2).fit(X).basis()
    rows = BasisProxy(str(tmp_path / "sq.npy"), n_components=2, orientation="rows").fit(X).basis()
    assert _span_equal(cols, S[:, :2]) and _span_equal(rows, S[:2].T)
    assert not _span_equal(cols, rows, tol=1e-3)
    # fewer components than atoms: the first ones by default
    first = BasisProxy(str(tmp_path / "cols.npy"), n_components=2).fit(X)
    assert _span_equal(first.basis(), B[:, :2]) and list(first.atoms_) == [0, 1]


def test_basis_proxy_errors(tmp_path):
    from tangentlab.errors import DataError

    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 12))
    np.save(tmp_path / "d10.npy", rng.standard_normal((10, 3)))
    with pytest.raises(ShapeError) as err:
        make_proxy(f"basis:{tmp_path / 'd10.npy'}", n_components=3).fit(X)
    assert "(10, 3)" in str(err.value) and "d=12" in str(err.value)
    np.save(tmp_path / "ok.npy", rng.standard_normal((12, 3)))
    with pytest.raises(ShapeError, match="d=12"):
        make_proxy(f"basis:{tmp_path / 'ok.npy'}?orientation=rows", n_components=3).fit(X)
    with pytest.raises(RankError, match="only 3 atoms"):
        make_proxy(f"basis:{tmp_path / 'ok.npy'}", n_components=5).fit(X)
    with pytest.raises(DataError, match="does not exist"):
        make_proxy(f"basis:{tmp_path / 'missing.npy'}", n_components=2).fit(X)
    np.save(tmp_path / "cube.npy", np.zeros((2, 3, 4)))
    with pytest.raises(ShapeError, match="2-D"):
        make_proxy(f"basis:{tmp_path / 'cube.npy'}", n_components=2).fit(X)
    np.save(tmp_path / "bad.npy", np.full((12, 2), np.nan))
    with pytest.raises(NonFiniteError):
        make_proxy(f"basis:{tmp_path / 'bad.npy'}", n_components=2).fit(X)
    with pytest.raises(ConfigError, match="unknown"):
        make_proxy(f"basis:{tmp_path / 'ok.npy'}?colour=red")
    with pytest.raises(ConfigError):
        make_proxy(f"basis:{tmp_path / 'ok.npy'}", source="other")
    with pytest.raises(UnknownNameError, match="basis:PATH"):
        make_proxy("bogus")
    dup = rng.standard_normal((12, 1))
    np.save(tmp_path / "deficient.npy", np.hstack([dup, 2 * dup]))
    with pytest.raises(RankError, match="rank deficient"):
        make_proxy(f"basis:{tmp_path / 'deficient.npy'}", n_components=2).fit(X)


def _sae_tensors(d_in, d_sae, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(d_sae, d_in, generator=g)
    return {"W_enc": W_dec.T.contiguous(), "W_dec": W_dec, "b_enc": torch.zeros(d_sae),
            "b_dec": torch.zeros(d_in)}


def test_basis_proxy_from_safetensors_and_sae_folders(tmp_path, monkeypatch):
    import json

    from safetensors.torch import save_file

    d, m = 12, 40  # an overcomplete dictionary: 40 atoms in d = 12
    t = _sae_tensors(d, m)
    W = t["W_dec"].double().numpy()  # (d_sae, d_in): one atom per row
    rng = np.random.default_rng(2)
    # data living on atoms 5 and 31: energy selection must find them
    U = W[[5, 31]] / np.linalg.norm(W[[5, 31]], axis=1, keepdims=True)
    X = rng.standard_normal((300, 2)) @ U * 5 + 0.01 * rng.standard_normal((300, d))

    save_file(t, str(tmp_path / "dict.safetensors"))
    est = make_proxy(f"basis:{tmp_path / 'dict.safetensors'}", n_components=2).fit(X)
    assert est.source_["key"] == "W_dec" and est.source_["orientation"] == "rows"
    assert est.source_["select"] == "energy" and sorted(est.atoms_) == [5, 31]
    assert _span_equal(est.basis(), U.T, tol=1e-6)
    first = make_proxy(f"basis:{tmp_path / 'dict.safetensors'}?select=first", n_components=2).fit(X)
    assert list(first.atoms_) == [0, 1]
    enc = make_proxy(f"basis:{tmp_path / 'dict.safetensors'}?key=W_enc&select=first",
                     n_components=2).fit(X)
    assert enc.source_["orientation"] == "columns" and _span_equal(enc.basis(), W[:2].T)

    saelens = tmp_path / "saelens"
    saelens.mkdir()
    save_file(t, str(saelens / "sae_weights.safetensors"))
    (saelens / "cfg.json").write_text(json.dumps({"d_in": d, "d_sae": m,
                                                  "hook_name": "blocks.0.hook_resid_post"}))
    est = make_proxy(f"basis:{saelens}", n_components=2).fit(X)
    assert est.source_["format"] == "saelens" and sorted(est.atoms_) == [5, 31]
    assert est.source_["meta"]["hook_name"] == "blocks.0.hook_resid_post"

    # a sparsify repository on the (locally built) Hub, read offline through huggingface_hub
    from tests.empirical.families import write_hub_revision

    def save(folder):
        from pathlib import Path

        sub = Path(folder) / "layers.0"
        sub.mkdir()
        save_file({"encoder.weight": t["W_dec"].clone(), "encoder.bias": t["b_enc"],
                   "W_dec": t["W_dec"], "b_dec": t["b_dec"]}, str(sub / "sae.safetensors"))
        (sub / "cfg.json").write_text(json.dumps({"d_in": d, "num_latents": m, "k": 4}))

    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_hub_revision(tmp_path / "home" / "hub", "tiny/sae", "main", save)
    est = make_proxy("basis:hub:tiny/sae/layers.0", n_components=2).fit(X)
    assert est.source_["format"] == "sparsify" and sorted(est.atoms_) == [5, 31]
    assert "models--tiny--sae" in est.source_["path"]
    with pytest.raises(UnknownNameError):
        make_proxy("basis:hub:tiny/none/layers.0", n_components=2).fit(X)
    with pytest.raises(ShapeError, match="d=16"):  # a dictionary for another site width
        make_proxy(f"basis:{saelens}", n_components=2).fit(np.zeros((20, 16)))


def test_the_linear_transform_lives_once_in_the_abstract_proxy():
    from tangentlab.measure.proxies import ICAProxy, PCAProxy, _Proxy

    assert PCAProxy.transform is ICAProxy.transform is _Proxy.transform
    with pytest.raises(TypeError, match="abstract"):
        _Proxy()

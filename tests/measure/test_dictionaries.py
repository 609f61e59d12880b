"""Reading dictionaries: headers without the matrix, SAELens hook names and release names."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from tangentlab.errors import DataError, ShapeError, UnknownNameError
from tangentlab.measure.dictionaries import (
    atoms_in_span,
    hook_name,
    inspect_dictionary,
    load_dictionary,
    resolve_saelens_release,
)


def _saelens_folder(path, d_in=12, d_sae=40, meta=None):
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    W = np.random.default_rng(0).standard_normal((d_sae, d_in)).astype(np.float32)
    save_file({"W_dec": W, "W_enc": W.T.copy(), "b_dec": np.zeros(d_in, np.float32)},
              str(path / "sae_weights.safetensors"))
    (path / "cfg.json").write_text(json.dumps(meta or {"hook_name": "blocks.0.hook_resid_post"}))
    return path


def test_inspect_reads_the_shape_without_the_matrix(tmp_path):
    from safetensors.numpy import save_file

    np.save(tmp_path / "b.npy", np.ones((12, 3)))
    save_file({"a": np.ones((2, 2), np.float32), "W_dec": np.ones((5, 12), np.float32)},
              str(tmp_path / "b.safetensors"))
    sae = _saelens_folder(tmp_path / "sae")
    for src, shape, fmt, orient, key in (
            (tmp_path / "b.npy", (12, 3), "npy", None, None),
            (tmp_path / "b.safetensors", (5, 12), "safetensors", None, "W_dec"),
            (sae, (40, 12), "saelens", "rows", "W_dec")):
        info = inspect_dictionary(src)
        assert (info.shape, info.fmt, info.orientation, info.key) == (shape, fmt, orient, key)
        assert load_dictionary(src).matrix.shape == info.shape  # the same as a full read
    assert inspect_dictionary(sae).to_dict()["hook_name"] == "blocks.0.hook_resid_post"
    np.save(tmp_path / "cube.npy", np.zeros((2, 3, 4)))
    with pytest.raises(ShapeError, match="2-D"):
        inspect_dictionary(tmp_path / "cube.npy")
    with pytest.raises(DataError, match="does not exist"):
        inspect_dictionary(tmp_path / "none.npy")
    with pytest.raises(DataError, match="no tensor 'Q'"):
        inspect_dictionary(tmp_path / "b.safetensors", key="Q")


def test_hook_name_of_each_cfg_layout():
    assert hook_name({"hook_name": "blocks.1.hook_resid_post"}) == "blocks.1.hook_resid_post"
    assert hook_name({"metadata": {"hook_name": "blocks.2.hook_mlp_out"}}) == "blocks.2.hook_mlp_out"
    assert hook_name({"hook_point": "blocks.0.hook_resid_pre"}) == "blocks.0.hook_resid_pre"
    assert hook_name({"d_in": 12}) is None and hook_name([]) is None


def _fake_sae_lens(monkeypatch, directory):
    """A stand-in for sae_lens' registry module (the real package is an optional extra)."""
    pkg = types.ModuleType("sae_lens")
    loading = types.ModuleType("sae_lens.loading")
    registry = types.ModuleType("sae_lens.loading.pretrained_saes_directory")
    registry.get_pretrained_saes_directory = lambda: directory
    monkeypatch.setitem(sys.modules, "sae_lens", pkg)
    monkeypatch.setitem(sys.modules, "sae_lens.loading", loading)
    monkeypatch.setitem(sys.modules, "sae_lens.loading.pretrained_saes_directory", registry)


def test_saelens_release_names_resolve_through_the_registry(tmp_path, monkeypatch):
    from tests.empirical.families import write_hub_revision

    lookup = types.SimpleNamespace(
        release="tiny-res", repo_id="tiny/saes", model="tiny", conversion_func=None,
        saes_map={"blocks.0.hook_resid_post": "blocks.0.hook_resid_post"})
    other = types.SimpleNamespace(release="tiny-npz", repo_id="tiny/npz", model="tiny",
                                  conversion_func="gemma_2", saes_map={"layer_0": "layer_0"})
    _fake_sae_lens(monkeypatch, {"tiny-res": lookup, "tiny-npz": other})
    assert resolve_saelens_release("tiny-res/blocks.0.hook_resid_post") == (
        "tiny/saes", "blocks.0.hook_resid_post")
    with pytest.raises(UnknownNameError, match="no SAE 'blocks.9.x'"):
        resolve_saelens_release("tiny-res/blocks.9.x")
    with pytest.raises(UnknownNameError, match="tiny-res"):
        resolve_saelens_release("tiny-rez/blocks.0.hook_resid_post")  # lists releases like it
    with pytest.raises(UnknownNameError, match="RELEASE/SAE_ID"):
        resolve_saelens_release("tiny-res")
    with pytest.raises(DataError, match="gemma_2"):
        resolve_saelens_release("tiny-npz/layer_0")

    # the repository it names, read offline from a (locally built) Hub cache
    def save(folder):
        from pathlib import Path

        _saelens_folder(Path(folder) / "blocks.0.hook_resid_post")

    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write_hub_revision(tmp_path / "home" / "hub", "tiny/saes", "main", save)
    dm = load_dictionary("saelens:tiny-res/blocks.0.hook_resid_post")
    assert dm.fmt == "saelens" and dm.matrix.shape == (40, 12) and "models--tiny--saes" in dm.path
    info = inspect_dictionary("saelens:tiny-res/blocks.0.hook_resid_post")
    assert info.shape == (40, 12) and info.source == "saelens:tiny-res/blocks.0.hook_resid_post"


def test_release_names_without_sae_lens_say_install_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sae_lens", None)  # import sae_lens → ImportError
    with pytest.raises(DataError, match=r"install the sae extra.*tangentlab\[sae\]"):
        load_dictionary("saelens:gpt2-small-res-jb/blocks.8.hook_resid_pre")
    with pytest.raises(DataError, match="install the sae extra"):
        inspect_dictionary("saelens:gpt2-small-res-jb/blocks.8.hook_resid_pre")


def test_atoms_in_span_finds_the_selected_atoms():
    from tangentlab.measure.subspace import orthonormalize

    rng = np.random.default_rng(3)
    D = rng.standard_normal((12, 40))
    D[:, 7] = 0.0  # a dead atom is never in the span
    Q = orthonormalize(D[:, [3, 19, 31]])
    assert atoms_in_span(D, Q) == [3, 19, 31]
    assert atoms_in_span(D * 5.0, Q) == [3, 19, 31]  # scale-free

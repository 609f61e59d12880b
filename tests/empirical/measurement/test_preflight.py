"""Pre-flight checks of ``measure``: bad input answered before any weights load (issue 17, item 2).

The trajectories here are config.json files with placeholder weight files: the pre-flight reads
configs only, so a probe that reached a model load would fail on the placeholder (and the spy
below records it). No wall times are asserted.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tangentlab.cli import main
from tangentlab.empirical.loading.sites import normalize_site_in_config
from tangentlab.empirical.measurement.preflight import (
    SiteProxy,
    check_hook,
    is_site_entry,
    plan_proxies,
    preflight,
    read_configs,
    same_tensor,
)
from tangentlab.errors import (
    CheckpointError,
    ConfigError,
    RankError,
    ShapeError,
    SiteMismatchError,
    UnknownNameError,
)

NEOX = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "vocab_size": 320, "use_parallel_residual": True, "max_position_embeddings": 64}
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 32, "n_layer": 2,
        "n_head": 2, "n_inner": 64, "vocab_size": 320, "n_positions": 64}


def _write(folder, config):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"placeholder: never loaded by the pre-flight")
    return folder


def _trajectory(root, configs):
    for step, cfg in configs.items():
        _write(root / f"step{step}", cfg)
    return root


@pytest.fixture()
def spy(monkeypatch):
    """Records every model load and capture; a probe must answer before any."""
    from tangentlab.empirical.loading import capture, models

    calls = []

    def record(name):
        def fn(*args, **kwargs):
            calls.append(name)
            raise RuntimeError(f"{name} ran: the pre-flight let a bad input through")
        return fn

    for mod, name in ((models, "load_model"), (models, "load_like"), (capture, "capture_batch")):
        monkeypatch.setattr(mod, name, record(name))
    return calls


def _probe(capsys, spy, argv, out, match):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("tangentlab: error:") and "\n" not in err, err
    assert match in err, err
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
    assert spy == []  # no model loaded, so no forward pass ran


def _argv(traj, out, *extra):
    return ["empirical", "measure", str(traj), "--out", str(out), "--device", "cpu", *extra]


def test_misspelt_site(tmp_path, capsys, spy):
    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX, 64: NEOX})
    out = tmp_path / "out"
    _probe(capsys, spy, _argv(traj, out, "--sites", "blocks.0.resid_psot"), out,
           "unknown site 'blocks.0.resid_psot'")
    _probe(capsys, spy, _argv(traj, out, "--sites", "blocks.2.resid_post"), out, "2 blocks")


def test_site_the_family_lacks(tmp_path, capsys, spy):
    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX})
    out = tmp_path / "out"
    _probe(capsys, spy, _argv(traj, out, "--sites", "blocks.0.resid_mid"), out,
           "no resid_mid")


def test_bad_dtype(tmp_path, capsys, spy):
    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX})
    out = tmp_path / "out"
    _probe(capsys, spy, _argv(traj, out, "--set", "dtype=float64"), out, "dtype")
    with pytest.raises(SystemExit) as stop:  # a usage error: argparse's one line
        main(_argv(traj, out, "--dtype", "float8"))
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "float8" in err and "\n" not in err
    assert not out.exists() and spy == []


@pytest.mark.parametrize("proxy,match", [
    ("bogus", "unknown proxy 'bogus'"),
    ("basis:d.npy?colour=red", "colour"),
    ("basis:d.npy?select=best", "select must be"),
    ("basis:{missing}", "does not exist"),
    ("blocks.9.resid_post=pca", "blocks.9.resid_post"),
    ("blocks.0.attn_out=pca", "not measured"),
    ("blocks.0.resid_post=saelens:rel/sae", "as basis:saelens:rel/sae"),  # issue 32: the spelling
    ("hub:org/name/folder", "SITE=basis:hub:org/name/folder"),
])
def test_bad_proxy_spec(tmp_path, capsys, spy, proxy, match):
    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX})
    np.save(tmp_path / "d.npy", np.eye(32)[:, :4])
    proxy = proxy.replace("d.npy", str(tmp_path / "d.npy")).replace(
        "{missing}", str(tmp_path / "missing.npy"))
    out = tmp_path / "out"
    _probe(capsys, spy, _argv(traj, out, "--sites", "blocks.0.resid_post", "--proxy", proxy),
           out, match)


def test_dictionary_of_another_width_or_rank(tmp_path, capsys, spy):
    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX})
    out = tmp_path / "out"
    np.save(tmp_path / "d16.npy", np.ones((16, 4)))
    _probe(capsys, spy, _argv(traj, out, "--sites", "blocks.0.resid_post", "--proxy",
                              f"basis:{tmp_path / 'd16.npy'}"), out, "d=32")
    np.save(tmp_path / "d3.npy", np.eye(32)[:, :3])
    _probe(capsys, spy, _argv(traj, out, "--sites", "blocks.0.resid_post", "--rank", "4",
                              "--proxy", f"basis:{tmp_path / 'd3.npy'}"), out, "only 3 atoms")


@pytest.mark.parametrize("other,match", [
    (GPT2, "mixes architectures"),                             # another family
    (dict(NEOX, hidden_size=64), "mixes architectures"),       # another width
    (dict(NEOX, num_hidden_layers=3), "blocks 2 → 3"),         # another depth, same width
    (dict(NEOX, vocab_size=512), "vocabulary 320 → 512"),
])
def test_checkpoint_of_another_model_mid_trajectory(tmp_path, capsys, spy, other, match):
    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: other, 64: NEOX})
    out = tmp_path / "out"
    _probe(capsys, spy, _argv(traj, out), out, match)


def test_output_path_under_a_file(tmp_path, capsys, spy):
    traj = _trajectory(tmp_path / "t", {0: NEOX})
    (tmp_path / "afile").write_text("mine")
    code = main(_argv(traj, tmp_path / "afile" / "out"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "which is a file" in err and "\n" not in err
    assert (tmp_path / "afile").read_text() == "mine" and spy == []


def test_sae_trained_at_another_site_is_refused(tmp_path, capsys, spy):
    """A SAELens folder's hook_name is compared with the site it is given for (issue 17,
    item 5: one SAE was applied silently to every site)."""
    from safetensors.numpy import save_file

    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX})
    sae = tmp_path / "sae"
    sae.mkdir()
    save_file({"W_dec": np.ones((40, 32), dtype=np.float32)}, str(sae / "sae_weights.safetensors"))
    (sae / "cfg.json").write_text(json.dumps({"d_in": 32, "d_sae": 40,
                                              "hook_name": "blocks.0.hook_resid_post"}))
    out = tmp_path / "out"
    _probe(capsys, spy, _argv(traj, out, "--proxy", f"blocks.1.resid_post=basis:{sae}",
                              "--proxy", "pca"), out, "blocks.0.hook_resid_post")
    # one SAE for two sites: refused, naming the per-site form
    _probe(capsys, spy, _argv(traj, out, "--proxy", f"basis:{sae}"), out, "SITE=basis:")


def test_a_good_trajectory_passes_and_records_its_plan(tmp_path):
    from safetensors.numpy import save_file

    traj = _trajectory(tmp_path / "t", {0: NEOX, 4: NEOX, 64: NEOX})
    sae = tmp_path / "sae"
    sae.mkdir()
    save_file({"W_dec": np.ones((40, 32), dtype=np.float32)}, str(sae / "sae_weights.safetensors"))
    (sae / "cfg.json").write_text(json.dumps({"metadata": {"hook_name": "blocks.1.hook_resid_pre"}}))
    pf = preflight(traj, tmp_path / "out", overrides={
        "sites": "blocks.0.resid_post,blocks.-1.resid_post",
        "proxy": [f"blocks.0.resid_post=basis:{sae}", "ica"]})
    assert pf.sites == ("blocks.0.resid_post", "blocks.1.resid_post") and pf.hidden_size == 32
    assert [c.step for c in pf.checkpoints] == [0, 4, 64] and len(pf.configs) == 3
    basis = pf.proxies["blocks.0.resid_post"]
    assert basis.hook_site == "blocks.1.resid_pre"  # the same tensor as blocks.0.resid_post
    assert (basis.orientation, basis.atoms, basis.select) == ("rows", 40, "energy")
    rec = basis.to_dict()
    assert rec["shape"] == [40, 32] and rec["format"] == "saelens" and "QR" in rec["orthonormalisation"]
    assert pf.proxies["blocks.1.resid_post"] == SiteProxy("blocks.1.resid_post", "ica")
    capped = preflight(traj, None, overrides={"max_checkpoints": 2})
    assert [c.step for c in capped.checkpoints] == [0, 64]


def test_plan_proxies_rules():
    sites = ("blocks.0.resid_post", "blocks.1.resid_post")

    def norm(s):
        return normalize_site_in_config(NEOX, s)

    plan = plan_proxies(["pca"], sites, norm)
    assert {s: p.spec for s, p in plan.items()} == dict.fromkeys(sites, "pca")
    plan = plan_proxies(["blocks.-1.hook_resid_post=ica", "pca"], sites, norm)
    assert plan["blocks.1.resid_post"].spec == "ica" and plan["blocks.0.resid_post"].spec == "pca"
    assert plan["blocks.1.resid_post"].given == "blocks.-1.hook_resid_post"
    with pytest.raises(ConfigError, match="have no proxy"):
        plan_proxies(["blocks.0.resid_post=pca"], sites, norm)
    with pytest.raises(ConfigError, match="both name site"):
        plan_proxies(["blocks.1.resid_post=pca", "blocks.-1.resid_post=ica", "pca"], sites, norm)
    with pytest.raises(ConfigError, match="one dictionary to 2 sites"):
        plan_proxies(["basis:x.npy"], sites, norm)
    assert plan_proxies(["basis:x.npy"], sites[:1], norm)["blocks.0.resid_post"].spec == "basis:x.npy"
    with pytest.raises(UnknownNameError):
        plan_proxies(["blocks.0.resid_mid=pca", "pca"], sites, norm)  # parallel blocks


def test_site_entries_and_same_tensor():
    assert is_site_entry("blocks.3.resid_post=basis:x.npy")
    assert is_site_entry("ln_final.hook_normalized=pca")
    assert not is_site_entry("basis:x.npy?key=W_dec") and not is_site_entry("pca")
    assert same_tensor("blocks.0.resid_pre", "embed") and same_tensor("blocks.2.resid_pre",
                                                                      "blocks.1.resid_post")
    assert not same_tensor("blocks.1.resid_pre", "blocks.1.resid_post")
    assert not same_tensor("blocks.1.mlp_out", "blocks.1.resid_post")


def test_check_hook_resolves_transformerlens_names():
    from tangentlab.measure.dictionaries import DictionaryInfo

    def info(meta, fmt="saelens"):
        return DictionaryInfo((40, 32), "rows", fmt, "sae", "sae/sae_weights.safetensors", "W_dec",
                              meta)

    def norm(s):
        return normalize_site_in_config(GPT2, s)

    assert check_hook("blocks.1.resid_post", info({"hook_name": "blocks.1.hook_resid_post"}),
                      norm) == "blocks.1.resid_post"
    assert check_hook("blocks.0.resid_post", info({"hook_point": "blocks.1.hook_resid_pre"}),
                      norm) == "blocks.1.resid_pre"  # a pre-6.0 cfg.json
    assert check_hook("blocks.1.resid_post", info({}), norm) is None  # no hook named
    assert check_hook("blocks.1.resid_post", info({"hook_name": "x"}, fmt="sparsify"), norm) is None
    with pytest.raises(SiteMismatchError, match="blocks.0.attn_out"):
        check_hook("blocks.0.mlp_out", info({"hook_name": "blocks.0.hook_attn_out"}), norm)
    with pytest.raises(SiteMismatchError, match="no site tangentlab measures"):
        check_hook("blocks.0.mlp_out", info({"hook_name": "blocks.0.attn.hook_z"}), norm)


def test_read_configs_refuses_malformed_configs(tmp_path):
    from tangentlab.empirical.loading.checkpoints import Checkpoint

    good = _write(tmp_path / "a", NEOX)
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "config.json").write_text("[]")
    cks = [Checkpoint(good, "a", 0), Checkpoint(bad, "b", 1)]
    with pytest.raises(CheckpointError, match="not a JSON object"):
        read_configs(cks)
    (bad / "config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(CheckpointError, match="unreadable"):
        read_configs(cks)


def test_rank_and_eval_inputs_are_checked_up_front(tmp_path):
    traj = _trajectory(tmp_path / "t", {0: NEOX})
    with pytest.raises(RankError, match="rank <= 16"):
        preflight(traj, overrides={"rank": 17})
    with pytest.raises(UnknownNameError, match="neither a built-in"):
        preflight(traj, overrides={"eval_text": str(tmp_path / "none.txt")})
    (tmp_path / "plain.txt").write_text("some words here\n\nmore words there")
    with pytest.raises(ConfigError, match="text_column"):
        preflight(traj, overrides={"eval_text": str(tmp_path / "plain.txt"), "text_column": "body"})
    with pytest.raises(ConfigError, match="eval_fraction=1"):
        preflight(traj, overrides={"eval_text": str(tmp_path / "plain.txt"), "eval_fraction": 1})
    with pytest.raises(Exception, match="frequency table"):
        preflight(traj, overrides={"frequency_table": str(tmp_path / "none.csv")})
    with pytest.raises(ConfigError, match="no eval_text"):  # issue 32: it would do nothing
        preflight(traj, overrides={"eval_fraction": 0.1})
    np.save(tmp_path / "wide.npy", np.ones((48, 4)))
    with pytest.raises(ShapeError, match="d=32"):
        preflight(traj, overrides={"sites": "embed", "proxy": f"basis:{tmp_path / 'wide.npy'}"})


def test_without_a_config_json_the_loaded_model_is_checked(tmp_path):
    """GGUF: no config.json to read, so sites, rank and proxies are checked on the loaded model
    (still before any forward pass); with a pre-flight the model must agree with it."""
    from tangentlab.empirical.loading.models import build_model
    from tangentlab.empirical.measurement.measure_config import resolve_measure_config
    from tangentlab.empirical.measurement.preflight import Preflight, loaded_site_plan

    model = build_model("decoder", vocab_size=64, d_model=16, n_layers=2, n_heads=2, seq_len=16)
    cfg = resolve_measure_config({"sites": "embed,blocks.-1.resid_post", "rank": 2,
                                  "proxy": ["blocks.1.resid_post=ica", "pca"]})
    sites, d, plan = loaded_site_plan(None, model, cfg)
    assert sites == ("embed", "blocks.1.resid_post") and d == 16
    assert {s: p.spec for s, p in plan.items()} == {"embed": "pca", "blocks.1.resid_post": "ica"}
    with pytest.raises(RankError, match="rank <= 8"):
        loaded_site_plan(None, model, resolve_measure_config({"rank": 9}))
    with pytest.raises(UnknownNameError):
        loaded_site_plan(None, model, resolve_measure_config({"sites": "blocks.0.resid_mdi"}))
    stale = Preflight(cfg, None, (), ("embed", "blocks.1.resid_post"), 32, plan)
    with pytest.raises(CheckpointError, match="config.json said"):
        loaded_site_plan(stale, model, cfg)

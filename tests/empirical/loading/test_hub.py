"""Model ids and revisions through huggingface_hub, against a Hub cache built in the test (offline,
no mock of huggingface_hub)."""

from __future__ import annotations

import json
import socket

import pytest

from tangentlab.empirical.loading.hub import (
    HubConnectionError,
    hub_cache_dir,
    list_revisions,
    log_spaced_indices,
    parse_revision_spec,
    parse_step,
    select_revisions,
)
from tangentlab.empirical.loading.models import load_model
from tangentlab.empirical.loading.trajectory import resolve_trajectory
from tangentlab.errors import CheckpointError, ConfigError, UnknownNameError
from tests.empirical.families import save_bin, tiny_model, write_hub_revision

PYTHIA_REFS = ["main", "step0"] + [f"step{2 ** i}" for i in range(10)] + \
    [f"step{k * 1000}" for k in range(1, 144)]


@pytest.mark.parametrize("name,step", [
    ("step1000", 1000), ("step0", 0), ("step1000-tokens4B", 1000),
    ("stage1-step140000-tokens587B", 140000), ("step-125000", 125000), ("checkpoint-500", 500),
    ("global_step300", 300), ("main", None), ("v1.0", None), ("tokens4B", None),
    ("steps", None), ("mystep12", None),
])
def test_parse_step(name, step):
    assert parse_step(name) == step


def test_parse_revision_spec():
    assert parse_revision_spec(None) == ("list", [("main", None)])
    assert parse_revision_spec("all") == ("all", None)
    assert parse_revision_spec("log:12") == ("log", 12)
    assert parse_revision_spec("step0, step1000,main=143000") == (
        "list", [("step0", None), ("step1000", None), ("main", 143000)])
    assert parse_revision_spec(["step1", "step2"]) == ("list", [("step1", None), ("step2", None)])
    for bad in ["log:0", "log:x", "log12", "step0,,step1", "main=last"]:
        with pytest.raises(ConfigError):
            parse_revision_spec(bad)


def test_log_spaced_selection_of_pythia_refs():
    picked = select_revisions(PYTHIA_REFS, "log:12")
    steps = [s for _, s in picked]
    assert len(picked) == 12 and steps == sorted(set(steps))
    assert steps[0] == 0 and steps[-1] == 143000 and steps[1] == 1
    ratios = [b / a for a, b in zip(steps[1:], steps[2:])]
    assert max(ratios) / min(ratios) < 3  # roughly geometric
    assert "main" not in [r for r, _ in select_revisions(PYTHIA_REFS, "all")]
    assert len(select_revisions(PYTHIA_REFS, "all")) == 154
    assert log_spaced_indices([0, 10, 100], 5) == [0, 1, 2]
    assert log_spaced_indices([1, 10, 100, 1000, 10000], 3) == [0, 2, 4]


def test_select_revisions_errors():
    with pytest.raises(UnknownNameError, match="step5.*available: main, step0"):
        select_revisions(PYTHIA_REFS, "step0,step5")
    with pytest.raises(CheckpointError, match="main=STEP"):
        select_revisions([], "step0,main")
    assert select_revisions([], "step0,main=9") == [("step0", 0), ("main", 9)]
    assert select_revisions([], "main") == [("main", 0)]  # a lone revision
    assert select_revisions([], "a,b", steps=[5, 2]) == [("b", 2), ("a", 5)]
    with pytest.raises(ConfigError):
        select_revisions([], "a,b", steps=[1])
    with pytest.raises(CheckpointError, match="share steps"):
        select_revisions([], "step1,stage2-step1")
    with pytest.raises(UnknownNameError, match="no revision"):
        select_revisions(["main", "dev"], "all")


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    """HF_HOME holding ``tiny/pythia`` (step0, step4, step64: gpt_neox, different weights; plus a
    ``main`` ref) and ``tiny/mixed`` (a gpt2 and a llama revision); offline."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = tmp_path / "home" / "hub"
    commits = {}
    for i, rev in enumerate(["step0", "step4", "step64"]):
        commits[rev] = write_hub_revision(cache, "tiny/pythia", rev,
                                          tiny_model("gpt_neox", seed=i).save_pretrained)
    (cache / "models--tiny--pythia" / "refs" / "main").write_text(commits["step64"])
    write_hub_revision(cache, "tiny/mixed", "step1", tiny_model("gpt2").save_pretrained)
    write_hub_revision(cache, "tiny/mixed", "step2", tiny_model("llama").save_pretrained)
    return cache, commits


def test_offline_revisions_resolve_through_the_cache(hub):
    cache, commits = hub
    assert hub_cache_dir() == cache
    assert list_revisions("tiny/pythia") == ["main", "step0", "step4", "step64"]
    traj = resolve_trajectory("tiny/pythia", revisions="all")
    assert traj.source == "hub" and traj.model_name == "tiny/pythia"
    assert [c.step for c in traj.checkpoints] == [0, 4, 64]
    for ck in traj.checkpoints:
        assert ck.repo_id == "tiny/pythia" and ck.revision == ck.name
        assert ck.commit == commits[ck.revision] == ck.path.name
        assert ck.path.parent.parent.name == "models--tiny--pythia"
        rec = ck.to_dict()
        assert rec["commit"] == ck.commit and rec["revision"] == ck.revision
        json.dumps(rec)
    assert traj.tokenizer_dir == traj.checkpoints[0].path
    # each revision holds its own weights
    w = [next(load_model(c.path).model.parameters()).detach() for c in traj.checkpoints]
    assert not (w[0] == w[1]).all() and not (w[1] == w[2]).all()
    # the same through the ORG/NAME@SPEC form, log spacing and explicit lists
    assert [c.name for c in resolve_trajectory("tiny/pythia@log:2").checkpoints] == ["step0", "step64"]
    assert [c.step for c in resolve_trajectory("tiny/pythia", revisions="step64,step4").checkpoints] \
        == [4, 64]
    main = resolve_trajectory("tiny/pythia").checkpoints  # default: main, a lone revision
    assert len(main) == 1 and main[0].revision == "main" and main[0].commit == commits["step64"]
    two = resolve_trajectory("tiny/pythia", revisions="main=100,step4").checkpoints
    assert [(c.name, c.step) for c in two] == [("step4", 4), ("main", 100)]
    # HF_HUB_CACHE wins over HF_HOME, and cache_dir= over both
    assert resolve_trajectory("tiny/pythia", revisions="step0", cache_dir=cache).checkpoints[0].commit \
        == commits["step0"]


def test_tokenizer_comes_from_a_revision_that_has_one(hub):
    from tangentlab.empirical.loading.tokenizer import load_tokenizer, train_tokenizer

    cache, _ = hub
    tok = train_tokenizer(["alpha beta gamma " * 30, "gamma beta delta " * 30], vocab_size=300)

    def save(d):
        tiny_model("gpt_neox", seed=5).save_pretrained(d)
        tok.save_pretrained(d)

    commit = write_hub_revision(cache, "tiny/pythia", "step128", save)
    traj = resolve_trajectory("tiny/pythia", revisions="all")
    assert traj.checkpoints[0].revision == "step0"  # holds no tokenizer files
    assert traj.tokenizer_dir.name == commit
    assert len(load_tokenizer(traj.tokenizer_dir)) == len(tok)


def test_hub_cache_env_is_read_at_call_time(hub, tmp_path, monkeypatch):
    cache, _ = hub
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(UnknownNameError, match="elsewhere"):
        resolve_trajectory("tiny/pythia", revisions="step0")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert resolve_trajectory("tiny/pythia", revisions="step0").checkpoints[0].step == 0


def test_cli_lists_revisions_a_selection_picks(hub, capsys):
    from tangentlab.cli import main

    assert main(["empirical", "revisions", "tiny/pythia", "--revisions", "log:2"]) == 0
    assert capsys.readouterr().out.split() == ["step0", "0", "step64", "64"]
    assert main(["empirical", "revisions", "tiny/pythia"]) == 0  # main, as for measure
    assert capsys.readouterr().out.split()[::2] == ["main"]
    assert main(["empirical", "revisions", "tiny/pythia", "--revisions", "all"]) == 0
    assert capsys.readouterr().out.split()[::2] == ["step0", "step4", "step64"]
    assert main(["empirical", "revisions", "tiny/nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "tiny/nope" in err and len(err.splitlines()) == 1


def test_bad_ids_and_revisions_are_typed_one_line_errors(hub, tmp_path):
    cases = [
        (("tiny/nope",), {}, UnknownNameError, "tiny/nope"),
        (("tiny/pythia",), {"revisions": "step5"}, UnknownNameError, "cached refs: main, step0"),
        (("tiny/pythia",), {"revisions": "step0,main"}, CheckpointError, "main=STEP"),
        (("tiny/pythia@all",), {"revisions": "all"}, ConfigError, "already selects"),
        (("tiny/mixed",), {"revisions": "all"}, CheckpointError, "mixes architectures"),
        ((str(tmp_path),), {"revisions": "all"}, ConfigError, "local path"),
    ]
    for args, kw, exc, text in cases:
        with pytest.raises(exc) as err:
            resolve_trajectory(*args, **kw)
        assert text in str(err.value) and "\n" not in str(err.value)


def test_local_folders_keep_working(hub, tmp_path):
    # a local folder spelled like ORG/NAME is a path, not an id
    d = tmp_path / "tiny" / "pythia"
    tiny_model("gpt2").save_pretrained(d / "step7")
    traj = resolve_trajectory(d)
    assert traj.source == "local" and [c.step for c in traj.checkpoints] == [7]
    assert traj.checkpoints[0].repo_id is None and "commit" not in traj.checkpoints[0].to_dict()


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, read, closed): connections to it are refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _go_online(monkeypatch, endpoint: str) -> None:
    """HF_HUB_OFFLINE unset (as in a process started online) and the Hub at ``endpoint``."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # as in a process started online (this suite may run with HF_HUB_OFFLINE=1 at import time)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_ENDPOINT", endpoint)


def test_an_unreachable_hub_falls_back_to_the_cached_refs(hub, tmp_path, monkeypatch, capsys):
    """Network down (a refused loopback port), HF_HUB_OFFLINE unset: the cache's refs/ stand in,
    said in one stderr line; without cached refs, one typed line naming HF_HUB_OFFLINE=1."""
    from tangentlab.cli import main

    _, commits = hub
    _go_online(monkeypatch, f"http://127.0.0.1:{_closed_port()}")
    capsys.readouterr()
    assert main(["empirical", "revisions", "tiny/pythia", "--revisions", "all"]) == 0
    out, err = capsys.readouterr()
    assert out.split()[::2] == ["step0", "step4", "step64"]
    assert len(err.strip().splitlines()) == 1, err
    assert "cannot reach the Hub" in err and "tiny/pythia" in err and "HF_HUB_OFFLINE=1" in err
    traj = resolve_trajectory("tiny/pythia", revisions="log:2")
    assert [c.commit for c in traj.checkpoints] == [commits["step0"], commits["step64"]]
    assert list_revisions("tiny/pythia") == ["main", "step0", "step4", "step64"]

    capsys.readouterr()
    assert main(["empirical", "revisions", "tiny/nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HF_HUB_OFFLINE=1" in err and "tiny/nope" in err, err
    for spec, kw in (("tiny/nope", {"revisions": "all"}), ("tiny/nope", {}),
                     ("tiny/pythia", {"revisions": "step5"})):
        with pytest.raises(HubConnectionError) as exc:
            resolve_trajectory(spec, **kw)
        msg = str(exc.value)
        assert "HF_HUB_OFFLINE=1" in msg and "cannot reach the Hub" in msg and "\n" not in msg
    assert "cached refs: main, step0" in msg  # the revision is not in the cache: it says which are
    bad = tmp_path / "bad"
    for spec in ("log:2", "all"):
        _fails_one_line(capsys, ["empirical", "measure", "--model", "tiny/nope", "--revisions",
                                 spec, "--out", str(bad), "--device", "cpu"], bad, "HF_HUB_OFFLINE=1")


def test_load_model_takes_hub_ids_and_revisions(hub, tmp_path):
    import torch

    cache, commits = hub

    def weights(lm):
        return torch.cat([p.detach().flatten() for p in lm.model.parameters()])

    main_ = load_model("tiny/pythia")  # main
    assert (main_.repo_id, main_.revision, main_.commit) == ("tiny/pythia", "main", commits["step64"])
    at = load_model("tiny/pythia@step4")
    kw = load_model("tiny/pythia", revision="step4", cache_dir=cache, offline=True)
    assert at.commit == kw.commit == commits["step4"] and at.revision == kw.revision == "step4"
    local = load_model(at.path)  # the snapshot folder, as a local path
    assert local.repo_id is None and local.commit is None and local.family == "gpt_neox"
    assert torch.equal(weights(at), weights(local)) and torch.equal(weights(at), weights(kw))
    assert not torch.equal(weights(at), weights(main_))
    assert load_model("tiny/pythia", revision="step0").commit == commits["step0"]
    cases = [
        (("tiny/pythia@step0",), {"revision": "step4"}, ConfigError, "already names"),
        (("tiny/pythia",), {"revision": "log:2"}, ConfigError, "resolve_trajectory"),
        (("tiny/pythia@all",), {}, ConfigError, "one checkpoint"),
        (("tiny/pythia",), {"revision": "step5"}, UnknownNameError, "cached refs"),
        (("tiny/nope",), {}, UnknownNameError, "tiny/nope"),
        ((at.path,), {"revision": "step4"}, ConfigError, "local path"),
    ]
    for args, kwargs, exc, text in cases:
        with pytest.raises(exc) as err:
            load_model(*args, **kwargs)
        assert text in str(err.value) and "\n" not in str(err.value), (args, kwargs)


SETS = ["n_batches=4", "batch_size=2", "seq_len=16", "sample_rows=64", "n_boot=10",
        "n_controls=5", "causal=false", "rank=2"]


def _eval_text(tmp_path):
    """A parquet eval text (read by the datasets loader) and a 320-token BPE trained on it."""
    import pandas as pd

    from tangentlab.empirical.loading.tokenizer import train_tokenizer

    words = ("the river runs to the sea and the valley holds the light of morning while "
             "birds sing over fields of grain").split()
    docs = [" ".join(words[(i * 7 + j) % len(words)] for j in range(60)) for i in range(80)]
    corpus = tmp_path / "eval.parquet"
    pd.DataFrame({"text": docs}).to_parquet(corpus)
    return corpus, train_tokenizer(docs, vocab_size=320)


@pytest.fixture()
def gpt2_suite(tmp_path, monkeypatch):
    """HF_HOME holding ``tiny/gpt2`` (step0, step10, step100, each with its tokenizer) and a
    parquet eval text; offline. Returns the parquet path."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus, tok = _eval_text(tmp_path)
    for i, rev in enumerate(["step0", "step10", "step100"]):
        m = tiny_model("gpt2", seed=i)

        def save(d, m=m):
            m.save_pretrained(d)
            tok.save_pretrained(d)

        write_hub_revision(tmp_path / "home" / "hub", "tiny/gpt2", rev, save)
    return corpus


def _measure_argv(model, out, corpus, *extra):
    argv = ["empirical", "measure", "--model", model, "--out", str(out), "--device", "cpu",
            "--eval-text", f"parquet:{corpus}", *extra]
    return argv + [x for s in SETS for x in ("--set", s)]


def _fails_one_line(capsys, argv, out, text):
    from tangentlab.cli import main

    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.slow
def test_cli_measure_on_a_hub_model_id(gpt2_suite, tmp_path, capsys):
    """`tangentlab empirical measure --model ID --revisions all` end to end, offline."""
    import pandas as pd

    from tangentlab.cli import main

    out = tmp_path / "measured"
    assert main(_measure_argv("tiny/gpt2", out, gpt2_suite, "--revisions", "all")) == 0
    res = pd.read_csv(out / "results.csv")
    assert set(res["model"]) == {"tiny/gpt2"}
    assert sorted(set(res["step"].dropna().astype(int))) == [0, 10, 100]
    man = json.dumps(json.loads((out / "manifest.json").read_text()))
    assert "tiny/gpt2" in man and "models--tiny--gpt2" in man

    # bad input: one line on stderr, exit 2, nothing written
    bad = tmp_path / "bad"
    base = ["empirical", "measure", "--out", str(bad), "--device", "cpu"]
    for extra, text in ((["--model", "tiny/none"], "tiny/none"),
                        (["--model", "tiny/gpt2", "--revisions", "step5"], "step5"),
                        (["--model", "tiny/gpt2@all", "--revisions", "all"], "already selects"),
                        (["--revisions", "all", str(tmp_path)], "--model")):
        _fails_one_line(capsys, base + extra, bad, text)


def test_cli_measure_with_a_given_basis_as_proxy(gpt2_suite, tmp_path, capsys):
    import numpy as np
    import pandas as pd

    from tangentlab.cli import main

    np.save(tmp_path / "basis.npy", np.random.default_rng(0).standard_normal((2, 32)))  # (r, d)
    out = tmp_path / "measured-basis"
    argv = _measure_argv("tiny/gpt2@step0,step100", out, gpt2_suite,  # a dictionary per site
                         "--proxy", f"blocks.-1.resid_post=basis:{tmp_path / 'basis.npy'}",
                         "--proxy", "pca")
    assert main(argv) == 0
    res = pd.read_csv(out / "results.csv")
    assert sorted(set(res["step"].dropna().astype(int))) == [0, 100]
    assert "enrichment" in set(res["metric"])
    # a dictionary for another width: one line naming both dimensions, nothing written
    np.save(tmp_path / "basis16.npy", np.ones((16, 2)))
    bad = tmp_path / "bad"
    argv = _measure_argv("tiny/gpt2@step0", bad, gpt2_suite, "--sites", "blocks.0.resid_post",
                         "--proxy", f"basis:{tmp_path / 'basis16.npy'}")
    _fails_one_line(capsys, argv, bad, "d=32")


def test_online_resolution_against_a_loopback_hub(tmp_path, monkeypatch):
    """The online code path (list_repo_refs, repo_info, tree, file downloads) against a Hub API
    served on 127.0.0.1 from a locally built repository; the client cache starts empty."""
    from tests.empirical.hubserver import HubServer

    served = tmp_path / "served"
    commits = {rev: write_hub_revision(served, "tiny/pythia", rev,
                                       tiny_model("gpt_neox", seed=i).save_pretrained)
               for i, rev in enumerate(["step0", "step4", "step64"])}
    # a revision holding only .bin weights: fetched by the fallback
    def save_bin(d):
        import torch

        m = tiny_model("gpt_neox", seed=9)
        m.config.architectures = [type(m).__name__]
        m.config.save_pretrained(d)
        torch.save(m.state_dict(), f"{d}/pytorch_model.bin")

    commits["step99"] = write_hub_revision(served, "tiny/pythia", "step99", save_bin)
    client = tmp_path / "client"
    monkeypatch.setenv("HF_HUB_CACHE", str(client))
    server = HubServer(served)
    with server as url:
        _go_online(monkeypatch, url)
        assert list_revisions("tiny/pythia") == ["step0", "step4", "step64", "step99"]
        traj = resolve_trajectory("tiny/pythia", revisions="log:3")
        assert [c.step for c in traj.checkpoints] == [0, 4, 99]
        for ck in traj.checkpoints:
            assert ck.commit == commits[ck.revision]
            assert ck.path.is_relative_to(client)
        assert list((traj.checkpoints[0].path).glob("*.safetensors"))
        assert list((traj.checkpoints[-1].path).glob("*.bin"))  # the .bin fallback
        got = [p for method, p in server.requests if method == "GET" and "/resolve/" in p]
        assert got and all(commits["step99"] in p for p in got if p.endswith(".bin"))
        lm = load_model(traj.checkpoints[-1].path)
        assert lm.family == "gpt_neox"
        with pytest.raises(UnknownNameError, match="not found on the Hub"):
            resolve_trajectory("tiny/none", revisions="all")
        with pytest.raises(UnknownNameError, match="does not exist on the Hub.*step0, step4"):
            resolve_trajectory("tiny/pythia", revisions="step5")
    # then offline, from what was downloaded
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = resolve_trajectory("tiny/pythia", revisions="step0,step4")
    assert [c.commit for c in again.checkpoints] == [commits["step0"], commits["step4"]]


@pytest.mark.slow
def test_report_shows_our_two_models_beside_a_measured_hub_suite(gpt2_suite, tmp_path,
                                                                 quick_reproduce):
    """A real quick reproduce (our encoder and decoder) and a real measurement of a locally built
    Hub 'suite', rendered side by side by `tangentlab report RUN --measure NAME=DIR`."""
    import shutil

    from tangentlab.cli import main

    run_dir, rc, err, _ = quick_reproduce(2)
    assert rc == 0, err[-2000:]
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    suite = tmp_path / "suite"
    assert main(_measure_argv("tiny/gpt2", suite, gpt2_suite, "--revisions", "all")) == 0
    assert main(["report", str(run), "--measure", f"tinysuite={suite}"]) == 0
    html = (run / "report.html").read_text()
    row = html.split('id="row-enrichment"')[1].split('class="row"')[0]
    for model in ("encoder", "decoder", "tinysuite"):
        assert model in row, model


#: a tiny GPT-NeoX "suite" named and saved the way EleutherAI/pythia-* is
PYTHIA_ID = "tinyleuther/pythia-tiny"
PYTHIA_STEPS = (0, 1, 2, 4, 1000, 2000)


@pytest.fixture()
def pythia_suite(tmp_path):
    """A served Hub cache holding PYTHIA_ID: step branches ``step0`` ... ``step2000``, each
    ``config.json`` + ``pytorch_model.bin`` (no safetensors) + tokenizer files, and ``main`` at
    the last step, as on the real Hub. Returns (served cache, parquet eval text)."""
    corpus, tok = _eval_text(tmp_path)
    served = tmp_path / "served"
    commit = None
    for i, step in enumerate(PYTHIA_STEPS):
        m = tiny_model("gpt_neox", seed=i)

        def save(d, m=m):
            save_bin(m, d)
            tok.save_pretrained(d)

        commit = write_hub_revision(served, PYTHIA_ID, f"step{step}", save)
    (served / ("models--" + PYTHIA_ID.replace("/", "--")) / "refs" / "main").write_text(commit)
    return served, corpus


@pytest.mark.slow
def test_pythia_walk_through(pythia_suite, tmp_path, monkeypatch, capsys):
    """docs/empirical.md's Pythia walk-through on a suite saved the way Pythia is: list what
    log:K picks, measure online (downloads .bin weights into an empty cache), again with
    HF_HUB_OFFLINE=1, and again with the network down (the cached refs stand in): three equal
    results tables."""
    from tangentlab.cli import main
    from tests.empirical.hubserver import HubServer

    served, corpus = pythia_suite
    client = tmp_path / "client"
    monkeypatch.setenv("HF_HUB_CACHE", str(client))

    def measure(out):
        argv = _measure_argv(PYTHIA_ID, out, corpus, "--revisions", "log:3",
                             "--sites", "blocks.0.resid_post,blocks.1.resid_post")
        assert main(argv) == 0, capsys.readouterr().err[-2000:]
        return (out / "results.csv").read_bytes()

    server = HubServer(served)
    with server as url:
        _go_online(monkeypatch, url)
        # 0. see what a selection picks (lists the refs; downloads no weights)
        assert main(["empirical", "revisions", PYTHIA_ID, "--revisions", "log:3"]) == 0
        assert capsys.readouterr().out.split() == ["step0", "0", "step1", "1", "step2000", "2000"]
        assert not any(p.endswith(".bin") for _, p in server.requests)
        # 1. download and measure (online)
        online = measure(tmp_path / "online")
    snaps = client / ("models--" + PYTHIA_ID.replace("/", "--")) / "snapshots"
    assert len(list(snaps.glob("*/pytorch_model.bin"))) == 3
    assert not list(snaps.glob("*/*.safetensors"))
    res = online.decode()
    for rev in ("step0", "step1", "step2000"):
        assert rev in res
    # 2. later, offline, from the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert measure(tmp_path / "offline") == online
    # 3. the network down and HF_HUB_OFFLINE unset: the cached refs, said in one line
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    capsys.readouterr()
    assert measure(tmp_path / "down") == online
    assert "cannot reach the Hub" in capsys.readouterr().err

"""Bad input through the CLI: one-line error, exit 2, no partial output."""

import shutil

import pytest

from tangentlab.cli import main


def _fails(capsys, argv, out, match):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("tangentlab: error:") and "\n" not in err, err
    assert match in err, err
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


@pytest.mark.parametrize("text,match", [("", "empty"), ("same same same\n\nsame", "single token")])
def test_train_rejects_empty_and_single_type_corpus(tmp_path, capsys, text, match):
    corpus = tmp_path / "c.txt"
    corpus.write_text(text)
    _fails(capsys, ["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--corpus",
                    str(corpus), "--out", str(tmp_path / "run")], tmp_path / "run", match)


def test_train_rejects_non_numeric_config(tmp_path, capsys):
    _fails(capsys, ["empirical", "train", "--arch", "encoder", "--preset", "tiny", "--set",
                    "steps=many", "--out", str(tmp_path / "run")], tmp_path / "run", "steps")


def test_measure_bad_inputs(tiny_runs, tmp_path, capsys):
    dec = tiny_runs["decoder"]
    out = tmp_path / "out"
    base = ["empirical", "measure", "--out", str(out), "--device", "cpu", "--set", "n_batches=4"]
    _fails(capsys, base + [str(tmp_path / "missing")], out, "does not exist")
    _fails(capsys, base + [str(dec), "--set", "rank=abc"], out, "rank")
    _fails(capsys, base + [str(dec), "--sites", "blocks.9.resid_post"], out, "blocks.9")
    _fails(capsys, base + [str(dec), "--rank", "32"], out, "rank")
    _fails(capsys, base + [str(dec), "--rank", "17"], out, "2r <= d")

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copytree(dec / "checkpoints" / "step_000000", mixed / "step_000000")
    shutil.copytree(tiny_runs["encoder"] / "checkpoints" / "step_000060", mixed / "step_000060")
    _fails(capsys, base + [str(mixed)], out, "mixes architectures")

    corrupt = tmp_path / "corrupt"
    shutil.copytree(dec, corrupt)
    (corrupt / "checkpoints" / "step_000001" / "model.safetensors").write_bytes(b"\x00garbage")
    _fails(capsys, base + [str(corrupt)], out, "corrupt")
    (corrupt / "checkpoints" / "step_000001" / "model.safetensors").unlink()
    _fails(capsys, base + [str(corrupt)], out, "no weights")


def test_measure_cli_runs_on_a_single_model_dir(tiny_runs, tmp_path, capsys):
    ck = tiny_runs["decoder"] / "checkpoints" / "step_000060"
    out = tmp_path / "single"
    from tangentlab.empirical.loading.corpus import load_texts

    corpus = tmp_path / "c.jsonl"
    import json

    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in load_texts("bible", max_docs=40)))
    code = main(["empirical", "measure", str(ck), "--out", str(out), "--device", "cpu",
                 "--eval-text", str(corpus), "--set", "threads=1",
                 "--sites", "blocks.-1.resid_post", "--rank", "4", "--set", "n_batches=4",
                 "--set", "causal_checkpoints=1", "--set", "n_boot=20",
                 "--exclude-positions", "0"])
    assert code == 0, capsys.readouterr().err
    from tangentlab.runs import read_manifest, read_results

    df = read_results(out)
    assert set(df.checkpoint) >= {"step_000060"} and "trajectory_variance_spearman" not in set(df.metric)
    man = read_manifest(out)
    assert man["config"]["exclude_positions"] == [0] and man["checkpoints"][0]["step"] == 60


def test_measure_into_a_training_run_is_refused_before_any_work(tmp_path, capsys):
    run = tmp_path / "train"
    run.mkdir()
    (run / "train_config.json").write_text("{}")
    code = main(["empirical", "measure", str(tmp_path / "no-such-trajectory"), "--out", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "holds a 'empirical/train' run, not a 'empirical/measure' run" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]
    assert sorted(p.name for p in run.iterdir()) == ["train_config.json"]


def test_train_into_an_existing_training_run_says_to_resume(tmp_path, capsys):
    run = tmp_path / "train"
    run.mkdir()
    (run / "train_config.json").write_text("{}")
    code = main(["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--out", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "pass --resume to continue it" in err and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]


def test_fetch_into_an_existing_file_or_a_users_folder_is_refused(tmp_path, capsys):
    target = tmp_path / "model.bin"
    target.write_text("user data")
    assert main(["empirical", "fetch", "smollm2", "--out", str(target)]) == 2
    assert "is an existing file" in capsys.readouterr().err
    user = tmp_path / "home"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    assert main(["empirical", "fetch", "smollm2", "--out", str(user)]) == 2
    assert "is not empty and is not a tangentlab run directory" in capsys.readouterr().err
    assert target.read_text() == "user data" and sorted(p.name for p in user.iterdir()) == ["notes.txt"]


def test_measure_flags_and_config_keys_share_names(capsys):
    """Every measure flag that sets a config key is spelled like it (issue 17, item 6)."""
    import dataclasses

    from tangentlab.cli import build_parser
    from tangentlab.commands.empirical import MEASURE_FLAGS
    from tangentlab.empirical.measurement.protocol import MeasureConfig

    keys = {f.name for f in dataclasses.fields(MeasureConfig)}
    parser = dict(__import__("tangentlab.cli", fromlist=["iter_parsers"]).iter_parsers(
        build_parser()))["tangentlab empirical measure"]
    for action in parser._actions:
        if action.dest in keys:
            assert f"--{action.dest.replace('_', '-')}" in action.option_strings, action
            assert action.dest in MEASURE_FLAGS or action.dest == "seed"  # seed=: its own arg
    assert set(MEASURE_FLAGS) <= keys
    assert dict(MeasureConfig.renamed_keys) == {"corpus": "eval_text",
                                                "frequency_file": "frequency_table"}
    # the old flag still parses, with one warning line
    args = build_parser().parse_args(["empirical", "measure", "x", "--out", "o", "--controls", "7"])
    assert args.n_controls == "7"
    assert capsys.readouterr().err.strip() == ("tangentlab: warning: --controls is deprecated; "
                                               "use --n-controls")
    args = build_parser().parse_args(["empirical", "measure", "x", "--out", "o", "--proxy",
                                      "blocks.0.resid_post=basis:a.npy", "--proxy", "pca"])
    assert args.proxy == ["blocks.0.resid_post=basis:a.npy", "pca"]


def test_revisions_defaults_to_main_like_measure(tmp_path, monkeypatch, capsys):
    """One default for --revisions: `revisions` lists what `measure --model` would take."""
    from tests.empirical.families import write_hub_revision

    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def save(folder):  # configs and placeholder weights: revisions reads refs only
        import pathlib

        (pathlib.Path(folder) / "config.json").write_text('{"model_type": "gpt2"}')
        (pathlib.Path(folder) / "model.safetensors").write_bytes(b"placeholder")

    cache = tmp_path / "home" / "hub"
    commits = [write_hub_revision(cache, "tiny/suite", r, save) for r in ("step0", "step4")]
    (cache / "models--tiny--suite" / "refs" / "main").write_text(commits[1])
    assert main(["empirical", "revisions", "tiny/suite"]) == 0
    got = capsys.readouterr()
    assert got.out == "main\t0\n"
    assert "2 of the 3 refs carry a step: --revisions all" in got.err
    assert main(["empirical", "revisions", "tiny/suite", "--revisions", "all"]) == 0
    assert capsys.readouterr().out == "step0\t0\nstep4\t4\n"
    from tangentlab.empirical import resolve_trajectory  # the Hub form, exported

    assert [c.revision for c in resolve_trajectory("tiny/suite").checkpoints] == ["main"]


def test_eval_split_text_column_and_a_dictionary_per_site_reach_the_manifest(tiny_runs, tmp_path,
                                                                             capsys):
    """--eval-fraction and --text-column control the split, the manifest records both sides;
    --proxy SITE=basis:... serves one site and the manifest records the basis (issue 17,
    items 4 and 7)."""
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from tangentlab.empirical.loading.corpus import load_texts
    from tangentlab.runs import read_manifest, read_results

    ck = tiny_runs["decoder"] / "checkpoints" / "step_000060"
    docs = load_texts("bible", max_docs=40)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(docs)))
    sae = tmp_path / "sae"
    sae.mkdir()
    W = np.random.default_rng(0).standard_normal((48, 32)).astype(np.float32)  # (d_sae, d_in)
    save_file({"W_dec": W}, str(sae / "sae_weights.safetensors"))
    (sae / "cfg.json").write_text(json.dumps({"hook_name": "blocks.1.hook_resid_post"}))
    out = tmp_path / "m"
    code = main(["empirical", "measure", str(ck), "--out", str(out), "--device", "cpu",
                 "--eval-text", str(corpus), "--text-column", "body", "--eval-fraction", "0.5",
                 "--sites", "blocks.0.resid_post,blocks.-1.resid_post", "--rank", "4",
                 "--proxy", f"blocks.-1.resid_post=basis:{sae}?select=first", "--proxy", "pca",
                 "--set", "threads=1", "--set", "n_batches=4", "--set", "causal=false",
                 "--set", "n_boot=20"])
    assert code == 0, capsys.readouterr().err
    man = read_manifest(out)
    split = man["eval_split"]
    assert split["eval_fraction"] == 0.5 and split["text_column"] == "body"
    assert split["eval"]["documents"] + split["frequency"]["documents"] == len(docs)
    assert 10 <= split["eval"]["documents"] <= 30  # about half, by a seeded hash
    assert split["eval"]["tokens"] > 0 and split["frequency"]["counted"] is True
    assert split["frequency"]["tokens"] > 0
    assert man["config"]["eval_text"] == str(corpus) and man["config"]["eval_fraction"] == 0.5
    basis = man["proxies"]["blocks.1.resid_post"]
    assert basis["format"] == "saelens" and basis["shape"] == [48, 32]
    assert basis["orientation"] == "rows" and basis["atoms"] == 48 and basis["select"] == "first"
    assert basis["atoms_kept"] == [0, 1, 2, 3] and basis["hook_site"] == "blocks.1.resid_post"
    assert "QR" in basis["orthonormalisation"] and basis["given_for"] == "blocks.-1.resid_post"
    assert man["proxies"]["blocks.0.resid_post"]["spec"] == "pca"
    df = read_results(out)
    methods = df.dropna(subset=["method"]).groupby("site")["method"].unique()
    assert list(methods["blocks.0.resid_post"]) == ["pca"]
    assert list(methods["blocks.1.resid_post"]) == [f"basis:{sae}?select=first"]

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
    from tangentlab.empirical.corpus import load_texts

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

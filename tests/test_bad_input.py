"""Damaged inputs are typed errors naming the file and the field (exit 2), never exit 3.

Each probe is valid JSON of the wrong shape, a file that is not UTF-8, or an output path that
cannot hold a run; each failed with an internal error (exit 3) before the files were read through
:mod:`tangentlab.readers`. Probes that need a trained model live beside the trainer's tests
(``tests/empirical/training/test_train.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tangentlab.cli import main
from tangentlab.errors import CheckpointError, DataError, OutputPathError
from tangentlab.readers import check_fields, read_json

# ----------------------------------------------------------------------- the reader itself


@pytest.mark.parametrize(("text", "kwargs", "says"), [
    ("[]", {}, "must hold an object, got a list []"),
    ('{"step": [3]}', {"fields": {"step": int}}, "field 'step' must be a whole number, got a list [3]"),
    ('{"step": true}', {"fields": {"step": int}}, "field 'step' must be a whole number, got a boolean"),
    ("{}", {"fields": {"step": int}}, "has no field 'step'"),
    ('{"a": 5}', {"optional": {"a": list}}, "field 'a' must be a list, got a whole number 5"),
    ("{", {}, "is not valid JSON"),
    ('"x"', {"expect": list}, "must hold a list, got a string \"x\""),
])
def test_read_json_names_the_file_and_the_field(tmp_path, text, kwargs, says):
    path = tmp_path / "f.json"
    path.write_text(text)
    with pytest.raises(DataError) as info:
        read_json(path, **kwargs)
    assert says in str(info.value) and str(path) in str(info.value)


def test_read_json_accepts_what_it_should(tmp_path):
    path = tmp_path / "f.json"
    path.write_text('{"step": 3, "loss": 2, "name": null}')
    assert read_json(path, fields={"step": int, "loss": float}, optional={"name": str}) == \
        {"step": 3, "loss": 2, "name": None}


def test_read_json_refuses_non_utf8_and_missing_files_with_the_chosen_error(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(CheckpointError, match="is not UTF-8"):
        read_json(path, error=CheckpointError)
    with pytest.raises(CheckpointError, match="is missing"):
        read_json(tmp_path / "absent.json", error=CheckpointError)


def test_check_fields_refuses_a_record_that_is_not_an_object():
    with pytest.raises(DataError, match="stage 'x' must be a JSON object, got a string"):
        check_fields("done", where="stage 'x'", fields={"status": str})


# ----------------------------------------------------------------------- probes through the CLI


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "internal error" not in err[0]
    return err[0]


def _checkpoint(folder: Path, step: int = 0, config=None) -> Path:
    """A checkpoint folder as resolve_trajectory sees it (its weights are never loaded here)."""
    ck = folder / "checkpoints" / f"step_{step:06d}"
    ck.mkdir(parents=True)
    cfg = config if config is not None else {"model_type": "gpt2", "n_embd": 32,
                                             "architectures": ["GPT2LMHeadModel"]}
    (ck / "config.json").write_text(json.dumps(cfg))
    (ck / "model.safetensors").write_bytes(b"not read")
    (ck / "train_state.json").write_text(json.dumps({"step": step, "tokens_seen": 0}))
    return ck


def _measure(trajectory, out) -> list[str]:
    return ["empirical", "measure", str(trajectory), "--out", str(out), "--device", "cpu"]


def _damage_train_config(run):
    _checkpoint(run)
    (run / "train_config.json").write_text("[]")
    return run, "train_config.json", "must hold an object"


def _damage_config_list(run):
    _checkpoint(run, config=[])
    return run, "config.json", "must hold an object"


def _damage_config_architectures(run):
    _checkpoint(run, config={"model_type": "gpt2", "n_embd": 32, "architectures": 5})
    return run, "config.json", "field 'architectures'"


def _damage_train_state(run):
    ck = _checkpoint(run)
    (ck / "train_state.json").write_text('{"step": [3]}')
    return run / "checkpoints", "train_state.json", "field 'step'"  # a folder of checkpoints


@pytest.mark.parametrize("damage", [_damage_train_config, _damage_config_list,
                                    _damage_config_architectures, _damage_train_state],
                         ids=["train_config=[]", "config.json=[]", "architectures=5",
                              "train_state step=[3]"])
def test_measure_on_a_damaged_trajectory_is_exit_2_naming_the_file(tmp_path, capsys, damage):
    trajectory, name, field = damage(tmp_path / "run")
    assert main(_measure(trajectory, tmp_path / "m")) == 2
    line = _one_error_line(capsys)
    assert name in line and field in line, line
    assert not (tmp_path / "m").exists()


def test_resuming_a_training_run_whose_config_is_not_an_object_is_exit_2(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train_config.json").write_text("[]")
    argv = ["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--device", "cpu",
            "--out", str(run), "--resume"]
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert "train_config.json" in line and "must hold an object" in line
    assert sorted(p.name for p in run.iterdir()) == ["train_config.json"]


@pytest.mark.parametrize("argv", [["reproduce", "--quick", "--print-config"],
                                  ["synthetic", "run", "river-valley", "--quick"]],
                         ids=["reproduce", "synthetic"])
def test_a_config_file_that_is_not_utf8_is_exit_2(tmp_path, capsys, argv):
    toml = tmp_path / "c.toml"
    toml.write_bytes(b"seed = 1\n# caf\xe9 in Latin-1\n")
    assert main([*argv, "--config", str(toml), "--out", str(tmp_path / "o")]
                if argv[0] == "synthetic" else [*argv, "--config", str(toml)]) == 2
    line = _one_error_line(capsys)
    assert str(toml) in line and "not UTF-8" in line


def _no_stages(monkeypatch):
    """reproduce with an empty stage list: only the manifest is read (nothing could run long)."""
    import tangentlab.pipeline.reproduce as rp

    monkeypatch.setattr(rp, "build_stages", lambda cfg: [])


@pytest.mark.parametrize(("manifest", "says"), [
    ({"kind": "reproduce", "stages": {"theory": "done"}}, "stage 'theory'"),
    ({"kind": "reproduce", "stages": {"theory": {"status": "done", "outputs": 5}}}, "field 'outputs'"),
    ({"kind": "reproduce", "stages": ["theory"]}, "field 'stages'"),
])
def test_reproduce_on_a_manifest_with_malformed_stage_records_is_exit_2(
        tmp_path, capsys, monkeypatch, manifest, says):
    _no_stages(monkeypatch)
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(manifest))
    before = (run / "manifest.json").read_bytes()
    assert main(["reproduce", "--quick", "--out", str(run)]) == 2
    line = _one_error_line(capsys)
    assert "manifest.json" in line and says in line, line
    assert (run / "manifest.json").read_bytes() == before


def test_a_manifest_that_is_not_an_object_is_a_data_error(tmp_path):
    from tangentlab.runs import read_manifest, read_stage_records

    (tmp_path / "manifest.json").write_text("[1, 2]")
    for read in (read_manifest, read_stage_records):
        with pytest.raises(DataError, match="must hold an object, got a list"):
            read(tmp_path)


@pytest.mark.parametrize(("where", "text", "says"), [
    # the exit code's one reader is each stage's checks.json (tangentlab.contract.failed_checks)
    ("theory/checks.json", "{}", "checks.json' must hold a list"),
    ("theory/checks.json", '[{"name": "x", "passed": "yes"}]', "field 'passed' must be true or false"),
    ("validate/checks.json", '["x"]', "check 0"),
])
def test_reproduce_reads_its_stage_outputs_for_their_shape(tmp_path, capsys, monkeypatch, where,
                                                           text, says):
    import tangentlab.pipeline.reproduce as rp
    from tangentlab.pipeline.stages import RunSummary

    run = tmp_path / "run"
    (run / where).parent.mkdir(parents=True)
    (run / where).write_text(text)
    monkeypatch.setattr(rp, "reproduce", lambda *a, **k: RunSummary(run_dir=run, records=()))
    assert main(["reproduce", "--quick", "--out", str(run)]) == 1  # a failed check, not a crash
    err = capsys.readouterr().err
    assert "internal error" not in err and says in err, err


def test_a_non_numeric_frequency_table_is_a_data_error_naming_the_line(tmp_path):
    from tangentlab.empirical.loading.corpus import load_frequency_table

    path = tmp_path / "frequency.csv"
    path.write_text("token_id,count\n3,4\nx,y\n# vocab_size=16\n")
    with pytest.raises(DataError, match=r"frequency.csv' line 3 is not 'token_id,count'"):
        load_frequency_table(path)
    path.write_text("token_id,count\n99,4\n# vocab_size=16\n")
    with pytest.raises(DataError, match="outside"):
        load_frequency_table(path)


# ----------------------------------------------------------------------- output paths


SYNTHETIC = ["synthetic", "run", "river-valley", "--quick", "--out"]


@pytest.mark.parametrize("size", [256, 250])
def test_an_out_name_too_long_for_the_run_files_is_exit_2(tmp_path, capsys, size):
    out = tmp_path / ("a" * size)
    assert main([*SYNTHETIC, str(out)]) == 2
    assert "choose a shorter --out" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_an_out_name_at_the_limit_is_accepted(tmp_path):
    from tangentlab.runs import MAX_RUN_NAME_BYTES, check_output_dir, run_lock

    out = tmp_path / ("a" * MAX_RUN_NAME_BYTES)
    assert check_output_dir(out) == "new"
    with run_lock(out):  # its lock files fit beside it
        pass


@pytest.mark.parametrize("argv", [SYNTHETIC, ["validate", "--quick", "--out"],
                                  ["reproduce", "--quick", "--out"],
                                  ["empirical", "train", "--arch", "decoder", "--out"],
                                  ["empirical", "measure", "somewhere", "--out"],
                                  ["empirical", "fetch", "smollm2", "--out"]],
                         ids=["synthetic", "validate", "reproduce", "train", "measure", "fetch"])
def test_an_empty_out_is_refused_not_the_current_folder(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    assert main([*argv, ""]) == 2
    assert "--out is empty" in _one_error_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_out_in_a_read_only_parent_is_exit_2(tmp_path, capsys, monkeypatch):
    import tangentlab.runs as runs

    parent = tmp_path / "parent"
    (parent / "out").mkdir(parents=True)
    real_access = os.access
    # as root every folder is writable, so the read-only parent is simulated where it is checked
    monkeypatch.setattr(runs.os, "access", lambda p, mode: False if Path(p) == parent
                        else real_access(p, mode))
    assert main([*SYNTHETIC, str(parent / "out")]) == 2
    line = _one_error_line(capsys)
    assert str(parent) in line and "not writable" in line
    assert sorted(p.name for p in parent.iterdir()) == ["out"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only folders")
def test_an_empty_out_in_a_really_read_only_parent_is_exit_2(tmp_path, capsys):
    parent = tmp_path / "parent"
    (parent / "out").mkdir(parents=True)
    parent.chmod(0o555)
    try:
        assert main([*SYNTHETIC, str(parent / "out")]) == 2
        assert "not writable" in _one_error_line(capsys)
    finally:
        parent.chmod(0o755)


def test_a_lock_that_cannot_be_created_is_an_output_path_error(tmp_path):
    from tangentlab.runs import run_lock

    blocker = tmp_path / "file"
    blocker.write_text("a file where the lock's folder would go")
    with pytest.raises(OutputPathError, match="cannot lock run directory"):
        with run_lock(blocker / "run"):
            pass
    assert blocker.read_text().startswith("a file")


def test_weights_of_another_width_under_an_unchanged_config_are_exit_2(tmp_path, capsys):
    """A checkpoint whose config.json matches the trajectory but whose weights were saved from a
    wider model: a one-line checkpoint error naming the folder, nothing written (not exit 3)."""
    from safetensors.torch import load_file, save_file

    from tangentlab.empirical.loading.tokenizer import train_tokenizer
    from tests.empirical.families import tiny_model

    root = tmp_path / "traj"
    tok = train_tokenizer(["the quick brown fox jumps over the lazy dog " * 50], vocab_size=300)
    for step, width in ((0, 32), (1, 48)):
        model = tiny_model("gpt2", seed=step, n_embd=width)
        ck = root / f"step_{step}"
        model.save_pretrained(ck)
        tok.save_pretrained(str(ck))
    narrow = json.loads((root / "step_0" / "config.json").read_text())
    (root / "step_1" / "config.json").write_text(json.dumps(narrow))  # the config says 32
    wide = load_file(str(root / "step_1" / "model.safetensors"))
    save_file(wide, str(root / "step_1" / "model.safetensors"), metadata={"format": "pt"})
    capsys.readouterr()  # the saves' progress lines
    assert main(_measure(root, tmp_path / "m") + ["--sites", "blocks.0.resid_post", "--rank", "2",
                                                  "--set", "n_batches=4", "--set", "seq_len=16"]) == 2
    line = _one_error_line(capsys)
    assert "step_1" in line, line
    assert not (tmp_path / "m").exists()

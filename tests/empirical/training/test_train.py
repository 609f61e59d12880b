import json

import pytest
import torch
from safetensors.torch import load_file

from tangentlab.empirical.training.train import (
    PRESETS,
    checkpoint_schedule,
    list_checkpoints,
    make_batch,
    train_model,
)
from tangentlab.errors import CheckpointError, ConfigError, OutputPathError, RunLockedError
from tangentlab.runs import read_results


def test_schedule_is_log_spaced_with_zero():
    s = checkpoint_schedule(1000, 8)
    assert s[0] == 0 and s[-1] == 1000 and s == sorted(set(s))
    assert s[1] <= 2 and s[-2] < 500  # dense early


def test_tiny_runs_have_trajectory_and_manifest(tiny_runs):
    for arch, run in tiny_runs.items():
        ck = list_checkpoints(run)
        steps = [s for s, _ in ck]
        assert steps == checkpoint_schedule(PRESETS["tiny"].steps, PRESETS["tiny"].n_checkpoints)
        assert all((d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file()
                   for _, d in ck)
        assert [d for _, d in ck if (d / "optimizer.pt").exists()] == [ck[-1][1]]
        man = json.loads((run / "manifest.json").read_text())
        assert man["arch"] == arch and man["tie_embeddings"] is True
        log = (run / "train_log.csv").read_text().splitlines()
        first, last = float(log[1].split(",")[1]), float(log[-1].split(",")[1])
        assert last < first  # it learned something
        assert (run / "frequency.csv").is_file() and (run / "eval.jsonl").is_file()
        inloop = read_results(run / "inloop.csv")  # tidy rows, one number per row
        assert sorted(set(inloop.step)) == [20, 40, 60]
        assert (inloop[inloop.metric == "p_value"].value >= 1 / 21 - 1e-12).all()


def test_mlm_batch_masks_about_15_percent():
    stream = torch.arange(10_000) % 300 + 4
    inp, lab, masked = make_batch(stream, 5, batch_size=16, seq_len=64, arch="encoder", seed=0,
                                  mask_id=3, vocab_size=304)
    frac = masked.float().mean().item()
    assert 0.10 < frac < 0.20
    assert (lab[~masked] == -100).all() and (lab[masked] >= 4).all()
    assert ((inp == 3) == (masked & (inp == 3))).all()
    again = make_batch(stream, 5, batch_size=16, seq_len=64, arch="encoder", seed=0,
                       mask_id=3, vocab_size=304)
    assert all(torch.equal(a, b) for a, b in zip((inp, lab, masked), again))


class _Stop(Exception):
    pass


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_is_bit_identical(tmp_path, optimizer):
    ov = {"steps": 12, "n_checkpoints": 4, "max_docs": 6, "optimizer": optimizer,
          "measure_every": 5}
    full = train_model("decoder", tmp_path / "full", preset="tiny", device="cpu", overrides=ov)

    def stop(state):
        if state.step == 7:
            raise _Stop

    with pytest.raises(_Stop):
        train_model("decoder", tmp_path / "cut", preset="tiny", device="cpu", overrides=ov,
                    callbacks=[stop])
    assert not (tmp_path / "cut" / "manifest.json").exists()
    assert max(s for s, _ in list_checkpoints(tmp_path / "cut")) < 12
    train_model("decoder", tmp_path / "cut", preset="tiny", device="cpu", overrides=ov, resume=True)
    a = load_file(str(full / "checkpoints/step_000012/model.safetensors"))
    b = load_file(str(tmp_path / "cut/checkpoints/step_000012/model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the in-loop measurements after resuming are the uninterrupted run's
    inloop = (full / "inloop.csv").read_text()
    assert inloop == (tmp_path / "cut" / "inloop.csv").read_text()
    assert sorted(set(read_results(full / "inloop.csv").step)) == [5, 10, 12]


def test_every_checkpoint_keeps_its_optimizer_state_when_asked_and_trains_the_same(tmp_path):
    """``keep_optimizer_states``: each checkpoint keeps the AdamW state of its own step (the update
    energies read it), and the weights are bit-identical to a run that keeps only the newest."""
    ov = {"steps": 8, "n_checkpoints": 3, "max_docs": 6, "measure_every": 0}
    kept = train_model("decoder", tmp_path / "kept", preset="tiny", device="cpu",
                       overrides={**ov, "keep_optimizer_states": True})
    plain = train_model("decoder", tmp_path / "plain", preset="tiny", device="cpu", overrides=ov)
    ck = list_checkpoints(kept)
    assert len(ck) == 3 and all((d / "optimizer.pt").is_file() for _, d in ck)
    assert [d.name for _, d in list_checkpoints(plain) if (d / "optimizer.pt").is_file()] == [
        ck[-1][1].name]
    for s, d in ck[1:]:  # the state's step count is the checkpoint's step
        state = torch.load(d / "optimizer.pt", weights_only=True)["optimizers"][0]["state"]
        assert int(float(state[0]["step"])) == s
    a = load_file(str(kept / "checkpoints/step_000008/model.safetensors"))
    b = load_file(str(plain / "checkpoints/step_000008/model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_keeping_the_optimizer_states_may_change_on_resume_and_in_an_older_saved_config(tmp_path):
    """``keep_optimizer_states`` changes what a run keeps, not what it trains: a run cut short
    resumes with it turned on, and a saved config from before the key existed still resumes;
    the weights are the uninterrupted run's."""
    ov = {"steps": 8, "n_checkpoints": 3, "max_docs": 6, "measure_every": 0}
    full = train_model("decoder", tmp_path / "full", preset="tiny", device="cpu", overrides=ov)

    def stop(state):
        if state.step == 5:
            raise _Stop

    for name, keep in (("turned-on", True), ("older", False)):
        with pytest.raises(_Stop):
            train_model("decoder", tmp_path / name, preset="tiny", device="cpu", overrides=ov,
                        callbacks=[stop])
        if name == "older":  # as written before the key existed
            saved = json.loads((tmp_path / name / "train_config.json").read_text())
            saved.pop("keep_optimizer_states")
            (tmp_path / name / "train_config.json").write_text(json.dumps(saved))
        train_model("decoder", tmp_path / name, preset="tiny", device="cpu", resume=True,
                    overrides={**ov, "keep_optimizer_states": keep})
        a = load_file(str(full / "checkpoints/step_000008/model.safetensors"))
        b = load_file(str(tmp_path / name / "checkpoints/step_000008/model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), name
    with pytest.raises(ConfigError, match="config differs in lr"):  # a training key still counts
        train_model("decoder", tmp_path / "older", preset="tiny", device="cpu", resume=True,
                    overrides={**ov, "lr": 0.5})


def test_refuses_overwrite_and_bad_resume(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("user data")
    with pytest.raises(ConfigError):
        train_model("decoder", tmp_path / "x", preset="tiny", device="cpu")
    with pytest.raises(CheckpointError):
        train_model("decoder", tmp_path / "y", preset="tiny", device="cpu", resume=True)
    with pytest.raises(ConfigError):
        train_model("decoder", tmp_path / "z", preset="tiny", overrides={"steps": "many"})
    assert not (tmp_path / "z").exists()


_OV = {"steps": 12, "n_checkpoints": 4, "max_docs": 6, "measure_every": 5}


def _final_weights(run):
    return load_file(str(run / "checkpoints/step_000012/model.safetensors"))


def _same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference: a tiny decoder trained for 12 steps without interruption."""
    return train_model("decoder", tmp_path_factory.mktemp("full") / "run", preset="tiny",
                       device="cpu", overrides=_OV)


def test_resume_before_the_first_checkpoint_restarts_from_step_zero(
        tmp_path, monkeypatch, uninterrupted):
    import tangentlab.empirical.training.train as train

    real = train.save_checkpoint

    def killed_before_first_checkpoint(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "save_checkpoint", killed_before_first_checkpoint)
    run = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        train_model("decoder", run, preset="tiny", device="cpu", overrides=_OV)
    monkeypatch.setattr(train, "save_checkpoint", real)
    assert (run / "train_config.json").is_file() and (run / "tokenizer").is_dir()
    assert list_checkpoints(run) == []
    (run / "eval.jsonl").unlink()  # as if killed before the eval documents were written
    # without --resume the message says what to do; nothing is touched
    with pytest.raises(OutputPathError, match="pass --resume to continue it"):
        train_model("decoder", run, preset="tiny", device="cpu", overrides=_OV)
    # a different config cannot resume it
    with pytest.raises(ConfigError, match="config differs in steps"):
        train_model("decoder", run, preset="tiny", device="cpu", overrides={**_OV, "steps": 13},
                    resume=True)
    train_model("decoder", run, preset="tiny", device="cpu", overrides=_OV, resume=True)
    assert _same_weights(_final_weights(uninterrupted), _final_weights(run))
    for name in ("eval.jsonl", "frequency.csv", "train_log.csv", "inloop.csv"):
        assert (run / name).read_text() == (uninterrupted / name).read_text(), name
    assert json.loads((run / "manifest.json").read_text())["resumed_from"] == 0


def test_a_second_writer_of_a_training_run_is_refused(tmp_path):
    from tests.test_runs import _hold_in_subprocess

    run = tmp_path / "run"
    holder = _hold_in_subprocess(run, tmp_path)
    try:
        with pytest.raises(RunLockedError, match=f"in use by pid {holder.pid}"):
            train_model("decoder", run, preset="tiny", device="cpu", overrides=_OV)
        assert not run.exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_kill_while_a_checkpoint_is_written_then_resume_is_bit_identical(
        tmp_path, uninterrupted, caplog):
    """SIGKILL inside the checkpoint writer: the half-built checkpoint is never read, and
    ``empirical train --resume`` ends with the uninterrupted run's weights."""
    import logging
    import signal

    from tangentlab.cli import main
    from tangentlab.runs import read_lock_holder
    from tests.killing import kill_at

    run = tmp_path / "cut"
    argv = ["empirical", "train", "--arch", "decoder", "--preset", "tiny", "--device", "cpu",
            "--out", str(run)] + [a for k, v in _OV.items() for a in ("--set", f"{k}={v}")]
    rc = kill_at(argv, "checkpoint:3", tmp_path)  # step 3's files written, not yet renamed
    assert rc == -signal.SIGKILL
    partial = list((run / "checkpoints").glob(".step_000003.partial-*"))
    assert len(partial) == 1 and (partial[0] / "model.safetensors").is_file()
    assert [s for s, _ in list_checkpoints(run)] == [0, 1]  # the half-built one does not count
    dead = read_lock_holder(run)
    assert dead is not None and dead.is_alive() is False  # the killed writer's record stays
    with caplog.at_level(logging.WARNING, logger="tangentlab.runs"):
        assert main(argv + ["--resume"]) == 0
    assert any(f"pid {dead.pid}" in r.getMessage() for r in caplog.records)  # takeover logged
    assert not list((run / "checkpoints").glob(".*"))  # the partial was cleared
    assert [s for s, _ in list_checkpoints(run)] == [0, 1, 3, 12]
    assert _same_weights(_final_weights(uninterrupted), _final_weights(run))
    assert (run / "inloop.csv").read_text() == (uninterrupted / "inloop.csv").read_text()
    assert json.loads((run / "manifest.json").read_text())["resumed_from"] == 1


def test_late_checkpoints_densify_the_second_half():
    base = checkpoint_schedule(1000, 12)
    dense = checkpoint_schedule(1000, 12, late=6)
    assert set(base) <= set(dense) and dense[0] == 0 and dense[-1] == 1000
    late_base = [s for s in base if s >= 500]
    late_dense = [s for s in dense if s >= 500]
    assert len(late_dense) >= len(late_base) + 4
    assert PRESETS["small"].steps >= 800 and PRESETS["small"].late_checkpoints > 0


def _losses(run):
    lines = (run / "train_log.csv").read_text().splitlines()[1:]
    return [float(x.split(",")[1]) for x in lines]


def test_bf16_autocast_trains_in_low_precision_with_float32_weights(tmp_path):
    """--autocast bf16 on the CPU: the forward really runs in bfloat16 (losses differ from the
    float32 run's, by little), the saved weights stay float32, the manifest records it."""
    ov = {"steps": 3, "n_checkpoints": 2, "max_docs": 6, "measure_every": 0}
    ref = train_model("decoder", tmp_path / "fp32", preset="tiny", device="cpu", overrides=ov)
    low = train_model("decoder", tmp_path / "bf16", preset="tiny", device="cpu", overrides=ov,
                      autocast="bf16")
    a, b = _losses(ref), _losses(low)
    assert len(a) == len(b) == 3
    assert a != b  # autocast was active
    assert all(abs(x - y) <= 0.02 * abs(x) for x, y in zip(a, b, strict=True))
    w = load_file(str(low / "checkpoints/step_000003/model.safetensors"))
    assert {t.dtype for t in w.values()} == {torch.float32}
    assert json.loads((low / "manifest.json").read_text())["autocast"] == "bf16"
    assert json.loads((ref / "manifest.json").read_text())["autocast"] is None


def test_fp16_autocast_on_the_cpu_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="fp16 needs a GPU"):
        train_model("decoder", tmp_path / "x", preset="tiny", device="cpu", autocast="fp16")
    assert not (tmp_path / "x").exists()  # nothing half-written
    with pytest.raises(ConfigError, match="autocast must be one of"):
        train_model("decoder", tmp_path / "y", preset="tiny", device="cpu", autocast="int8")


# ----------------------------------------------------------------------- refused before training


@pytest.mark.parametrize(("override", "says"), [
    ("measure_rank=1000", "measure_rank"),
    ("measure_site=blocks.9.resid_post", "block index out of range"),
    ("measure_site=no_such_site", "unknown site"),
])
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_a_bad_inloop_site_or_rank_is_refused_before_anything_is_written(
        tmp_path, capsys, arch, override, says):
    from tangentlab.cli import main

    out = tmp_path / "run"
    argv = ["empirical", "train", "--arch", arch, "--preset", "tiny", "--device", "cpu",
            "--out", str(out), "--set", override]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert list(tmp_path.iterdir()) == []  # no half-trained folder that a rerun would refuse


def test_the_largest_inloop_rank_the_controls_allow_is_accepted():
    from tangentlab.empirical.training.train import check_inloop, resolve_train_config

    cfg = resolve_train_config("decoder", "tiny")
    check_inloop(resolve_train_config("decoder", "tiny", overrides={
        "measure_rank": cfg.d_model // 2, "measure_site": "blocks.-1.resid_mid"}))
    with pytest.raises(ConfigError, match="2 \\* measure_rank <= d_model"):
        check_inloop(resolve_train_config("decoder", "tiny",
                                          overrides={"measure_rank": cfg.d_model // 2 + 1}))


def _damaged_copy(run, tmp_path, damage):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    damage(copy)
    return copy


def _state(run):
    return run / "checkpoints" / "step_000012" / "train_state.json"


@pytest.mark.parametrize(("damage", "says"), [
    (lambda r: _state(r).write_text("[]"), "train_state.json' must hold an object"),
    (lambda r: _state(r).write_text('{"step": 12, "tokens_seen": [3]}'),
     "field 'tokens_seen' must be a whole number"),
    (lambda r: (r / "train_log.csv").write_text("step,loss,lr,tokens_seen\n1,abc\n"),
     "train_log.csv' line 2 is not"),
], ids=["train_state=[]", "tokens_seen=[3]", "train_log malformed"])
def test_resuming_from_damaged_run_files_is_a_checkpoint_error_naming_the_file(
        tmp_path, uninterrupted, damage, says):
    run = _damaged_copy(uninterrupted, tmp_path, damage)
    with pytest.raises(CheckpointError, match=says.replace("[", "\\[")):
        train_model("decoder", run, preset="tiny", device="cpu", overrides=_OV, resume=True)

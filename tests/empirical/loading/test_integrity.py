"""Trajectory integrity (issue 18, item 4): weight hashes, duplicates, out-of-order weights and
step labels, on a local Hub suite built with ``save_pretrained`` (offline, no mock)."""

from __future__ import annotations

import json

import pytest

from tangentlab.empirical.loading.checkpoints import Checkpoint
from tangentlab.empirical.loading.integrity import (
    check_trajectory,
    console_lines,
    hash_checkpoint,
    integrity_rows,
)
from tangentlab.empirical.loading.trajectory import resolve_trajectory
from tangentlab.empirical.measurement.records import RowBase
from tangentlab.errors import CheckpointError, ConfigError
from tests.empirical.families import tiny_model, write_hub_revision

#: step1 holds step0's weights; step2 is a branch that serves late weights (t = 0.9)
SUITE = {"step0": 0.0, "step1": 0.0, "step2": 0.9, "step4": 0.25, "step8": 0.5, "step16": 1.0}


def _interpolated(t, tok=None):
    """A gpt2 whose weights are (1 − t) · init + t · final (a straight-line 'training')."""
    import torch

    a, b = tiny_model("gpt2", seed=0), tiny_model("gpt2", seed=1)
    with torch.no_grad():
        for pa, pb in zip(a.parameters(), b.parameters()):
            pa.mul_(1 - t).add_(pb, alpha=t)

    def save(d):
        a.save_pretrained(d)
        if tok is not None:
            tok.save_pretrained(d)
    return save


@pytest.fixture()
def suite(tmp_path, monkeypatch):
    """HF_HOME holding ``tiny/suite`` (:data:`SUITE`, each with a tokenizer) and an eval text."""
    import pandas as pd

    from tangentlab.empirical.loading.tokenizer import train_tokenizer

    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    words = ("the river runs to the sea and the valley holds the light of morning while "
             "birds sing over fields of grain").split()
    docs = [" ".join(words[(i * 7 + j) % len(words)] for j in range(60)) for i in range(80)]
    corpus = tmp_path / "eval.parquet"
    pd.DataFrame({"text": docs}).to_parquet(corpus)
    tok = train_tokenizer(docs, vocab_size=320)
    for rev, t in SUITE.items():
        write_hub_revision(tmp_path / "home" / "hub", "tiny/suite", rev, _interpolated(t, tok))
    return corpus


def test_hash_is_of_the_weights_not_the_files(tmp_path):
    import torch

    _interpolated(0.3)(tmp_path / "a")
    _interpolated(0.3)(tmp_path / "b")
    _interpolated(0.3001)(tmp_path / "c")
    ha, hb, hc = (hash_checkpoint(tmp_path / x) for x in "abc")
    assert ha.sha256 == hb.sha256 != hc.sha256
    assert ha.n_tensors > 5 and ha.n_bytes > 1000 and ha.sketch.size > 100
    # the same weights stored as .bin give the same digest
    m = tiny_model("gpt2", seed=0)
    m.save_pretrained(tmp_path / "st")
    (tmp_path / "bin").mkdir()
    torch.save({k: v.contiguous() for k, v in m.state_dict().items()
                if k != "lm_head.weight"}, tmp_path / "bin" / "pytorch_model.bin")
    assert hash_checkpoint(tmp_path / "st").sha256 == hash_checkpoint(tmp_path / "bin").sha256


def test_suite_with_a_duplicate_and_an_early_late_branch_is_flagged(suite):
    traj = resolve_trajectory("tiny/suite", revisions="all")
    assert [c.name for c in traj.checkpoints] == ["step0", "step1", "step2", "step4", "step8",
                                                  "step16"]
    rep = check_trajectory(traj.checkpoints)  # warn: every checkpoint kept
    assert len(rep.kept) == 6 and not rep.skipped
    kinds = {w["kind"]: w for w in rep.warnings}
    assert set(kinds) == {"duplicate", "out_of_order"}
    assert kinds["duplicate"]["checkpoints"] == ["step0", "step1"]
    assert kinds["out_of_order"]["checkpoints"] == ["step2"]  # and no ordinary checkpoint
    recs = {r["checkpoint"]: r for r in rep.checkpoints}
    assert recs["step0"]["weights_sha256"] == recs["step1"]["weights_sha256"]
    assert len({r["weights_sha256"] for r in rep.checkpoints}) == 5
    json.dumps(rep.manifest())
    skip = check_trajectory(traj.checkpoints, on_duplicate="skip")
    assert [c.name for c in skip.kept] == ["step0", "step4", "step8", "step16"]
    assert skip.skipped == ["step1", "step2"]
    with pytest.raises(CheckpointError, match="step1.*identical.*step2.*out of step order"):
        check_trajectory(traj.checkpoints, on_duplicate="error")
    with pytest.raises(ConfigError, match="on_duplicate"):
        check_trajectory(traj.checkpoints, on_duplicate="ignore")
    rows = integrity_rows(rep, RowBase(model="tiny/suite"))
    assert rows[0]["metric"] == "checkpoint_integrity_warnings" and rows[0]["value"] == 2
    assert {r["kind"] for r in rows[1:]} == {"duplicate", "out_of_order"}
    # a clean trajectory: no warning
    clean = [c for c in traj.checkpoints if c.name not in ("step1", "step2")]
    assert check_trajectory(clean).warnings == []


def test_final_weights_served_early_and_bad_step_labels(tmp_path):
    for name, t in (("step_0", 0.0), ("step_1", 1.0), ("step_2", 0.5), ("step_3", 1.0)):
        _interpolated(t)(tmp_path / name)
    cks = [Checkpoint(path=tmp_path / f"step_{i}", name=f"step_{i}", step=i) for i in range(4)]
    kinds = {w["kind"]: w["checkpoints"] for w in check_trajectory(cks).warnings}
    assert kinds == {"duplicate": ["step_1", "step_3"], "out_of_order": ["step_1"]}
    relabelled = [Checkpoint(path=c.path, name=c.name, step=s)
                  for c, s in zip(cks[:1] + cks[2:3], (0, 5))]
    got = check_trajectory(relabelled).warnings
    assert [w["kind"] for w in got] == ["step_label"] and "step_2=5" in got[0]["message"]


def test_skip_drops_exactly_the_later_copy_of_a_repeated_weight_set(tmp_path):
    """Steps 0, 3 and 5 where 5 repeats 0's weights: skip drops step 5 alone (issue 32: step 3,
    a good checkpoint, was dropped as out of order against the copy of step 0)."""
    for name, t in (("step_0", 0.0), ("step_3", 0.5), ("step_5", 0.0)):
        _interpolated(t)(tmp_path / name)
    cks = [Checkpoint(path=tmp_path / f"step_{i}", name=f"step_{i}", step=i) for i in (0, 3, 5)]
    warn = check_trajectory(cks)
    assert [(w["kind"], w["checkpoints"]) for w in warn.warnings] == [
        ("duplicate", ["step_0", "step_5"])]
    lines = console_lines(warn)  # warn prints one line per finding and keeps everything
    assert len(lines) == 1 and "step_0, step_5" in lines[0] and "every checkpoint" in lines[0]
    skip = check_trajectory(cks, on_duplicate="skip")
    assert [c.name for c in skip.kept] == ["step_0", "step_3"] and skip.skipped == ["step_5"]
    said = console_lines(skip)
    assert any("dropped step_5" in s and "step_3@3" in s for s in said)
    assert console_lines(check_trajectory(cks[:2])) == []  # a clean trajectory prints nothing


@pytest.mark.slow
def test_measure_records_integrity_and_the_cli_flag_decides(suite, tmp_path, capsys, monkeypatch):
    import pandas as pd

    monkeypatch.delenv("TANGENTLAB_QUIET", raising=False)  # the integrity lines are status lines

    from tangentlab.cli import main

    sets = ["n_batches=4", "batch_size=2", "seq_len=16", "sample_rows=64", "n_boot=10",
            "n_controls=5", "causal=false", "rank=2", "refit=false"]

    def argv(out, *extra):
        return ["empirical", "measure", "--model", "tiny/suite", "--revisions", "all", "--out",
                str(out), "--device", "cpu", "--eval-text", f"parquet:{suite}", *extra] + \
            [x for s in sets for x in ("--set", s)]

    out = tmp_path / "skip"  # one measure run: the findings recorded, the flagged ones skipped
    assert main(argv(out, "--on-duplicate", "skip")) == 0
    assert "--on-duplicate skip dropped step1, step2" in capsys.readouterr().err  # said, not silent
    man = json.loads((out / "manifest.json").read_text())
    assert [w["kind"] for w in man["integrity"]["warnings"]] == ["duplicate", "out_of_order"]
    assert man["integrity"]["skipped"] == ["step1", "step2"]
    assert all(len(c["weights_sha256"]) == 64 for c in man["integrity"]["checkpoints"])
    assert [c["checkpoint"] for c in man["checkpoints"]] == ["step0", "step4", "step8", "step16"]
    res = pd.read_csv(out / "results.csv")
    assert res[res.metric == "checkpoint_integrity_warnings"].value.tolist() == [2]
    flagged = res[res.metric == "checkpoint_integrity_warning"]
    assert set(flagged.checkpoint) == {"step0", "step2"} and flagged.skipped.all()
    assert sorted(set(res[res.metric == "enrichment"].step.dropna().astype(int))) == [0, 4, 8, 16]
    capsys.readouterr()
    out = tmp_path / "error"
    assert main(argv(out, "--on-duplicate", "error")) == 2
    err = capsys.readouterr().err.strip()
    assert "identical" in err and len(err.splitlines()) == 1 and not out.exists()


def test_corrupt_weights_are_a_typed_error(tmp_path):
    _interpolated(0.0)(tmp_path / "a")
    (tmp_path / "a" / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        hash_checkpoint(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "pytorch_model.bin").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        hash_checkpoint(tmp_path / "b")

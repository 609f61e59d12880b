"""The reproduce stage ``bridge/<arch>``: three checkpoints measured again on a text with enough
documents for the closed forms' per-token fits, with the training split's frequency table."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest

from tangentlab.empirical.bridge.text_stage import TEXT_MEASURE, run_text_bridge, text_stage


def test_a_default_reproduce_has_one_bridge_stage_per_arch_and_quick_has_none():
    from tangentlab.pipeline.reproduce import DEFAULT, QUICK, producers, resolve_config

    rows = {p.name: p for p in producers(DEFAULT)}
    for arch in DEFAULT.archs:
        p = rows[text_stage(arch)]
        assert p.depends == (f"train/{arch}",)
        assert p.inputs == {"trajectory": f"train/{arch}/checkpoints",
                            "frequency_table": f"train/{arch}/frequency.csv"}
        assert p.params["text"] == "bible" and p.params["measure"] == TEXT_MEASURE
    assert not [n for n in map(lambda p: p.name, producers(QUICK)) if n.startswith("bridge/")]
    for ov in (["bridge_text="], ["corpus=bible"]):  # off; or the training text itself
        off = resolve_config(overrides=ov)
        assert not [p.name for p in producers(off) if p.name.startswith("bridge/")]
    # the prediction rows never read it: their units are the measure stages
    from tangentlab.report.verdicts import _measure_stages

    assert _measure_stages(list(rows)) == ["measure/encoder", "measure/decoder"]


def test_a_bridge_text_that_cannot_be_read_is_refused_before_anything_runs(tmp_path):
    from tangentlab.cli import main
    from tangentlab.errors import ConfigError
    from tangentlab.pipeline.reproduce import check_bridge_text, resolve_config

    with pytest.raises(ConfigError, match="'bridge_text' .*biblee.* leaves the bridge-text"):
        check_bridge_text(resolve_config(overrides=["bridge_text=biblee"]))
    check_bridge_text(resolve_config(overrides=["bridge_text=bible"]))  # readable: no error
    assert main(["reproduce", "--out", str(tmp_path / "run"), "--set", "bridge_text=biblee"]) == 2
    assert not (tmp_path / "run").exists()


def test_the_report_labels_its_rows_as_the_bridge_texts():
    from tangentlab.report import theory_numbers as TN

    row = {"model": "m", "site": "blocks.0.resid_post", "phase": "last", "step": "8",
           "quantity": "attenuation_raw", "bucket": "all", "role": "comparison",
           "measured": "0.9", "status": "agree"}
    done = SimpleNamespace(done=True, bridge=(row,), not_run=None)
    lines, _ = TN.read_lines({"measure/decoder": SimpleNamespace(done=True, bridge=None,
                                                                 not_run=None),
                              "bridge/decoder": done}, ["measure/decoder", "bridge/decoder"])
    assert [ln.source for ln in lines] == ["decoder (bridge text)"]


@pytest.mark.slow
def test_the_stage_measures_three_spread_checkpoints_with_the_training_frequencies(tiny_runs,
                                                                                  tmp_path):
    from tangentlab.pipeline.producers import check_output
    from tangentlab.pipeline.reproduce import DEFAULT, producers

    run = tiny_runs["decoder"]
    small = dict(TEXT_MEASURE, n_batches=8, batch_size=4, sample_rows=256, n_boot=20,
                 n_controls=5, control_pool=20, bridge_boot=20, bridge_tokens=20)
    out = run_text_bridge(tmp_path / "bridge" / "decoder", run / "checkpoints",
                          run / "frequency.csv", measure=small)
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["eval_text"] == "bible" and m["config"]["eval_fraction"] == 0.3
    assert m["config"]["frequency_table"] == str(run / "frequency.csv")
    steps = [c["step"] for c in m["checkpoints"]]
    trained = sorted(int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*"))
    assert len(steps) == 3 and steps[0] == trained[0] and steps[-1] == trained[-1]
    assert "frequency.csv" in json.dumps(m["frequency_source"])
    with open(out / "bridge.csv", newline="") as fh:
        phases = {r["phase"] for r in csv.DictReader(fh)}
    assert phases == {"step0", "peak", "last"}
    with open(out / "results.csv", newline="") as fh:
        metrics = {r["metric"] for r in csv.DictReader(fh)}
    assert not [x for x in metrics if x.startswith(("ablation", "learning"))]  # both off
    # the reproduce stage's own output check accepts what the stage wrote
    check_output(next(p for p in producers(DEFAULT) if p.name == "bridge/decoder"), out)

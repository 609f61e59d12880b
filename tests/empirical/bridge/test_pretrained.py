"""The optional SmolLM2 stage: built only when named, 'not run (extra not installed)' without it."""

from __future__ import annotations

import json

from tangentlab.empirical.bridge import pretrained as BP


def test_stage_is_built_only_when_the_model_is_named(monkeypatch):
    from tangentlab.pipeline.reproduce import build_stages, resolve_config

    cfg = resolve_config(quick=True, overrides=["synthetic=visibility", "archs=decoder"])
    monkeypatch.delenv(BP.ENV_VAR, raising=False)
    assert "pretrained/smollm2" not in [s.name for s in build_stages(cfg)]
    monkeypatch.setenv(BP.ENV_VAR, "smollm2.gguf")
    names = [s.name for s in build_stages(cfg)]
    assert names[-2:] == ["pretrained/smollm2", "report"]
    st = {s.name: s for s in build_stages(cfg)}["pretrained/smollm2"]
    assert st.params["model_path"] == "smollm2.gguf" and st.depends == ()
    import pickle

    pickle.dumps(st.func)  # --jobs runs stages in spawned workers


def test_without_the_extra_it_is_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(BP, "extra_missing", lambda: "gguf")
    out = BP.run_pretrained(tmp_path / "out", str(tmp_path / "missing.gguf"))
    rec = json.loads((out / BP.NOT_RUN_NAME).read_text())
    assert rec["reason"].startswith("not run (extra not installed: gguf")
    BP.check_pretrained(out)  # a not-run record is a valid output
    from tangentlab.pipeline.producers import check_output
    from tangentlab.pipeline.reproduce import producers, resolve_config

    monkeypatch.setenv(BP.ENV_VAR, "smollm2.gguf")
    row = {p.name: p for p in producers(resolve_config(quick=True))}[BP.STAGE]
    check_output(row, out)  # and the stage's own output check accepts it


def test_a_missing_file_is_not_run_and_the_report_says_why(tmp_path, monkeypatch):
    from tangentlab.report import theory_numbers as TN
    from tangentlab.report.load import RunData
    from tests.report.fixtures import measure_rows, write_run

    monkeypatch.setattr(BP, "extra_missing", lambda: "")
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    data = RunData.open(run)
    assert TN.NO_PRETRAINED in TN.read_lines(data)[1]
    BP.run_pretrained(run / "pretrained" / "smollm2", str(tmp_path / "nothing.gguf"))
    from dataclasses import replace

    done = replace(data.records["measure/decoder"], outputs=("pretrained/smollm2",))
    data = RunData(run_dir=run, manifest=data.manifest,  # read on construction, with the record
                   records={**data.records, "pretrained/smollm2": done})
    missing = TN.read_lines(data)[1]
    assert any(m.startswith("smollm2 (pretrained): not run (no model at") for m in missing)
    assert TN.NO_PRETRAINED not in missing

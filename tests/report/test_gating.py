"""Gating: a prediction reads supported / not supported only where it was validated end to end."""

from __future__ import annotations

import json

import pytest

from tangentlab.claims import rules as R
from tangentlab.errors import DataError
from tangentlab.report.gating import GATED_TEXT, read_end_to_end, status_text
from tangentlab.report.load import END_TO_END_DIR, RunData
from tangentlab.report.verdicts import build_verdicts
from tests.report.fixtures import measure_rows, write_end_to_end_run, write_run

#: what a default-like measurement records (64 batches of 4 x 128 tokens, 1000 replicates, r/d 1/8)
_MEASURED = {"n_batches": 64, "batch_size": 4, "seq_len": 128, "n_boot": 1000, "rank": 8,
             "n_controls": 20, "early_fraction": 0.3}
#: the end-to-end setting that matches it (the fixture's checkpoint schedule)
_MATCHING = {"n_batches": 64, "tokens_per_checkpoint": 64 * 4 * 128, "n_boot": 1000}


def _run(tmp_path, **kw):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")}, **kw)
    path = run / "measure" / "decoder" / "manifest.json"
    m = json.loads(path.read_text())
    m.update(config=_MEASURED, hidden_size=64, eval_tokens_per_checkpoint=64 * 4 * 128)
    path.write_text(json.dumps(m))
    return run


def _by(run, **kw):
    return {v.key: v for v in build_verdicts(RunData.open(run, **kw))}


def _e2e(run, *, setting=None, **kw):
    return write_end_to_end_run(run / END_TO_END_DIR, setting={**_MATCHING, **(setting or {})},
                                **kw)


def test_a_validated_row_keeps_its_verdict(tmp_path):
    run = _run(tmp_path, validated=False)
    _e2e(run)
    v = _by(run)["enrichment"]
    assert v.status == R.SUPPORTED and not v.gated and status_text(v) == R.SUPPORTED
    _e2e(run, setting={"n_boot": 500, "units": 1})  # fewer replicates validated: covered
    assert not _by(run)["enrichment"].gated


def test_no_end_to_end_run_gates_every_decided_prediction_and_keeps_the_raw_verdict(tmp_path):
    by = _by(_run(tmp_path, validated=False))
    v = by["enrichment"]
    assert v.status == R.INCONCLUSIVE and v.raw_status == R.SUPPORTED
    assert status_text(v) == GATED_TEXT
    assert "no end-to-end validation run" in v.gated
    assert "raw: supported;" in v.reason and v.units[0].status == R.SUPPORTED  # nothing hidden
    decided = [v for v in by.values() if v.section == "prediction" and v.raw_status]
    assert decided and all(v.status == R.INCONCLUSIVE for v in decided)
    assert all(not v.gated for v in by.values() if v.section != "prediction")


@pytest.mark.parametrize("setting, words", [
    ({"n_batches": 16}, "eval batches: validated at 16, the run has 64"),
    # issue 35: both ways: more data than the run's does not cover it either
    ({"n_batches": 256}, "eval batches: validated at 256, the run has 64"),
    ({"tokens_per_checkpoint": 4096}, "eval tokens per checkpoint: validated at 4096, the run has 32768"),
    ({"tokens_per_checkpoint": 10**6}, "eval tokens per checkpoint: validated at 1e+06"),
    ({"n_boot": 2000}, "bootstrap replicates: validated at 2000, the run has 1000"),
    ({"units": 2}, "units: validated at 2, the row has 1"),
    ({"steps": [0, 30, 100]}, "checkpoint schedule: validated at steps 0, 30, 100 (3 checkpoints), "
                              "the run measured 0, 10, 100 (3 checkpoints)"),
    ({"steps": []}, "the end-to-end run recorded no checkpoint schedule"),
    ({"early_fraction": 0.5}, "early/late cut: validated at 0.5 of the last step, the run's 0.3"),
    ({"rank_over_dim": [0.25, 0.5]}, "r/d 1/8 (measure/decoder) outside the measured 1/4"),
    ({"scenarios": ["no-effect"]}, "null(s) not run"),
])
def test_an_end_to_end_run_that_differs_from_the_run_gates(tmp_path, setting, words):
    run = _run(tmp_path, validated=False)
    _e2e(run, setting=setting)
    v = _by(run)["enrichment"]
    assert v.status == R.INCONCLUSIVE and words in v.gated, v.gated


def test_failed_checks_and_point_rates_only_gate(tmp_path):
    run = _run(tmp_path, validated=False)
    _e2e(run, passed=False)
    assert "checks failed: no-effect wrong supported" in _by(run)["enrichment"].gated
    _e2e(run, sims=4)
    assert "point rates only (4 simulation(s)" in _by(run)["enrichment"].gated
    _e2e(run, rows=["weakens-late"])
    assert _by(run)["enrichment"].gated == "the end-to-end run has no check of this row"


def test_a_simulation_that_raised_gates_every_row(tmp_path):
    """Every row's own checks pass, but one simulation raised: nothing is certified."""
    run = _run(tmp_path, validated=False)
    path = _e2e(run)
    checks = json.loads((path / "checks.json").read_text())
    checks.append({"name": "simulations: every one ran", "row": "", "null": "", "metric": "errors",
                   "passed": False, "measured": 1.0, "ci_low": None, "ci_high": None,
                   "bound_checked": True, "n": 750, "target": "", "detail": ""})
    (path / "checks.json").write_text(json.dumps(checks))
    v = _by(run)["enrichment"]
    assert v.status == R.INCONCLUSIVE and "a simulation raised" in v.gated, v.gated


def test_a_raw_inconclusive_row_is_left_as_it_is(tmp_path):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder", enrich_last=1.0)},
                    validated=False)
    v = _by(run)["enrichment"]
    assert v.status != R.SUPPORTED and not v.gated


def test_validation_dir_replaces_the_runs_own(tmp_path):
    run = _run(tmp_path, validated=False)
    _e2e(run, passed=False)
    good = write_end_to_end_run(tmp_path / "full", setting=_MATCHING)
    assert _by(run)["enrichment"].gated
    assert _by(run, validation=good)["enrichment"].status == R.SUPPORTED


def test_a_directory_that_is_not_an_end_to_end_run_is_a_typed_error(tmp_path, capsys):
    from tangentlab.cli import main

    run = _run(tmp_path)
    with pytest.raises(DataError, match="not a directory"):
        RunData.open(run, validation=tmp_path / "nowhere")
    with pytest.raises(DataError, match="holds a 'reproduce' run, not an end-to-end"):
        RunData.open(run, validation=run)
    bad = write_end_to_end_run(tmp_path / "bad")
    (bad / "checks.json").write_text(json.dumps([{"row": "enrichment"}]))
    with pytest.raises(DataError, match="no field 'passed'"):
        read_end_to_end(bad)
    assert main(["report", str(run), "--validation", str(run / "measure" / "decoder")]) == 2
    assert "validate --end-to-end" in capsys.readouterr().err


def test_a_runs_data_built_in_code_keeps_the_raw_verdicts(tmp_path):
    """The end-to-end battery decides through a RunData it builds itself: never gated."""
    run = _run(tmp_path, validated=False)
    opened = RunData.open(run)
    data = RunData(run_dir=run, manifest=opened.manifest, records=opened.records)
    assert {v.key: v for v in build_verdicts(data)}["enrichment"].status == R.SUPPORTED


def test_page_and_summary_show_the_gated_rows(tmp_path, capsys):
    from tangentlab.cli import main
    from tangentlab.report.html_page import render_html
    from tangentlab.report.md_page import render_markdown
    from tangentlab.report.page import build

    run = _run(tmp_path, validated=False)
    _e2e(run, setting={"name": "standard", "n_batches": 16})
    data = RunData.open(run)
    page = build(data, build_verdicts(data))
    md, html = render_markdown(page, {}), render_html(page, {})
    for page in (md, html):
        assert "Validated end to end" in page and GATED_TEXT in page
        assert "eval batches: validated at 16, the run has 64" in page
        assert "standard: 50 sims" in page
    assert "| **inconclusive (not validated)** (raw: supported) |" in md
    assert main(["summary", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"enrichment: {GATED_TEXT}  [raw: supported; gated: setting differs" in out


def test_external_runs_are_gated_on_their_own_settings_and_the_limitations_say_why(tmp_path):
    from tangentlab.report.page import build
    from tests.report.fixtures import write_measure_dir

    run = _run(tmp_path, validated=False)
    ext = write_measure_dir(tmp_path / "suite", measure_rows("decoder"))
    data = RunData.open(run, measures={"suite": ext})
    v = {v.key: v for v in build_verdicts(data)}["enrichment"]
    assert v.external_status == R.INCONCLUSIVE and "raw: supported" in v.external_reason
    lim = " ".join(build(data, build_verdicts(data)).limitations)
    assert "reads inconclusive (not validated): its rules said supported" in lim


def test_every_measurement_of_a_row_must_match_and_unrecorded_settings_gate(tmp_path):
    from tangentlab.report.gating import RunSetting, weaker

    nan = float("nan")
    steps = (0.0, 10.0, 100.0)
    setting = {"n_batches": 64, "tokens_per_checkpoint": 1, "n_boot": 1, "units": 2,
               "rank_over_dim": [0.01, 0.5], "steps": [0, 10, 100], "early_fraction": 0.3}
    runs = [RunSetting("measure/a", nan, nan, nan, nan),
            RunSetting("measure/b", 64, 1, 1, 0.25, steps, 0.3, "decoder"),
            RunSetting("measure/c", 16, 1, 1, 0.25, steps, 0.3, "decoder")]
    assert weaker(setting, runs[1:], 2) == ["eval batches: validated at 64, the run has 16 (measure/c)"]
    assert weaker(setting, runs[1:2], 2) == []
    # a setting nobody recorded cannot be shown to be covered
    assert weaker(setting, runs[:1], 2) == [
        *(f"the run's {w} not recorded (measure/a)" for w in
          ("eval batches", "eval tokens per checkpoint", "bootstrap replicates")),
        "architecture: validated on decoder twins, the run has an unrecorded one (measure/a)",
        "the run's checkpoint schedule not recorded (measure/a)",
        "the run's r/d not recorded (measure/a)"]


def test_an_encoder_is_covered_only_by_a_setting_that_planted_masked_lm_twins():
    """Issue 35: the encoder's masked-LM path must be exercised by the twin that certifies it. A
    setting without ``archs`` (written before the planted masked-LM head) planted causal LMs."""
    from tangentlab.report.gating import RunSetting, weaker

    steps = (0.0, 10.0, 100.0)
    old = {"n_batches": 64, "tokens_per_checkpoint": 1, "n_boot": 1, "units": 2,
           "rank_over_dim": [0.01, 0.5], "steps": [0, 10, 100], "early_fraction": 0.3}
    enc = RunSetting("measure/encoder", 64, 1, 1, 0.25, steps, 0.3, "encoder")
    dec = RunSetting("measure/decoder", 64, 1, 1, 0.25, steps, 0.3, "decoder")
    miss = ["architecture: validated on decoder twins, the run has encoder (measure/encoder)"]
    assert weaker(old, [dec, enc], 2) == miss
    assert weaker({**old, "archs": ["decoder"]}, [dec, enc], 2) == miss
    assert weaker({**old, "archs": ["decoder", "encoder"]}, [dec, enc], 2) == []
    assert weaker({**old, "archs": ["encoder"]}, [dec], 2) == [
        "architecture: validated on encoder twins, the run has decoder (measure/decoder)"]


def test_a_twin_covers_a_row_only_with_as_many_units_of_each_architecture():
    """A row errs only when every unit errs, so more units are fine, but per architecture: a
    run of four decoder sites is not covered by a twin of two decoder and two masked-LM units,
    although its four units equal the twin's four (the masked-LM units' error rates are not
    a causal LM's). The twin's setting records ``units_per_arch``; older settings did not."""
    from tangentlab.report.gating import RunSetting, weaker

    steps = (0.0, 10.0, 100.0)
    twin = {"n_batches": 64, "tokens_per_checkpoint": 1, "n_boot": 1, "units": 4,
            "rank_over_dim": [0.01, 0.5], "steps": [0, 10, 100], "early_fraction": 0.3,
            "archs": ["decoder", "encoder"], "units_per_arch": {"decoder": 2, "encoder": 2}}
    dec4 = RunSetting("measure/decoder", 64, 1, 1, 0.25, steps, 0.3, "decoder", 4)
    enc2 = RunSetting("measure/encoder", 64, 1, 1, 0.25, steps, 0.3, "encoder", 2)
    assert weaker(twin, [dec4], 4) == ["units: validated at 2 encoder unit(s), the run has 0"]
    assert weaker(twin, [dec4, enc2], 6) == []
    enc1 = RunSetting("measure/encoder", 64, 1, 1, 0.25, steps, 0.3, "encoder", 1)
    assert weaker(twin, [dec4, enc1], 5) == ["units: validated at 2 encoder unit(s), the run has 1"]
    old = {k: v for k, v in twin.items() if k != "units_per_arch"}
    assert weaker(old, [dec4], 4) == []  # not recorded: only the total and the heads are read


def test_a_twin_setting_records_its_units_per_architecture(tmp_path):
    from tangentlab.validate.twin import twin_setting
    from tests.validate.test_twin import write_measure

    write_measure(tmp_path / "measure" / "decoder", sites=("blocks.0.resid_post",
                                                           "blocks.1.resid_post",
                                                           "blocks.3.resid_post"))
    write_measure(tmp_path / "measure" / "encoder", arch="encoder")
    assert twin_setting(tmp_path).setting()["units_per_arch"] == {"decoder": 3, "encoder": 2}


def test_every_prediction_row_is_planted_or_says_why_not(tmp_path):
    """Issue 33/34: a prediction row left out of the battery read "inconclusive (not validated)"
    forever and no test noticed (Delta IsoScore*). Each is now a battery row or states why not,
    and the gate gives that reason."""
    from tangentlab.report.gating import NOT_VALIDATED, gate_reason
    from tangentlab.report.verdicts import ROWS
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    predictions = {r.key for r in ROWS if r.section == "prediction"}
    assert predictions == set(PREDICTION_ROWS) | set(NOT_VALIDATED)
    assert not set(PREDICTION_ROWS) & set(NOT_VALIDATED)
    e2e = read_end_to_end(write_end_to_end_run(tmp_path / "e2e", rows=list(PREDICTION_ROWS)))
    assert gate_reason(e2e, "isoscore", [], 1) == NOT_VALIDATED["isoscore"]


def _certificate(tmp_path, name="cert.json", *, passed=True, setting=None, stale=None):
    """A certificate file made from a hand-made end-to-end run at the fixture run's setting."""
    from tangentlab.claims.certificates import CERTIFICATE_KIND
    from tangentlab.claims.fingerprints import verdict_path_fingerprints

    e2e = write_end_to_end_run(tmp_path / ("e2e-" + name), passed=passed,
                               setting={**_MATCHING, **(setting or {})})
    fingerprints = verdict_path_fingerprints()
    if stale is not None:
        fingerprints[stale] = "0" * 16  # the module changed after the certificate was written
    manifest = json.loads((e2e / "manifest.json").read_text())
    cert = {"kind": CERTIFICATE_KIND, "created": "2026-12-01T10:00:00+00:00", "commit": "ab" * 20,
            "setting": manifest["setting"], "checks": json.loads((e2e / "checks.json").read_text()),
            "rows": {}, "fingerprints": fingerprints}
    path = tmp_path / name
    path.write_text(json.dumps(cert))
    return path


def test_a_certificate_at_the_runs_setting_decides_a_row_and_is_named(tmp_path):
    from tangentlab.report.md_page import render_markdown
    from tangentlab.report.page import build

    run = _run(tmp_path, validated=False)  # no end-to-end run of its own
    cert = _certificate(tmp_path)
    data = RunData.open(run, certificates=[cert])
    v = {v.key: v for v in build_verdicts(data)}["enrichment"]
    assert v.status == R.SUPPORTED and not v.gated
    assert v.certified == ("certificate cert.json (commit abababababab, 2026-12-01, 50 "
                           "simulations per null)")
    assert v.reason.startswith("validated by certificate cert.json")
    md = render_markdown(build(data, build_verdicts(data)), {})
    assert "yes (certificate cert.json" in md and "validated end to end at this run's setting " \
        "by certificate cert.json" in md
    # without it the same row is gated: the certificate, not something else, decided it
    assert _by(run, certificates=[])["enrichment"].status == R.INCONCLUSIVE


@pytest.mark.parametrize(("kw", "words"), [
    ({"stale": "tangentlab.measure.batch_test"},
     "certificate stale: tangentlab.measure.batch_test changed"),
    ({"passed": False}, "checks failed: no-effect wrong supported"),
    ({"setting": {"n_batches": 16}}, "setting differs: eval batches: validated at 16"),
])
def test_a_stale_failed_or_other_setting_certificate_decides_nothing_and_says_why(tmp_path, kw,
                                                                                  words):
    run = _run(tmp_path, validated=False)
    cert = _certificate(tmp_path, **kw)
    v = _by(run, certificates=[cert])["enrichment"]
    assert v.status == R.INCONCLUSIVE and v.raw_status == R.SUPPORTED and not v.certified
    assert "no end-to-end validation run" in v.gated  # the run's own reason is kept ...
    assert f"certificate cert.json (commit abababababab, 2026-12-01, 50 simulations per " \
           f"null): {words}" in v.gated  # ... beside the certificate's


def test_a_damaged_certificate_is_a_typed_error(tmp_path):
    run = _run(tmp_path, validated=False)
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "validate/end-to-end certificate", "commit": "x"}')
    with pytest.raises(DataError, match="no dict field 'setting'"):
        RunData.open(run, certificates=[bad])
    with pytest.raises(DataError, match="does not exist"):
        RunData.open(run, certificates=[tmp_path / "none.json"])


def test_a_certificate_whose_spot_check_failed_in_the_run_decides_nothing(tmp_path):
    run = _run(tmp_path, validated=False)
    cert = _certificate(tmp_path)
    assert _by(run, certificates=[cert])["enrichment"].certified  # before: it decides the row
    (run / "validate").mkdir(exist_ok=True)
    (run / "validate" / "checks.json").write_text(json.dumps([
        {"name": "certificate cert.json: simulation effect #3 comes back identical",
         "kind": "certificate spot check", "certificate": "cert.json", "passed": False,
         "measured": 0.0, "detail": "enrichment: recorded supported, now inconclusive"}]))
    v = _by(run, certificates=[cert])["enrichment"]
    assert v.status == R.INCONCLUSIVE and not v.certified
    assert "certificate stale: its simulations did not come back identical in this run's " \
           "validate stage (certificate cert.json: simulation effect #3" in v.gated

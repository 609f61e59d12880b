"""The "theory against measurement, in numbers" table, with an external measurement (issue 20)."""

from __future__ import annotations

import math

from tangentlab.empirical.bridge.run import BRIDGE_NAME, write_bridge_csv
from tangentlab.report import theory_numbers as TN
from tangentlab.report.load import RunData
from tests.report.fixtures import measure_rows, trajectory_rows, write_measure_dir, write_run

NAN = float("nan")


def _bridge_rows(model: str) -> list[dict]:
    base = {"model": model, "arch": "decoder", "site": "blocks.2.resid_post", "phase": "last",
            "checkpoint": "step_001000", "step": 1000}
    rows = [
        {"quantity": "attenuation_raw", "bucket": "all", "role": "comparison", "predicted": 0.72,
         "predicted_low": 0.70, "predicted_high": 0.74, "measured": 0.71, "measured_low": 0.60,
         "measured_high": 0.85, "status": "agree", "n": 30},
        {"quantity": "bucket_visibility", "bucket": "f1", "role": "comparison", "predicted": NAN,
         "measured": 0.01, "measured_low": 0.009, "measured_high": 0.011,
         "status": "not measurable here", "note": "not measurable here: the calibration trusts"},
        {"quantity": "zipf_s", "bucket": "all", "role": "input", "measured": 1.1,
         "measured_low": 1.09, "measured_high": 1.11, "status": "measured"},
        {"quantity": "rankme", "bucket": "all", "role": "baseline", "measured": 12.5,
         "status": "context", "note": "Li et al. 2025"},
    ]
    for lab, m, p in (("f1", 1.3, 1.31), ("f2", 0.95, 0.97), ("f3", 0.6, 0.66)):
        rows.append({"quantity": "relative_visibility", "bucket": lab, "role": "comparison",
                     "predicted": p, "predicted_low": p - 0.05, "predicted_high": p + 0.05,
                     "measured": m, "measured_low": m - 0.1, "measured_high": m + 0.1,
                     "status": "agree"})
    return [{**base, **r} for r in rows]


def test_a_prediction_at_the_closed_forms_boundary_is_flagged_in_the_table(tmp_path):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    ext = write_measure_dir(tmp_path / "ext" / "a", trajectory_rows(
        "suite-a", {0: 1.0, 100: 0.6, 1000: 0.5}, site="blocks.2.resid_post"))
    rows = _bridge_rows("suite-a")
    rows[0] = {**rows[0], "predicted": 1.0, "predicted_low": 1.0, "predicted_high": 1.0,
               "note": "V = 11; beta raw; measured beta -0.04 < 0 is outside the closed form "
                       "(alpha >= 0): predicted at beta = 0, no pinning"}
    write_bridge_csv(rows, ext / BRIDGE_NAME)
    got = {r[3]: r for r in TN.table_rows(TN.read_lines(RunData.open(run, measures={"a": ext}))[0])}
    assert got["attenuation_raw"][6] == "agree" + TN.OUTSIDE_DOMAIN_FLAG
    assert got["relative_visibility [f1]"][6] == "agree"  # no note, no flag


def test_report_shows_the_table_for_an_external_measurement(tmp_path):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    ext = write_measure_dir(tmp_path / "ext" / "a", trajectory_rows(
        "suite-a", {0: 1.0, 100: 0.6, 1000: 0.5}, site="blocks.2.resid_post"))
    write_bridge_csv(_bridge_rows("suite-a"), ext / BRIDGE_NAME)
    lines, missing = TN.read_lines(RunData.open(run, measures={"a": ext}))
    assert {ln.source for ln in lines} == {"a (external)"}
    assert any("measure/decoder" in m or "decoder" in m for m in missing)  # ours has no bridge
    rows = TN.table_rows(lines)
    att = [r for r in rows if r[3] == "attenuation_raw"][0]
    assert att[4] == "0.72 [0.7, 0.74]" and att[5] == "0.71 [0.6, 0.85]" and att[6] == "agree"
    nm = [r for r in rows if r[3] == "bucket_visibility [f1]"][0]
    assert nm[4] == "not measurable here" and nm[6] == "not measurable here"
    ctx = TN.context_rows(lines)
    assert [r[3] for r in ctx] == ["zipf_s", "rankme (peer baseline)"]  # inputs first
    assert [r[3] for r in rows][:2] == ["attenuation_raw", "relative_visibility [f1]"]

    # the pages' hooks, without building every verdict row (the full render is the CLI's test)
    from tangentlab.report.html_page import render_html
    from tangentlab.report.md_page import render_markdown
    from tangentlab.report.page import build

    page = build(RunData.open(run, measures={"a": ext}), [])
    (run / "figures").mkdir()
    pngs, figs = TN.write_figures(page.bridge, run / "figures", run / "figures")
    html = render_html(page, pngs)
    md = render_markdown(page, figs)
    sec = html.split('id="theory-numbers"')[1].split("<h2")[0]
    assert "0.71 [0.6, 0.85]" in sec and "relative_visibility [f2]" in sec
    assert "peer baseline" in sec and TN.AGREEMENT_RULE.split(";")[0] in sec
    key = TN.figure_key("a (external)")
    assert (run / "figures" / f"{key}.png").is_file()
    assert f"![{TN.TITLE}: a (external)](figures/{key}.png)" in md
    assert "| a (external) | blocks.2.resid_post | last (step 1000) | attenuation_raw |" in md


def test_no_bridge_anywhere_says_so(tmp_path):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    data = RunData.open(run)
    lines, missing = TN.read_lines(data.stages, data.names)
    assert lines == []
    assert any("No measurement wrote a bridge table" in x
               for x in TN.html_section(lines, missing, {}))


def _unmeasurable(model: str) -> list[dict]:
    """Two sites × three phases of cells nobody could measure, and one measured cell."""
    rows = []
    for site in ("blocks.0.resid_post", "blocks.1.resid_post"):
        for phase, step in (("step0", 0), ("peak", 3 if site.startswith("blocks.0") else 60),
                            ("last", 60)):
            base = {"model": model, "arch": "decoder", "site": site, "phase": phase,
                    "checkpoint": f"step_{step:06d}", "step": step, "role": "comparison",
                    "status": "not measurable here", "predicted": NAN, "measured": NAN}
            why = "not measurable here: no token has 64 occurrences in distinct documents"
            rows += [{**base, "quantity": "attenuation_raw", "bucket": "all",
                      "note": why + ("; phase: largest enrichment" if phase == "peak" else "")}]
            rows += [{**base, "quantity": "relative_visibility", "bucket": f"f{b}",
                      "note": why + "; not measurable here: beta or s is not measurable"}
                     for b in (1, 2, 3)]
            rows += [{**base, "quantity": "zipf_s", "bucket": "all", "role": "input",
                      "note": "not measurable here: only 0 types have at least min_count=100"}]
    rows.append({**rows[0], "site": "blocks.1.resid_post", "phase": "last", "step": 60,
                 "quantity": "bucket_visibility", "bucket": "f1", "predicted": 0.5,
                 "predicted_low": 0.4, "predicted_high": 0.6, "measured": 0.55,
                 "measured_low": 0.5, "measured_high": 0.6, "status": "agree", "note": ""})
    return rows


def test_unmeasurable_cells_collapse_to_one_line_per_model_and_phase(tmp_path):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    ext = write_measure_dir(tmp_path / "ext" / "a", trajectory_rows(
        "suite-a", {0: 1.0, 100: 0.6, 1000: 0.5}, site="blocks.2.resid_post"))
    write_bridge_csv(_unmeasurable("suite-a"), ext / BRIDGE_NAME)
    lines = TN.read_lines(RunData.open(run, measures={"a": ext}))[0]
    rows = TN.table_rows(lines)
    # the measured cell stays as it is, on its own line
    measured = [r for r in rows if r[3] == "bucket_visibility [f1]"]
    assert measured == [("a (external)", "blocks.1.resid_post", "last (step 60)",
                         "bucket_visibility [f1]", "0.5 [0.4, 0.6]", "0.55 [0.5, 0.6]", "agree")]
    # 24 unmeasurable comparison cells: one line per phase (three), not 24
    collapsed = [r for r in rows if r is not measured[0]]
    assert len(rows) == 4 and len(collapsed) == 3, rows
    by_phase = {r[2]: r for r in collapsed}
    assert set(by_phase) == {"step0 (step 0)", "peak (steps 3, 60)", "last (step 60)"}
    step0 = by_phase["step0 (step 0)"]
    assert step0[0] == "a (external)"
    assert step0[1] == "2 sites: blocks.0.resid_post, blocks.1.resid_post"
    assert step0[3] == "8 cells: attenuation_raw, relative_visibility [3 buckets]"
    assert step0[4] == step0[5] == TN.NOT_MEASURABLE
    # the distinct reasons, each once, without the phase's own note
    assert step0[6] == (f"{TN.NOT_MEASURABLE}: no token has 64 occurrences in distinct "
                        "documents; beta or s is not measurable")
    assert "largest enrichment" not in by_phase["peak (steps 3, 60)"][6]
    # the context table's unmeasurable inputs collapse the same way
    ctx = TN.context_rows(lines)
    assert len(ctx) == 3 and all(r[4] == TN.NOT_MEASURABLE for r in ctx), ctx
    assert ctx[0][3] == "2 cells: zipf_s"
    assert ctx[0][5] == f"{TN.NOT_MEASURABLE}: only 0 types have at least min_count=100"


def test_many_distinct_reasons_are_listed_briefly():
    lines = [TN.Line("m", "m", "s", "last", "60", f"q{i}", "all", "comparison", (NAN,) * 3,
                     (NAN,) * 3, TN.NOT_MEASURABLE, f"not measurable here: reason {i}")
             for i in range(6)]
    (row,) = TN.table_rows(lines)
    assert row[6] == f"{TN.NOT_MEASURABLE}: reason 0; reason 1; reason 2; and 3 other reasons"
    assert row[1] == "s" and row[3] == "6 cells: q0, q1, q2, q3, q4, q5"


def test_the_findings_list_names_what_disagrees_with_its_numbers_and_stages(tmp_path):
    """Not-supported rows (raw ones too) and units, and disagreeing lines, are findings; a
    calibration failure and an agreeing line are not."""
    from dataclasses import replace

    from tangentlab.claims import rules as R
    from tangentlab.report.md_page import render_markdown
    from tangentlab.report.page import build
    from tangentlab.report.verdicts import build_verdicts

    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    data = RunData.open(run)
    by = {v.key: v for v in build_verdicts(data)}
    assert not TN.findings(list(by.values()), [])  # the fixture's rows are all supported
    enr, inst = by["enrichment"], next(v for v in by.values() if v.section == "instrument")
    unit = replace(enr.units[0], status=R.NOT_SUPPORTED, estimate="0.66 [CI 0.56, 0.76]")
    rows = [replace(enr, units=(unit,)), replace(inst, status=R.NOT_SUPPORTED),
            replace(by["frequency-distance"], status=R.INCONCLUSIVE, raw_status=R.NOT_SUPPORTED,
                    gated="no end-to-end run",
                    reason="not validated end to end (no end-to-end run); raw: not supported; "
                           "rho +0.19 [0.12, 0.25] against the readers' -0.5")]
    line = TN.Line("measure/decoder", "decoder", "blocks.0.resid_post", "peak", "126",
                   "attenuation_raw", "all", "comparison", (0.9, 0.85, 0.95), (0.5, 0.4, 0.6),
                   "disagree", "")
    bent = replace(line, quantity="pinning_curvature_raw", role="input", status="measured",
                   predicted=(math.nan,) * 3, measured=(-0.012, -0.02, -0.004),
                   note=f"slope 0.17 over the head, 0.05 over the tail; {TN.POWER_LAW_REJECTED}")
    kept = replace(bent, measured=(-0.002, -0.01, 0.006), note="slope 0.1 over the head")
    got = TN.findings(rows, [line, replace(line, status="agree"), kept, bent,
                             replace(bent, phase="last")])  # the peak was the last step
    assert len(got) == 4, got
    assert got[3] == ("pinning_curvature_raw (decoder blocks.0.resid_post, peak step 126): the "
                      "closed forms' single pinning law t_r ∝ r^β does not describe the spreads, "
                      "curvature -0.012 [-0.02, -0.004] (0 under one power law) [measure/decoder]")
    assert got[0].startswith(f"{enr.title}, {unit.label}: not supported, 0.66 [CI 0.56, 0.76]")
    assert "[measure/decoder]" in got[0]
    assert "not validated end to end" in got[1] and got[1].endswith(
        "rho +0.19 [0.12, 0.25] against the readers' -0.5 [measure/decoder]")
    assert got[2] == ("attenuation_raw (decoder blocks.0.resid_post, peak step 126): predicted "
                      "0.9 [0.85, 0.95], measured 0.5 [0.4, 0.6]: disagree [measure/decoder]")
    page = replace(build(data, rows), findings=got)
    assert f"{TN.FINDINGS_TITLE}** (4;" in render_markdown(page, {})

"""External measurement runs stay apart from our verdicts (issue 17 item 3): their own sub-tables
and panels, pooled only with ``--pool``; one-checkpoint runs; every series drawn; named sources."""

from __future__ import annotations

import pytest

from tangentlab.claims import rules as R
from tangentlab.cli import main
from tangentlab.report.load import RunData
from tangentlab.report.units import ONE_CHECKPOINT, comparison_panel
from tangentlab.report.verdicts import build_verdicts, models
from tests.report.fixtures import measure_rows, trajectory_rows, write_measure_dir, write_run


@pytest.fixture()
def ours_and_two_suites(tmp_path):
    """Our decoder (supported) and two external suites whose enrichment lies below 1."""
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    a = write_measure_dir(tmp_path / "ext" / "a", trajectory_rows("suite-a", {0: 1.0, 100: 0.6, 1000: 0.5},
                                                                  site="blocks.2.resid_post"))
    b = write_measure_dir(tmp_path / "ext" / "b", trajectory_rows("suite-b", {0: 1.0, 100: 0.7, 1000: 0.6},
                                                                  site="blocks.4.resid_post"))
    return run, {"suite-a": a, "suite-b": b}


def _by(run, **kw):
    return {v.key: v for v in build_verdicts(RunData.open(run, **kw))}


def test_external_suites_never_change_our_verdict_unless_pooled(ours_and_two_suites):
    run, ext = ours_and_two_suites
    alone = _by(run)["enrichment"]
    assert alone.status == R.SUPPORTED
    with_ext = _by(run, measures=ext)["enrichment"]
    assert with_ext.status == R.SUPPORTED  # was "not supported" when the suites were pooled in
    assert with_ext.external_status == R.NOT_SUPPORTED
    assert [u.model for u in with_ext.external_units] == ["suite-a", "suite-b"]
    pooled = _by(run, measures=ext, pool=True)["enrichment"]
    assert pooled.status == R.INCONCLUSIVE and pooled.pooled  # units disagree (issue 33)


def test_report_page_shows_external_sub_tables_and_named_sources(ours_and_two_suites, capsys):
    run, ext = ours_and_two_suites
    args = ["report", str(run)] + [f"--measure={k}={v}" for k, v in ext.items()]
    assert main(args) == 0
    html = (run / "report.html").read_text()
    md = (run / "report.md").read_text()
    row = html.split('id="row-enrichment"')[1].split('<div class="row"')[0]
    assert 'id="row-enrichment-external"' in row and "shown apart" in row
    assert "External runs on their own" in row
    src = row.split("<b>Source.</b>")[1]
    assert "external/suite-a" in src and str(ext["suite-a"]) not in src  # a name, not a path
    assert (run / "figures" / "enrichment--external.png").is_file()
    assert "![Tangent energy enrichment over training: external measurements](figures/enrichment--external.png)" in md
    # the summary row of the predictions table keeps ours and marks theirs apart
    table = html.split('id="predictions"')[1].split("</table>")[0]
    assert "external, not pooled" in table
    assert main(args + ["--pool"]) == 0
    html = (run / "report.html").read_text()
    row = html.split('id="row-enrichment"')[1].split('<div class="row"')[0]
    assert "row-enrichment-external" not in row and "pooled" in row


def test_one_checkpoint_run_is_not_applicable_for_weakens_late(tmp_path):
    rows = [r for r in trajectory_rows("one", {60: 2.5}) if r["bucket"] == "all"]
    run = write_run(tmp_path / "run", {"decoder": rows})
    v = _by(run)["weakens-late"]
    assert [u.status for u in v.units] == [ONE_CHECKPOINT]
    assert v.status == ONE_CHECKPOINT  # was "not supported": "peaks at its last checkpoint"
    assert "needs a trajectory" in v.units[0].reason
    # beside a real trajectory, the one-checkpoint unit is left out of the combination
    enc = trajectory_rows("traj", {0: 1.0, 100: 3.0, 1000: 1.5}, late=(1.5, 1.4, 1.6))
    # the refit proxy declines too (the weakens-late rule reads both proxies, issue 18)
    enc += [{**r, "proxy": "refit"} for r in enc if r["metric"] == "enrichment"]
    run2 = write_run(tmp_path / "run2", {"decoder": rows, "encoder": enc}, measure_extra={
        "encoder": {"early_late_cut_step": 300.0}})
    v2 = _by(run2)["weakens-late"]
    assert {u.model: u.status for u in v2.units} == {"decoder": ONE_CHECKPOINT, "encoder": R.SUPPORTED}
    assert v2.status == R.SUPPORTED and "left out" in v2.reason
    html = __import__("tangentlab.report.render", fromlist=["x"]).render_report(run2).html.read_text()
    assert ONE_CHECKPOINT in html.split('id="row-weakens-late"')[1].split('<div class="row"')[0]


def test_comparison_panel_draws_every_series_or_states_its_cap(tmp_path):
    run = write_run(tmp_path / "run", {f"m{i}": trajectory_rows(f"m{i}", {0: 1.0, 10: 2.0 + i}) for i in range(11)})
    data = RunData.open(run)
    ms = models(data, [f"measure/m{i}" for i in range(11)])
    p = comparison_panel(ms)
    assert len([s for s in p.series if s.kind == "points"]) == 11
    capped = comparison_panel(ms, max_series=4)
    assert len([s for s in capped.series if s.kind == "points"]) == 4
    assert "first 4 of 11" in capped.title
    v = _by(run)["enrichment"]
    assert len([s for s in v.panels[0].series if s.kind == "points"]) == 11

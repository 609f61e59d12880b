"""What both pages say (issue 32, item 7): the headline's raw verdicts, the p-value's floor."""

from __future__ import annotations

from tangentlab.claims import rules as R
from tangentlab.report import page as P
from tangentlab.report.load import RunData
from tangentlab.report.units import Unit
from tangentlab.report.verdicts import Verdict, build_verdicts
from tests.report.fixtures import measure_rows, write_run


def _v(key: str, status: str, raw: str = "", *, section: str = "prediction",
       depends_on: str | None = None) -> Verdict:
    return Verdict(key=key, title=key, prediction="", section=section, status=status, reason="",
                   rule="", test="", gated="not validated" if raw else "", raw_status=raw,
                   depends_on=depends_on)


def test_headline_counts_the_raw_verdicts_beside_the_gated_ones():
    vs = [_v("a", R.INCONCLUSIVE, R.SUPPORTED), _v("b", R.INCONCLUSIVE, R.SUPPORTED),
          _v("c", R.INCONCLUSIVE, R.SUPPORTED), _v("d", R.INCONCLUSIVE, R.NOT_SUPPORTED),
          _v("e", R.INCONCLUSIVE, R.NOT_SUPPORTED), _v("f", R.INCONCLUSIVE),
          _v("g", R.INCONCLUSIVE, R.SUPPORTED, depends_on="a"),  # dependent: not counted
          _v("h", R.SUPPORTED, section="calibration")]
    txt = P.counts_text(vs, "prediction")
    assert txt.startswith("0 supported, 0 not supported, 6 inconclusive: 3 raw supported, "
                          "2 raw not supported, 1 undecided; 0 not run"), txt
    assert "of 6" in txt and "(+1 dependent row not counted)" in txt
    # a section without gated rows reads as before
    assert P.counts_text(vs, "calibration") == ("1 supported, 0 not supported, 0 inconclusive, "
                                                "0 not run of 1")


def test_both_pages_show_the_raw_counts_of_a_gated_run(tmp_path):
    from tangentlab.report.html_page import render_html
    from tangentlab.report.md_page import render_markdown

    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")}, validated=False)
    data = RunData.open(run)
    verdicts = build_verdicts(data)
    gated = [v for v in verdicts if v.section == "prediction" and v.gated and not v.depends_on]
    assert gated, "the fixture should gate some prediction rows"
    n_sup = sum(v.raw_status == R.SUPPORTED for v in gated)
    want = f"{n_sup} raw supported, "
    page = P.build(data, verdicts)
    head_md = render_markdown(page, {}).split("**Predictions of the account:**")[1]
    head_html = render_html(page, {}).split("<b>Predictions of the account:</b>")[1]
    assert want in head_md.splitlines()[0] and want in head_html.splitlines()[0]
    assert "undecided" in head_md.splitlines()[0] and "undecided" in head_html.splitlines()[0]


def _unit(reason: str, note: str) -> Verdict:
    u = Unit("decoder", "blocks.1.resid_post", R.SUPPORTED, reason, "3 CI [2.7, 3.3]", "step 100",
             note)
    return Verdict(key="enrichment", title="t", prediction="", section="prediction",
                   status=R.SUPPORTED, reason="", rule="", test="", units=(u,))


def test_p_text_names_the_floor_and_the_number_of_controls():
    assert P.p_text(1 / 21, 20) == "p = 0.0476, the floor for 20 controls"
    assert P.p_text(0.0952, 20) == "p = 0.0952, above the floor 0.0476 for 20 controls"
    assert P.p_text(0.05, None) == "p = 0.05, its floor unknown (the number of controls was not recorded)"
    assert P.p_text(None, 20) == "p not stored (floor 0.0476 for 20 controls)"


def test_a_units_p_value_shows_its_floor_not_a_bare_number():
    reason = ("enrichment 3 [CI 2.7, 3.3] lies above the reference max(1, step-0 1) = 1; "
              "p = 0.0476 (floor 0.0476)")
    note = "p 0.04762 (n_controls 20), step 0: 1, position between null and oracle 0.3"
    why = P.unit_rows(_unit(reason, note))[0][5]
    assert "p = 0.0476, the floor for 20 controls" in why, why
    assert "(floor 0.0476)" not in why and "p 0.04762" not in why  # no bare number left
    assert why.endswith("step 0: 1, position between null and oracle 0.3")
    above = P.unit_rows(_unit("enrichment 1.2 [CI 1.05, 1.6], reference 1, p = 0.0952 "
                              "(floor 0.0476): p is not at its floor",
                              "p 0.09524 (n_controls 20), step 0: 0.95"))[0][5]
    assert "p = 0.0952, above the floor 0.0476 for 20 controls: p is not at its floor" in above
    # only the note carries a p-value: it is the one rewritten
    only = P.unit_rows(_unit("no enrichment value at the last checkpoint",
                             "p 0.04762 (n_controls 20), step 0: 1"))[0][5]
    assert "p = 0.04762, the floor for 20 controls, step 0: 1" in only


def test_the_rendered_enrichment_sub_table_shows_the_floor(tmp_path):
    from tangentlab.report.md_page import render_markdown

    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    data = RunData.open(run)
    md = render_markdown(P.build(data, build_verdicts(data)), {})
    row = [ln for ln in md.splitlines() if ln.startswith("| decoder | blocks.1.resid_post |")
           and "enrichment 3" in ln]
    assert row and "the floor for 20 controls" in row[0], row


def test_the_run_is_read_once_when_it_is_opened(tmp_path):
    """Issue 34, item 4: the verdict rows, the page model and both pages are built from what
    ``RunData.open`` read; with the run directory moved away after it, they read the same."""
    from tangentlab.report.html_page import render_html
    from tangentlab.report.md_page import render_markdown

    def pages(data) -> tuple[str, str]:
        page = P.build(data, build_verdicts(data))
        return render_markdown(page, {}), render_html(page, {})

    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder"),
                                       "encoder": measure_rows("encoder")})
    data = RunData.open(run)
    before = pages(RunData.open(run))
    run.rename(tmp_path / "elsewhere")
    assert pages(data) == before
    assert "| decoder | blocks.1.resid_post |" in before[0]  # the units were read

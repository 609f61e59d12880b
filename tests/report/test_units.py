"""The per-(model, site) unit builders of tangentlab.report.units on hand-made tables."""

from __future__ import annotations

import pandas as pd
import pytest

from tangentlab.claims import rules as R
from tangentlab.empirical.measurement.metrics import CV_FLAG
from tangentlab.report.tables import ResultTable
from tangentlab.report.units import Model, combine_units, enrichment_unit
from tests.report.fixtures import trajectory_rows

SITE = "blocks.1.resid_post"


def _model(last: float, half_width: float, cv: float | None, *, constrained_cv: float | None = None,
           name: str = "dec") -> Model:
    """A decoder whose enrichment is 1 at step 0 and ``last`` at step 800 (CI +- half_width x),
    with a ``ratio_cv`` row at step 800 (band_high = the validated 0.9) when ``cv`` is given."""
    rows = trajectory_rows("dec", {0: 1.0, 800: last}, band_columns=True, half_width=half_width)
    base = {"model": "dec", "arch": "decoder", "checkpoint": "step_000800", "step": 800,
            "site": SITE, "bucket": "all", "proxy": "fixed"}
    if cv is not None:
        rows.append({**base, "metric": "ratio_cv", "value": cv, "band_high": 0.9,
                     **({"note": CV_FLAG} if cv > 0.9 else {})})
    if constrained_cv is not None:  # the constrained test, with its own ratio CV
        for st, v in ((0, 1.0), (800, last)):
            c = {**base, "checkpoint": f"step_{st:06d}", "step": st, "subspace": "constrained"}
            rows += [{**c, "metric": "enrichment", "value": v, "ci_low": v * (1 - half_width),
                      "ci_high": v * (1 + half_width)},
                     {**c, "metric": "p_value", "value": 1 / 21}]
        rows.append({**base, "subspace": "constrained", "metric": "ratio_cv",
                     "value": constrained_cv, "band_high": 0.9})
    manifest = {"config": {"n_controls": 20}}
    return Model(name, f"measure/{name}", ResultTable(pd.DataFrame(rows)), manifest)


class TestHeavyTails:
    """Issue 33: a unit flagged cv_outside_validated_range never reads "not supported"."""

    def test_flagged_unit_below_the_reference_reads_inconclusive(self):
        # enrichment 0.5 [0.475, 0.525] below the reference 1, per-batch ratio CV 2.7 > 0.9:
        # the old code read "not supported"
        u = enrichment_unit(_model(0.5, 0.05, cv=2.7), SITE)
        assert u.status == R.INCONCLUSIVE, u.reason
        assert "ratio CV 2.7" in u.reason and CV_FLAG in u.reason and "runs low" in u.reason
        assert CV_FLAG in u.note  # the note keeps the flag too

    def test_unflagged_unit_below_the_reference_is_not_supported(self):
        assert enrichment_unit(_model(0.5, 0.05, cv=0.6), SITE).status == R.NOT_SUPPORTED
        assert enrichment_unit(_model(0.5, 0.05, cv=None), SITE).status == R.NOT_SUPPORTED

    def test_flagged_unit_above_the_reference_stays_supported(self):
        # the interval runs low under heavy tails, so a lower bound above the reference stands
        u = enrichment_unit(_model(3.0, 0.05, cv=2.7), SITE)
        assert u.status == R.SUPPORTED and CV_FLAG in u.reason

    def test_the_cv_of_the_test_the_verdict_reads(self):
        # the verdict reads the constrained test; its own CV (2.7) flags it, the plain one (0.6)
        # does not
        u = enrichment_unit(_model(0.5, 0.05, cv=0.6, constrained_cv=2.7), SITE)
        assert u.status == R.INCONCLUSIVE and "ratio CV 2.7" in u.reason
        u = enrichment_unit(_model(0.5, 0.05, cv=2.7, constrained_cv=0.6), SITE)
        assert u.status == R.NOT_SUPPORTED

    def test_a_flagged_unit_cannot_make_a_row_not_supported(self):
        units = [enrichment_unit(_model(0.5, 0.05, cv=2.7, name="heavy"), SITE),
                 enrichment_unit(_model(0.5, 0.05, cv=0.6, name="light"), SITE)]
        out = combine_units(units)
        assert out.status == R.INCONCLUSIVE
        assert f"inconclusive: heavy {SITE}; not supported: light {SITE}" in out.reason


@pytest.mark.parametrize("statuses,row", [
    ((R.NOT_SUPPORTED, R.SUPPORTED, R.SUPPORTED, R.SUPPORTED), R.INCONCLUSIVE),
    ((R.NOT_SUPPORTED,) * 4, R.NOT_SUPPORTED),
    ((R.SUPPORTED,) * 4, R.SUPPORTED)])
def test_combine_units_is_intersection_union(statuses, row):
    from tangentlab.report.units import Unit

    units = [Unit("m", f"s{i}", st, "r", "e", "step 1") for i, st in enumerate(statuses)]
    assert combine_units(units).status == row


def test_an_interval_from_few_test_batches_or_one_that_cannot_be_right_says_so(tmp_path):
    """Issue 32: with 8 eval batches the intervals reached [2e-07, 1e+122] with no word; an
    infinite estimate read like any other. The enrichment unit's note says both."""
    from tangentlab.report.load import RunData
    from tangentlab.report.verdicts import build_verdicts
    from tests.report.fixtures import measure_rows, write_run

    rows = measure_rows("decoder")
    for r in rows:
        if r["metric"] == "enrichment" and r.get("bucket") == "all" and r.get("step") == max(
                x.get("step") or 0 for x in rows if x["metric"] == "enrichment"):
            r.update(value=float("inf"))
    run = write_run(tmp_path / "run", {"decoder": rows},
                    measure_extra={"decoder": {"split": {"test_batches": list(range(4))}}})
    v = {v.key: v for v in build_verdicts(RunData.open(run))}["enrichment"]
    note = " ".join(u.note for u in v.units)
    assert "interval from 4 test batches (coverage validated at >= 32)" in note
    assert "non-finite enrichment" in note

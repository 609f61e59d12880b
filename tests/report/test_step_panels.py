"""The per-model step panels are one table of StepPanel frames (step_panels.py, late.py)."""

from __future__ import annotations

from tangentlab.report import late as L
from tangentlab.report import step_panels as SP
from tangentlab.report import units as U


def test_every_step_panel_is_one_frame_with_its_own_series(tmp_path):
    from tangentlab.report.load import RunData
    from tangentlab.report.verdicts import models
    from tests.report.fixtures import measure_rows, write_run

    panels = (*SP.STEP_PANELS.values(), L.weakens_late_panel)
    assert all(isinstance(p, SP.StepPanel) for p in panels)
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    (model,) = models(RunData.open(run), ["measure/decoder"])
    assert SP.learning_panel(model) is None  # the fixture stores no learning-arms rows
    got = {p.title: p(model) for p in panels if p is not SP.learning_panel}
    assert all(g is not None and g.xscale == U.STEP_SCALE and g.xlabel == U.STEP_LABEL
               and g.title == f"decoder blocks.1.resid_post: {k}" for k, g in got.items())
    labels = {k: [s.label for s in g.series] for k, g in got.items()}
    assert labels["tangent enrichment over training"][0] == "null: controls (= 1)"
    assert "Q_T" in labels["tangent enrichment over training"]
    assert labels["log-frequency vs occurrence spread"][:2] == ["no correlation (0)", "Spearman"]
    assert labels["enrichment and the late window"][0] == "Q_T"
    assert labels["loss increase on ablation"] == ["ablate Q_T", "complement controls (bars: range)"]

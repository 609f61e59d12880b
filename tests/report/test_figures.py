"""Figures keep their legends off the data: a strip below the axes grows with the entries."""

from __future__ import annotations

import io

import pytest

from tangentlab.report.figures import Panel, Series, legend_columns, render_png


def _size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    return Image.open(io.BytesIO(png)).size


def _panel(n: int, **kw) -> Panel:
    series = tuple(Series(f"series {i}", "points", (0.0, 1.0, 10.0), (1.0, 2.0, 3.0), color=i) for i in range(n))
    return Panel("t", "step (updates)", "y (ratio)", series, **kw)


def test_legend_strip_below_the_axes_grows_with_entries():
    w1, h1 = _size(render_png([_panel(1)]))
    w8, h8 = _size(render_png([_panel(8)]))
    assert legend_columns(_panel(8)) == 4  # short labels: four to a row
    assert h8 > h1 + 10  # one more legend row, below the axes, not on the data
    assert abs(w8 - w1) < 40


def test_legends_stay_compact_columns_follow_the_longest_label():
    long = Panel("t", "x", "y", tuple(Series("a rather long legend label for series " + str(i), "points",
                                             (0.0,), (1.0,)) for i in range(4)))
    assert legend_columns(long) == 2
    assert legend_columns(_panel(2)) == 2  # never more columns than entries
    # a duplicated label is one legend entry
    dup = Panel("t", "x", "y", (Series("same", "points", (0.0,), (1.0,)), Series("same", "points", (1.0,), (2.0,))))
    assert legend_columns(dup) == 1


def test_vline_band_and_hollow_series_render():
    p = Panel("t", "x (units)", "y (units)", (
        Series("band", "band", (0.0, 1.0), (), (0.5, 0.5), (1.5, 1.5), color=0),
        Series("cut", "vline", (0.5,), ()),
        Series("_nolegend_", "hline", (), (1.0,), style="reference", color=0),
        Series("step 0", "points", (0.0, 1.0), (1.0, 1.2), style="hollow", color=1),
    ), xscale="symlog")
    assert _size(render_png([p]))[0] > 100
    with pytest.raises(ValueError, match="series kind"):
        Series("x", "bars")


def test_one_step_axis_convention_and_no_clipped_points(tmp_path):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    from tangentlab.report import figures as F
    from tangentlab.report.load import RunData
    from tangentlab.report.units import STEP_LABEL, STEP_SCALE
    from tangentlab.report.verdicts import build_verdicts
    from tests.report.fixtures import measure_rows, write_run

    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder"), "encoder": measure_rows("encoder")})
    step_panels = [p for v in build_verdicts(RunData.open(run)) for p in v.panels if p.xlabel == STEP_LABEL]
    assert len(step_panels) >= 6 and {p.xscale for p in step_panels} == {STEP_SCALE} == {"symlog"}
    assert "symlog" in STEP_LABEL  # the axis says which convention it follows
    # the first (step 0) and last points, dodged sideways, keep room to the frame
    pts = tuple(Series(f"s{i}", "points", (0.0, 10.0, 100.0), (1.0, 2.0, 3.0), (0.9, 1.8, 2.7),
                       (1.1, 2.2, 3.3), color=i) for i in range(3))
    fig, ax = plt.subplots()
    try:
        F._draw(ax, Panel("t", STEP_LABEL, "y", pts, xscale="symlog"), np, matplotlib)
        lo, hi = ax.get_xlim()
        assert lo < -0.3 and hi > 100.0 * 1.25
        ylo, yhi = ax.get_ylim()
        assert ylo < 0.9 and yhi > 3.3
    finally:
        plt.close(fig)


def test_long_titles_wrap_to_the_panel_width():
    from tangentlab.report.figures import _title

    p = Panel("all models (ours and external): enrichment (dashed: step 0; shaded: controls)", "x", "y")
    assert all(len(line) <= 52 for line in _title(p).split("\n")) and "\n" in _title(p)


def test_a_synthetic_panel_that_caps_its_groups_says_so():
    import pandas as pd

    from tangentlab.report.synthetic_panels import PanelSpec, prediction_panels

    df = pd.DataFrame([{"metric": "m", "value": float(g + t), "t": float(t), "manifold": f"g{g}"}
                       for g in range(5) for t in (1, 2)])
    (p,) = prediction_panels(df, "x", (PanelSpec(("m",), "m vs t", x="t", group=("manifold",), max_groups=3),))
    assert len([s for s in p.series if s.kind == "points"]) == 3
    assert "first 3 of 5 groups drawn" in p.title
    steps = pd.DataFrame([{"metric": "m", "value": 1.0, "step": float(s)} for s in (0, 10, 100)])
    (q,) = prediction_panels(steps, "x", (PanelSpec(("m",), "m vs step", x="step", group=()),))
    assert q.xscale == "symlog"  # the report's one step-axis convention

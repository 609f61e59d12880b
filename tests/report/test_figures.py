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

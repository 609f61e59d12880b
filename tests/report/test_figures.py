"""Figures keep their legends off the data: a strip below the axes grows with the entries."""

from __future__ import annotations

import io

import pytest

from tangentlab.report.figures import Panel, Series, render_png


def _size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    return Image.open(io.BytesIO(png)).size


def _panel(n: int, **kw) -> Panel:
    series = tuple(Series(f"series {i}", "points", (0.0, 1.0, 10.0), (1.0, 2.0, 3.0), color=i) for i in range(n))
    return Panel("t", "step (updates)", "y (ratio)", series, **kw)


def test_legend_strip_below_the_axes_grows_with_entries():
    w1, h1 = _size(render_png([_panel(1)]))
    w8, h8 = _size(render_png([_panel(8)]))
    assert h8 > h1 + 20  # three more legend rows (two columns), below the axes, not on the data
    assert abs(w8 - w1) < 40


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

"""Figure specifications of the verdict rows, and their rendering to PNG.

A verdict row describes its figure as data (:class:`Panel` holding :class:`Series`), so the rules
stay free of plotting code and tests can inspect what would be drawn. Conventions: theory is a
*line*, measurements are *points* with interval bars, the null (random baseline, control band)
is a grey *band* or *hline*, and the step-0 value a dashed *hline*.

Legibility at report width: each panel's legend sits in its own strip *below* the axes, never on
the data, so no point is hidden; a band, hline or vline with a ``color`` shares that colour with
its measurement.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Series", "Panel", "render_png", "panel_has_data", "legend_columns", "MARKERS"]

_KINDS = ("line", "points", "band", "hline", "vline")


@dataclass(frozen=True)
class Series:
    """One thing drawn on a panel.

    Attributes:
        label: legend text.
        kind: ``line`` (theory), ``points`` (measurement, with optional ``lo``/``hi`` interval),
            ``band`` (``lo``..``hi`` shaded over ``x``), ``hline`` (``y[0]`` across the panel),
            ``vline`` (``x[0]`` from bottom to top: a window boundary).
        x, y, lo, hi: coordinates, all the same length (``lo``/``hi`` may be empty).
        style: ``"reference"`` draws an hline dashed (step-0 values, null lines); ``"tick"`` draws
            a line's values as short horizontal dashes (theory at categorical x); ``"hollow"``
            draws points as open circles (e.g. the step-0 values beside the trained ones).
            A label ``"_nolegend_"`` keeps the series out of the legend.
    """

    label: str
    kind: str
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    lo: tuple[float, ...] = ()
    hi: tuple[float, ...] = ()
    style: str = ""
    color: int | None = None  # same number = same colour (a theory line and its measurement)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"series kind must be one of {_KINDS}; got {self.kind!r}")


@dataclass(frozen=True)
class Panel:
    """One set of axes."""

    title: str
    xlabel: str
    ylabel: str
    series: tuple[Series, ...] = field(default_factory=tuple)
    xscale: str = "linear"
    yscale: str = "linear"
    categories: tuple[str, ...] = ()  # tick labels for categorical x (x = 0..k-1)
    dodge: bool = True  # shift overlapping point series sideways a little, so none hides another


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def panel_has_data(panel: Panel) -> bool:
    """True when the panel has at least one finite measured point or band value."""
    for s in panel.series:
        if s.kind in ("points", "band") and (_finite(s.y) or _finite(s.lo)):
            return True
    return False


_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
#: Point markers: a series whose ``color`` number is past the eight colours takes the next shape,
#: so every series of a crowded panel stays distinguishable.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _legend_labels(panel: Panel) -> list[str]:
    return list(dict.fromkeys(s.label for s in panel.series if s.label and not s.label.startswith("_")))


def legend_columns(panel: Panel, width: float = 5.2) -> int:
    """Legend columns for a panel ``width`` inches wide: as many as its longest label allows (1-4).

    At the legend's 7-point font a character is about 0.055 inch wide, and each entry needs about
    0.45 inch more for its marker and spacing; compact legends keep the strip under the axes short.
    """
    labels = _legend_labels(panel)
    if not labels:
        return 1
    need = 0.055 * max(len(lbl) for lbl in labels) + 0.45
    return max(1, min(4, int(width // need), len(labels)))


def _title(panel: Panel, width: float = 5.2) -> str:
    """The panel's title wrapped to its width (10-point font: about 10 characters an inch, with room between panels)."""
    import textwrap

    cols = max(20, int(width * 10))
    return "\n".join(textwrap.fill(line, cols) for line in panel.title.split("\n"))


def _legend_rows(panel: Panel, ncol: int) -> int:
    n = len(_legend_labels(panel))
    return -(-n // ncol) if n else 0


def render_png(panels: Sequence[Panel], *, width: float = 5.2, height: float = 3.6, dpi: int = 90,
               ncols: int | None = None) -> bytes:
    """Draw ``panels`` in a grid (side by side unless ``ncols`` is given); return PNG bytes (Agg).

    Each panel gets a legend strip below its axes, tall enough for its entries, in as many
    columns as its labels allow (:func:`legend_columns`).
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    if not panels:
        raise ValueError("a figure needs at least one panel")
    ncols = min(ncols or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    leg_cols = [legend_columns(p, width) for p in panels]
    row_leg = [max(_legend_rows(p, leg_cols[i]) for i, p in enumerate(panels)
                   if r * ncols <= i < (r + 1) * ncols)
               for r in range(nrows)]
    # inches under the axes for tick labels and the x label (more for rotated category ticks)
    below = [0.72 + (0.3 if any(p.categories for p in panels[r * ncols:(r + 1) * ncols]) else 0.0)
             for r in range(nrows)]
    title_lines = [max(_title(p, width).count("\n") + 1 for p in panels[(r + 1) * ncols:(r + 2) * ncols] or [panels[0]])
                   for r in range(nrows)]
    leg_h = [below[r] + 0.2 * k + (0.3 + 0.2 * title_lines[r] if r < nrows - 1 else 0.1)
             for r, k in enumerate(row_leg)]
    ratios = []
    for r in range(nrows):
        ratios += [height, leg_h[r]]
    fig = plt.figure(figsize=(width * ncols, sum(ratios)), dpi=dpi)
    grid = fig.add_gridspec(2 * nrows, ncols, height_ratios=ratios, hspace=0.0, wspace=0.35)
    try:
        for i, panel in enumerate(panels):
            r, c = divmod(i, ncols)
            ax = fig.add_subplot(grid[2 * r, c])
            lax = fig.add_subplot(grid[2 * r + 1, c])
            lax.set_axis_off()
            _draw(ax, panel, np, matplotlib, width)
            handles, labels = ax.get_legend_handles_labels()
            keep = list({lbl: (h, lbl) for h, lbl in zip(handles, labels)
                         if not lbl.startswith("_")}.values())
            if keep:
                top = 1.0 - below[r] / leg_h[r]
                lax.legend([h for h, _ in keep], [lbl for _, lbl in keep], loc="upper center",
                           bbox_to_anchor=(0.5, top),
                           ncol=leg_cols[i], fontsize=7, frameon=False, borderaxespad=0.0,
                           handlelength=1.8, columnspacing=1.2)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.12)
        return buf.getvalue()
    finally:
        plt.close(fig)


def _draw(ax, panel: Panel, np, matplotlib, panel_width: float = 5.2) -> None:
    """Draw one panel's series, scales, ticks and labels on ``ax`` (no legend)."""
    color_i = 0
    n_points = sum(1 for s in panel.series if s.kind == "points")
    k_points = 0
    span = [float(v) for s in panel.series if s.kind == "points" for v in s.x if math.isfinite(float(v))]
    width = (max(span) - min(span)) if span else 0.0
    for s in panel.series:
        x = np.asarray(s.x, dtype=float)
        if s.kind == "points" and panel.dodge and n_points > 1:
            shift = (k_points - (n_points - 1) / 2) / max(n_points, 2)
            k_points += 1
            if panel.xscale in ("log", "symlog") and not panel.categories:
                x = np.where(x > 0, x * (1.0 + 0.25 * shift), x + 0.25 * shift)
            elif panel.categories:
                x = x + 0.3 * shift
            else:
                x = x + 0.04 * width * shift
        y = np.asarray(s.y, dtype=float)
        own = _COLORS[s.color % len(_COLORS)] if s.color is not None else None
        if s.kind == "hline":
            if len(y) and math.isfinite(y[0]):
                ax.axhline(y[0], color=own or ("0.35" if s.style == "reference" else "0.55"),
                           linestyle="--" if s.style == "reference" else ":",
                           linewidth=1.2, label=s.label)
            continue
        if s.kind == "vline":
            if len(x) and math.isfinite(x[0]):
                ax.axvline(x[0], color=own or "0.3", linestyle="-." if s.style == "reference" else ":",
                           linewidth=1.1, label=s.label)
            continue
        if s.kind == "band":
            lo = np.asarray(s.lo, dtype=float)
            hi = np.asarray(s.hi, dtype=float)
            order = np.argsort(x)
            ax.fill_between(x[order], lo[order], hi[order], color=own or "0.6",
                            alpha=0.15 if own else 0.3, linewidth=0, label=s.label)
            continue
        if own is not None:
            color = own
        else:
            color = _COLORS[color_i % len(_COLORS)]
            color_i += 1
        face = "none" if s.style == "hollow" else color
        marker = MARKERS[(s.color // len(_COLORS)) % len(MARKERS)] if s.color is not None else "o"
        if s.kind == "line" and s.style == "tick":  # theory at categorical x: a dash each
            ax.plot(x, y, "_", color=color, markersize=22, markeredgewidth=2.2, label=s.label)
        elif s.kind == "line":
            order = np.argsort(x)
            ax.plot(x[order], y[order], "-", color=color, linewidth=1.6, label=s.label)
        elif len(s.lo) == len(y) and len(s.hi) == len(y) and len(y):
            lo = np.asarray(s.lo, dtype=float)
            hi = np.asarray(s.hi, dtype=float)
            with np.errstate(invalid="ignore"):
                yerr = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])
            yerr = np.where(np.isfinite(yerr), yerr, 0.0)
            ax.errorbar(x, y, yerr=yerr, fmt=marker, color=color, markerfacecolor=face, markersize=4.5,
                        capsize=2.5, linewidth=1.0, label=s.label)
        else:
            ax.plot(x, y, marker, color=color, markerfacecolor=face, markersize=4.5, label=s.label)
    if panel.xscale == "symlog":  # training steps: 0, then log-spaced
        ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
        xs = [float(v) for s in panel.series for v in s.x if v == v]
        if xs:
            ax.set_xlim(left=-0.6, right=max(xs) * 1.35 + 0.6)  # room for dodged points and caps
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    else:
        ax.set_xscale(panel.xscale)
    ax.set_yscale(panel.yscale)
    if panel.xscale == "log":  # label the measured x values themselves
        xs = sorted({float(v) for s in panel.series for v in s.x if v == v and v > 0})
        if xs:
            step = max(1, -(-len(xs) // 8))
            ax.set_xticks(xs[::step])
            ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    if panel.categories:
        ax.set_xticks(range(len(panel.categories)))
        ax.set_xticklabels(panel.categories, rotation=20, fontsize=8)
        ax.set_xlim(-0.5, len(panel.categories) - 0.5)
    ax.set_title(_title(panel, panel_width), fontsize=10)
    ax.set_xlabel(panel.xlabel, fontsize=9)
    ax.set_ylabel(panel.ylabel, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.25)
    ax.margins(x=0.06, y=0.08)  # no point on the frame

"""Figure specifications of the verdict rows, and their rendering to PNG.

A verdict row describes its figure as data (:class:`Panel` holding :class:`Series`), so the rules
stay free of plotting code and tests can inspect what would be drawn. Conventions: theory is a
*line*, measurements are *points* with interval bars, the null (random baseline, control band)
is a grey *band* or *hline*, and the step-0 value a dashed *hline*.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Series", "Panel", "render_png", "panel_has_data"]

_KINDS = ("line", "points", "band", "hline")


@dataclass(frozen=True)
class Series:
    """One thing drawn on a panel.

    Attributes:
        label: legend text.
        kind: ``line`` (theory), ``points`` (measurement, with optional ``lo``/``hi`` interval),
            ``band`` (``lo``..``hi`` shaded over ``x``), ``hline`` (``y[0]`` across the panel).
        x, y, lo, hi: coordinates, all the same length (``lo``/``hi`` may be empty).
        style: ``"reference"`` draws an hline dashed (step-0 values, null lines); ``"tick"`` draws
            a line's values as short horizontal dashes (theory at categorical x).
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


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def panel_has_data(panel: Panel) -> bool:
    """True when the panel has at least one finite measured point or band value."""
    for s in panel.series:
        if s.kind in ("points", "band") and (_finite(s.y) or _finite(s.lo)):
            return True
    return False


_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def render_png(panels: Sequence[Panel], *, width: float = 5.2, height: float = 3.6, dpi: int = 90,
               ncols: int | None = None) -> bytes:
    """Draw ``panels`` in a grid (side by side unless ``ncols`` is given); return PNG bytes (Agg)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    if not panels:
        raise ValueError("a figure needs at least one panel")
    ncols = min(ncols or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), dpi=dpi,
                             squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    try:
        for ax, panel in zip(axes.flat, panels):
            color_i = 0
            for s in panel.series:
                x = np.asarray(s.x, dtype=float)
                y = np.asarray(s.y, dtype=float)
                if s.kind == "hline":
                    if len(y) and math.isfinite(y[0]):
                        ax.axhline(y[0], color="0.35" if s.style == "reference" else "0.55",
                                   linestyle="--" if s.style == "reference" else ":",
                                   linewidth=1.2, label=s.label)
                    continue
                if s.kind == "band":
                    lo = np.asarray(s.lo, dtype=float)
                    hi = np.asarray(s.hi, dtype=float)
                    order = np.argsort(x)
                    ax.fill_between(x[order], lo[order], hi[order], color="0.6", alpha=0.3,
                                    linewidth=0, label=s.label)
                    continue
                if s.color is not None:
                    color = _COLORS[s.color % len(_COLORS)]
                else:
                    color = _COLORS[color_i % len(_COLORS)]
                    color_i += 1
                if s.kind == "line" and s.style == "tick":  # theory at categorical x: a dash each
                    ax.plot(x, y, "_", color=color, markersize=22, markeredgewidth=2.2, label=s.label)
                elif s.kind == "line":
                    order = np.argsort(x)
                    ax.plot(x[order], y[order], "-", color=color, linewidth=1.6, label=s.label)
                else:
                    if len(s.lo) == len(y) and len(s.hi) == len(y) and len(y):
                        lo = np.asarray(s.lo, dtype=float)
                        hi = np.asarray(s.hi, dtype=float)
                        with np.errstate(invalid="ignore"):
                            yerr = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])
                        yerr = np.where(np.isfinite(yerr), yerr, 0.0)
                        ax.errorbar(x, y, yerr=yerr, fmt="o", color=color, markersize=4.5,
                                    capsize=2.5, linewidth=1.0, label=s.label)
                    else:
                        ax.plot(x, y, "o", color=color, markersize=4.5, label=s.label)
            if panel.xscale == "symlog":  # training steps: 0, then log-spaced
                ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
                xs = [float(v) for s in panel.series for v in s.x if v == v]
                if xs:
                    ax.set_xlim(left=-0.15, right=max(xs) * 1.3 + 0.5)
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
            ax.set_title(panel.title, fontsize=10)
            ax.set_xlabel(panel.xlabel, fontsize=9)
            ax.set_ylabel(panel.ylabel, fontsize=9)
            ax.tick_params(labelsize=8)
            ax.grid(True, alpha=0.25)
            handles, labels = ax.get_legend_handles_labels()
            if handles:
                ax.legend(fontsize=6.5 if len(handles) > 5 else 7, loc="best", framealpha=0.8,
                          ncol=2 if len(handles) > 5 else 1)
        # fixed margins in inches (tight_layout would cost a second full draw per figure)
        fw, fh = width * ncols, height * nrows
        fig.subplots_adjust(left=0.75 / fw, right=1 - 0.2 / fw, bottom=0.85 / fh, top=1 - 0.6 / fh,
                            wspace=0.85 / width, hspace=1.5 / height)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()
    finally:
        plt.close(fig)

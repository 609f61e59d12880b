"""Render ``report.html`` (self-contained) and ``report.md`` (its twin) from a run directory.

``render_report(run_dir)`` reads only what the stages stored (see
:mod:`tangentlab.report.load`), decides each verdict row (:mod:`tangentlab.report.verdicts`),
draws each row's figure to ``figures/<row>.png``, and writes:

- ``report.html``: one file, figures embedded as base64 PNG, inline CSS, no scripts and no
  external resources, so it opens in any browser, offline;
- ``report.md``: the same content, figures as relative links to ``figures/*.png``.

Layout, so the page reads in one minute: a banner (a quick run; a failed or skipped stage), the
summary (device, full run path, wall and CPU time, the command that reproduces the run), then two
verdict tables, *calibration of the method* and *predictions of the account*, then one
sub-table per row (a line per (model, site), or per recorded check with its kind of error) with
the overall rule and the figure. :data:`SECTIONS` lists the section ids; each is always present.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tangentlab.progress import log
from tangentlab.report.figures import panel_has_data, render_png
from tangentlab.report.html_page import render_html
from tangentlab.report.load import RunData
from tangentlab.report.md_page import render_markdown
from tangentlab.report.page import SECTIONS, banner, limitations, reproduce_command, summary_facts
from tangentlab.report.verdicts import RowSpec, Verdict, build_verdicts
from tangentlab.runs import atomic_write_bytes, atomic_write_text

__all__ = ["SECTIONS", "SUMMARY_KEYS", "RenderResult", "render_report", "summary_figure", "limitations",
           "banner", "summary_facts", "reproduce_command"]


@dataclass
class RenderResult:
    """What :func:`render_report` wrote."""

    html: Path
    markdown: Path
    figures: dict[str, Path] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    row_errors: list[str] = field(default_factory=list)



# ----------------------------------------------------------------------------------- main

def render_report(run_dir: str | Path, *, rows: list[RowSpec] | None = None,
                  measures: dict[str, str | Path] | None = None) -> RenderResult:
    """Write ``report.html``, ``report.md`` and ``figures/*.png`` into ``run_dir``.

    Reads stored results only. A verdict rule that raises does not stop the report: the row is
    shown as ``not run`` with the error, and the error is listed in ``RenderResult.row_errors``.

    Args:
        run_dir: a reproduce run directory.
        rows: the verdict rows to build (default: every row of :data:`ROWS`).
        measures: external measurement runs ``{NAME: DIR}`` to add (beside those the run's config
            lists under ``external_measures``); each gets its own (model, site) sub-rows.
    """
    data = RunData.open(run_dir, measures=measures)
    run_dir = data.run_dir
    verdicts = build_verdicts(data, rows)
    fig_dir = run_dir / "figures"
    if fig_dir.exists():
        shutil.rmtree(fig_dir)
    figures: dict[str, Path] = {}
    pngs: dict[str, bytes] = {}
    for v in verdicts:
        panels = [p for p in v.panels if panel_has_data(p)]
        if not panels:
            continue
        png = render_png(panels, ncols=min(len(panels), 3))
        path = atomic_write_bytes(fig_dir / f"{v.key}.png", png)
        figures[v.key] = path
        pngs[v.key] = png
    for v in verdicts:  # PNGs a stage stored itself (the validation battery): copied as they are
        for src in v.figures:
            dest = fig_dir / f"{v.key}--{src.name}"
            atomic_write_bytes(dest, src.read_bytes())
            figures[f"{v.key}--{src.name}"] = dest
    lim = limitations(data, verdicts)
    html_text = render_html(data, verdicts, pngs, lim)
    md_text = render_markdown(data, verdicts, figures, lim)
    html_path = atomic_write_text(run_dir / "report.html", html_text)
    md_path = atomic_write_text(run_dir / "report.md", md_text)
    errors = [f"{v.key}: {v.error.splitlines()[0]}" for v in verdicts if v.error]
    log(f"report written: {html_path} ({len(verdicts)} rows, {len(figures)} figures)")
    return RenderResult(html=html_path, markdown=md_path, figures=figures, verdicts=verdicts,
                        row_errors=errors)


#: The rows the summary figure shows by default: one per pillar's headline prediction.
SUMMARY_KEYS: tuple[str, ...] = ("visibility", "attenuation", "enrichment", "river-valley")


def summary_figure(run_dir: str | Path, path: str | Path, *, keys: tuple[str, ...] = SUMMARY_KEYS,
                   ncols: int = 3, measures: dict[str, str | Path] | None = None) -> Path:
    """One PNG with the figures of a run's headline rows (default :data:`SUMMARY_KEYS`).

    Each panel is titled with its row's status word (e.g. for the README). Drawn from the stored
    results, like the report; saved as a palette PNG so it stays small (a few hundred KB).
    """
    import io
    from dataclasses import replace

    from PIL import Image  # matplotlib's own dependency

    from tangentlab.errors import DataError

    data = RunData.open(run_dir, measures=measures)
    panels = []
    for v in build_verdicts(data):
        if v.key in keys:
            panels += [replace(p, title=f"{p.title}\n[{v.status}]") for p in v.panels if panel_has_data(p)]
    if not panels:
        raise DataError(f"no row among {', '.join(keys)} has measured data in {data.run_dir}")
    png = render_png(panels, ncols=min(ncols, len(panels)), width=4.6, height=3.5, dpi=80)
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128).save(out, format="PNG", optimize=True)
    return atomic_write_bytes(Path(path), out.getvalue())

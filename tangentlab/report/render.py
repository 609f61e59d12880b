"""Render ``report.html`` (self-contained) and ``report.md`` (its twin) from a run directory.

``render_report(run_dir)`` opens the run once into plain data (:mod:`tangentlab.report.load`:
only what the stages stored), decides each verdict row from it (:mod:`tangentlab.report.verdicts`),
builds the one page model (:func:`tangentlab.report.page.build`), draws each row's figure to
``figures/<row>.png``, and writes the page model out twice (two thin emitters):

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

import os
from dataclasses import dataclass, field
from pathlib import Path

from tangentlab.progress import log
from tangentlab.report import page as P
from tangentlab.report import theory_numbers
from tangentlab.report.figures import panel_has_data, render_png
from tangentlab.report.html_page import render_html
from tangentlab.report.load import RunData
from tangentlab.report.md_page import render_markdown
from tangentlab.report.page import SECTIONS, external_key
from tangentlab.report.swap import FIGURES_DIR, staged_report
from tangentlab.report.verdicts import RowSpec, Verdict, build_verdicts
from tangentlab.runs import atomic_write_bytes, atomic_write_text

__all__ = ["SECTIONS", "SUMMARY_KEYS", "RenderResult", "render_report", "produce", "summary_figure",
           "external_key"]


@dataclass
class RenderResult:
    """What :func:`render_report` wrote."""

    html: Path
    markdown: Path
    figures: dict[str, Path] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    row_errors: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------- main

def _check_out(target: Path, run_dir: Path) -> None:
    """``--out`` must be new, empty, this run, or a folder holding only an earlier report."""
    from tangentlab.errors import OutputPathError

    if not target.exists():
        return
    if not target.is_dir():
        raise OutputPathError(f"--out {str(target)!r} is a file; give a folder for the report")
    if target.resolve() == run_dir.resolve():
        return
    names = {p.name for p in target.iterdir() if not p.name.startswith(".")}
    if not names or "report.html" in names and names <= {"report.html", "report.md", FIGURES_DIR}:
        return
    raise OutputPathError(
        f"--out {str(target)!r} holds other files ({', '.join(sorted(names)[:4])}); the report "
        "writes report.html, report.md and figures/ there: give a new or empty folder, or one "
        "holding only an earlier report")


def produce(run_dir: str | Path) -> RenderResult:
    """The report producer: render ``run_dir``'s report; a verdict rule that raised is an error.

    Raises:
        StageError: the report was written, but some verdict rules raised (named in the message).
    """
    from tangentlab.errors import StageError

    result = render_report(run_dir)
    if result.row_errors:
        raise StageError("the report was written, but these verdict rules raised: "
                         + "; ".join(result.row_errors))
    return result


def render_report(run_dir: str | Path, *, rows: list[RowSpec] | None = None,
                  measures: dict[str, str | Path] | None = None, out: str | Path | None = None,
                  pool: bool = False, validation: str | Path | None = None) -> RenderResult:
    """Write ``report.html``, ``report.md`` and ``figures/*.png`` into ``out`` (default ``run_dir``).

    Reads stored results only. A verdict rule that raises does not stop the report: the row is
    shown as ``not run`` with the error, and the error is listed in ``RenderResult.row_errors``.
    Everything is rendered into a staging folder first and swapped in at the end
    (:mod:`tangentlab.report.swap`): a failed render leaves the previous report and figures as
    they were.

    Args:
        run_dir: a reproduce run directory.
        rows: the verdict rows to build (default: every row of :data:`ROWS`).
        measures: external measurement runs ``{NAME: DIR}`` to add (beside those the run's config
            lists under ``external_measures``); each gets its own (model, site) sub-rows and
            panels, apart from our own verdicts.
        out: write the report there instead of into ``run_dir`` (links to the run's stage
            folders are made relative to it).
        pool: let the external runs' units decide the empirical rows together with ours
            (default: they are shown apart and never change our verdicts).
        validation: an end-to-end validation run to gate the prediction rows on (default: the
            run's own ``validate/end-to-end``; see :mod:`tangentlab.report.gating`).

    Raises:
        OutputPathError: the target folder cannot be written (nothing was changed).
        DataError: the run directory or a table it holds is missing or damaged.
    """
    data = RunData.open(run_dir, measures=measures, pool=pool, validation=validation)
    run_dir = data.run_dir
    target = Path(out) if out is not None else run_dir
    base = "" if out is None else os.path.relpath(run_dir.resolve(), target.resolve())
    base = "" if base in ("", ".") else base + "/"
    if out is not None:
        _check_out(target, run_dir)
    verdicts = build_verdicts(data, rows)
    page = P.build(data, verdicts)
    figures: dict[str, Path] = {}
    pngs: dict[str, bytes] = {}
    figures_at = target / FIGURES_DIR
    with staged_report(target) as staging:
        fig_dir = staging / FIGURES_DIR
        for v in verdicts:
            for key, all_panels in ((v.key, v.panels), (external_key(v.key), v.external_panels)):
                panels = [p for p in all_panels if panel_has_data(p)]
                if not panels:
                    continue
                png = render_png(panels, ncols=min(len(panels), 3))
                atomic_write_bytes(fig_dir / f"{key}.png", png)
                figures[key] = figures_at / f"{key}.png"
                pngs[key] = png
        for v in verdicts:  # PNGs a stage stored itself (the validation battery): copied as they are
            for src in v.figures:
                name = f"{v.key}--{src.name}"
                atomic_write_bytes(fig_dir / name, src.read_bytes())
                figures[name] = figures_at / name
        theory_numbers.write_figures(page.bridge, fig_dir, figures_at, pngs, figures)  # issue 20
        atomic_write_text(staging / "report.html", render_html(page, pngs, link_base=base))
        atomic_write_text(staging / "report.md", render_markdown(page, figures, link_base=base))
    html_path, md_path = target / "report.html", target / "report.md"
    errors = [f"{v.key}: {v.error.splitlines()[0]}" for v in verdicts if v.error]
    log(f"report written: {html_path} ({len(verdicts)} rows, {len(figures)} figures)")
    return RenderResult(html=html_path, markdown=md_path, figures=figures, verdicts=verdicts,
                        row_errors=errors)


#: The rows the summary figure shows by default: one per pillar's headline prediction.
SUMMARY_KEYS: tuple[str, ...] = ("visibility", "attenuation", "enrichment", "river-valley")


def summary_figure(run_dir: str | Path, path: str | Path, *, keys: tuple[str, ...] = SUMMARY_KEYS,
                   ncols: int = 3, measures: dict[str, str | Path] | None = None,
                   validation: str | Path | None = None) -> Path:
    """One PNG with the figures of a run's headline rows (default :data:`SUMMARY_KEYS`).

    Each panel is titled with its row's status word (e.g. for the README). Drawn from the stored
    results, like the report; saved as a palette PNG so it stays small (a few hundred KB).
    """
    import io
    from dataclasses import replace

    from PIL import Image  # matplotlib's own dependency

    from tangentlab.errors import DataError

    data = RunData.open(run_dir, measures=measures, validation=validation)
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

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

import base64
import html
import json
import shlex
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tangentlab.progress import log
from tangentlab.report import rules as R
from tangentlab.report.checks import error_kind
from tangentlab.report.figures import panel_has_data, render_png
from tangentlab.report.load import RunData
from tangentlab.report.paper import PAPER_CITATION
from tangentlab.report.verdicts import SECTION_TITLES, RowSpec, Verdict, build_verdicts
from tangentlab.runs import atomic_write_bytes, atomic_write_text

__all__ = ["SECTIONS", "SUMMARY_KEYS", "RenderResult", "render_report", "summary_figure", "limitations",
           "banner", "summary_facts", "reproduce_command"]

#: Section ids (HTML ``id`` attributes, and ``##`` headings in the Markdown twin), in order.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("calibration", SECTION_TITLES["calibration"]),
    ("predictions", SECTION_TITLES["prediction"]),
    ("details", "Sub-tables and figures"),
    ("stages", "Stages"),
    ("theory", "Theory checks"),
    ("limitations", "Limitations"),
    ("provenance", "Provenance"),
)

_STATUS_CLASS = {
    R.SUPPORTED: "ok",
    R.NOT_SUPPORTED: "bad",
    R.INCONCLUSIVE: "unk",
    R.NOT_RUN: "off",
}


@dataclass
class RenderResult:
    """What :func:`render_report` wrote."""

    html: Path
    markdown: Path
    figures: dict[str, Path] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    row_errors: list[str] = field(default_factory=list)


QUICK_TEXT = ("This is a --quick run: tiny models trained for a few steps and quick synthetic "
              "settings. Its numbers show the pipeline works end to end; they are too small to "
              "settle the science. Run `tangentlab reproduce` without --quick for the real test.")


def _is_quick(data: RunData) -> bool:
    cfg = data.manifest.get("config") or {}
    return bool(data.manifest.get("quick") or (isinstance(cfg, dict) and cfg.get("quick")))


def banner(data: RunData) -> list[str]:
    """The lines of the banner at the top: a quick run, and every failed or skipped stage."""
    out = []
    if _is_quick(data):
        out.append(QUICK_TEXT)
    for name, rec in data.records.items():
        if rec.status == "failed":
            out.append(f"Stage {name} FAILED: {rec.error}. Rows built on it read 'not run'.")
        elif rec.status == "skipped":
            out.append(f"Stage {name} was SKIPPED: {rec.reason}.")
    return out


def limitations(data: RunData, verdicts: list[Verdict]) -> list[str]:
    """The limitations section, generated from what did not run or did not decide."""
    out: list[str] = []
    for name, rec in data.records.items():
        if name == "report":
            continue
        if rec.status == "failed":
            out.append(f"Stage {name} failed ({rec.error}); the rows built on it are marked 'not run'.")
        elif rec.status == "skipped":
            out.append(f"Stage {name} was skipped: {rec.reason}.")
        elif rec.status != "done":
            out.append(f"Stage {name} did not finish (status {rec.status}).")
    for v in verdicts:
        if v.depends_on:
            out.append(f"'{v.title}' depends on '{v.depends_on}': it is not an independent verdict.")
        if v.status == R.INCONCLUSIVE and v.units:
            undecided = [u.label for u in v.units if u.status == R.INCONCLUSIVE]
            out.append(f"'{v.title}' is inconclusive for {', '.join(undecided) or 'its unmeasured stages'} "
                       "(the reasons are in its sub-table).")
        elif v.status == R.INCONCLUSIVE:
            out.append(f"'{v.title}' is inconclusive: {v.reason}.")
        elif v.status == R.NOT_RUN and not any(
                data.records.get(s.stage) is not None and data.records[s.stage].status in ("failed", "skipped")
                for s in v.sources):  # failed and skipped stages are listed above already
            out.append(f"'{v.title}' was not run: {v.reason}.")
        if v.error:
            out.append(f"'{v.title}': the verdict rule raised an error ({v.error.splitlines()[0]}).")
    cfg = data.manifest.get("config") or {}
    if _is_quick(data):
        out.append(QUICK_TEXT)
    preset = cfg.get("preset")
    if preset:
        out.append(f"The empirical rows come from our own {preset} encoder and decoder trained from "
                   f"scratch on the {cfg.get('corpus', 'default')} corpus, not from the paper's "
                   "released checkpoint series (Pythia, SmolLM2, OLMo, EuroBERT, ...), which cannot be "
                   "downloaded here.")
    out.append("The paper's full text was not available: its findings are quoted qualitatively "
               "(no table values survive), so agreement is judged on direction and significance, "
               "not on magnitudes.")
    return out


# ----------------------------------------------------------------------------------- helpers

def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _md(x: object) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _theory_rows(data: RunData) -> list[tuple[str, str, str, str, str, str]]:
    """(derivation, check, kind, pass/FAIL, residual, kind of error) of every theory check."""
    if data.status("theory") != "done":
        return []
    try:
        ver = data.theory()
    except Exception:
        return []
    rows = []
    for d in ver.get("derivations", []):
        for c in d.get("checks", []):
            res = c.get("residual")
            rows.append((str(d.get("name")), str(c.get("name")), str(c.get("kind", "")),
                         "pass" if c.get("passed") else "FAIL",
                         "" if res is None else f"{float(res):.3g}" if isinstance(res, (int, float)) else str(res),
                         error_kind(c, theory=True)))
    return rows


def _stage_rows(data: RunData) -> list[tuple[str, str, str, str, str, str]]:
    order = data.manifest.get("stage_order") or list(data.records)
    rows = []
    for name in order:
        rec = data.records.get(name)
        if rec is None:
            continue
        status = rec.status
        if name == "report" and status == "running":
            status = "this report"
        secs = "" if rec.seconds is None else f"{rec.seconds:.1f}"
        if rec.cpu_seconds is not None:
            secs += f" ({rec.cpu_seconds:.1f} CPU)"
        note = rec.error or rec.reason or ""
        if rec.reused:
            note = ("reused from an earlier invocation; " + note).strip("; ")
        link = rec.outputs[0] if rec.outputs else name
        rows.append((name, status, secs, rec.config_hash, link, note))
    return rows


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;max-width:1250px;
color:#222;line-height:1.45;padding:0 1em}
h1{font-size:1.7em;margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;width:100%;font-size:.88em;margin:.6em 0}
th,td{border:1px solid #ccc;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f3f3f3}
.status{font-weight:600;padding:.1em .45em;border-radius:.3em;white-space:nowrap}
.ok{background:#d8f0d8;color:#185c18}.bad{background:#f6d2d2;color:#8a1414}
.unk{background:#f8ecc8;color:#6b5200}.off{background:#e4e4e4;color:#555}
.row{border:1px solid #ddd;border-radius:.4em;padding:.6em 1em;margin:1em 0}
.row h3{margin:.2em 0 .4em 0}.muted{color:#666;font-size:.9em}
img{max-width:100%;height:auto;border:1px solid #eee}
code,pre{background:#f6f6f6;font-size:.85em}pre{padding:.6em;overflow-x:auto}
ul.nums{margin:.3em 0;padding-left:1.3em}
"""


def _status_html(status: str) -> str:
    return f'<span class="status {_STATUS_CLASS.get(status, "off")}">{_e(status)}</span>'


def _source_html(v: Verdict) -> str:
    return "<br>".join(
        (f'<a href="{_e(s.path)}/">{_e(s.path)}</a> <span class="muted">config {_e(s.config_hash or "?")}, '
         f'seed {_e(s.seed if s.seed is not None else "?")}</span>') if s.present
        else f'{_e(s.path)} <span class="muted">(no such directory)</span>'
        for s in v.sources)


def _source_md(v: Verdict) -> str:
    return "; ".join((f"[{s.path}]({s.path}/) (config {s.config_hash or '?'}, "
                      f"seed {s.seed if s.seed is not None else '?'})") if s.present
                     else f"{s.path} (no such directory)" for s in v.sources)


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
    html_text = _render_html(data, verdicts, pngs, lim)
    md_text = _render_md(data, verdicts, figures, lim)
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


def _devices(data: RunData) -> str:
    """The device each stage's own manifest recorded (not the requested ``auto``)."""
    by: dict[str, list[str]] = {}
    stages = list(data.records) + data.external_stages()
    for name in stages:
        if name == "report" or data.status(name) != "done":
            continue
        dev = data.stage_manifest_or_empty(name).get("device")
        if dev:
            by.setdefault(str(dev), []).append(name)
    if not by:
        requested = data.manifest.get("device", "?")
        return f"not recorded by any stage (requested: {requested})"
    if len(by) == 1:
        dev, names = next(iter(by.items()))
        return f"{dev} (all {len(names)} stages that recorded a device)"
    return "; ".join(f"{dev} ({', '.join(names)})" for dev, names in by.items())


def _wall_seconds(data: RunData) -> float | None:
    m = data.manifest
    for key in ("wall_seconds", "wall_s"):
        v = m.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    t = m.get("timings_s")
    if isinstance(t, dict):
        for key in ("wall", "total"):
            v = t.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
    return None


def reproduce_command(data: RunData) -> str:
    """The command line that reproduces the run.

    The recorded argv of a ``tangentlab reproduce`` call, else one built from the recorded config
    (seed, quick, device), writing to this path.
    """
    argv = data.manifest.get("argv")
    path = str(data.run_dir.resolve())
    if isinstance(argv, list) and len(argv) > 1 and argv[1] == "reproduce":
        args = [str(a) for a in argv[2:]]
        cmd = ["tangentlab", "reproduce"]
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("--out", "--runs-root"):
                skip = True
                continue
            if a.startswith(("--out=", "--runs-root=")) or a == "--resume":
                continue
            cmd.append(a)
        return shlex.join([*cmd, "--out", path])
    cfg = data.manifest.get("config") if isinstance(data.manifest.get("config"), dict) else {}
    cmd = ["tangentlab", "reproduce"]
    if cfg.get("quick") or data.manifest.get("quick"):
        cmd.append("--quick")
    if "seed" in cfg:
        cmd += ["--seed", str(cfg["seed"])]
    if cfg.get("device"):
        cmd += ["--device", str(cfg["device"])]
    cmd += ["--out", path]
    return shlex.join(cmd) + "  (built from the recorded config; save the Provenance config as " \
                              "TOML and add --config FILE for every other setting)"


def summary_facts(data: RunData) -> list[tuple[str, str]]:
    """The summary table: provenance, device, times and the reproducing command."""
    m = data.manifest
    git = m.get("git") or {}
    recs = [r for n, r in data.records.items() if n != "report"]
    total = sum((r.seconds or 0.0) for r in recs)
    cpu = [r.cpu_seconds for r in recs if r.cpu_seconds is not None]
    wall = _wall_seconds(data)
    commit = git.get("commit") or "unknown"
    if git.get("dirty"):
        commit += " (with uncommitted changes)"
    facts = [
        ("run directory", str(data.run_dir.resolve())),
        ("started", str(m.get("created", "?"))),
        ("mode", "quick" if _is_quick(data) else "full"),
        ("device", _devices(data)),
        ("wall time", f"{wall:.1f} s" if wall is not None
         else f"not recorded; the stages took {total:.1f} s together"),
        ("CPU time", f"{sum(cpu):.1f} s over {len(cpu)} stages" if cpu else "not recorded"),
        ("reproduce with", reproduce_command(data)),
        ("tangentlab", str(m.get("tangentlab_version", "?"))),
        ("git commit", commit),
        ("config hash", str(m.get("config_hash", "?"))),
        ("seed", str((m.get("seeds") or {}).get("seed", "?"))),
    ]
    if data.externals:
        facts.append(("external measurements", "; ".join(f"{k} = {v}" for k, v in data.externals.items())))
    return facts


def _counts_text(verdicts: list[Verdict], section: str) -> str:
    rows = [v for v in verdicts if v.section == section and not v.depends_on]
    dep = [v for v in verdicts if v.section == section and v.depends_on]
    c = Counter(v.status for v in rows)
    txt = ", ".join(f"{c.get(w, 0)} {w}" for w in R.STATUS_WORDS) + f" of {len(rows)}"
    if dep:
        txt += f" (+{len(dep)} dependent row{'s' if len(dep) > 1 else ''} not counted)"
    return txt


def _compact(v: Verdict) -> str:
    """One scannable line per row for the two tables."""
    if v.units:
        return "; ".join(f"{u.label}: {u.status}" for u in v.units)
    if v.checks and v.key != "theory":
        failed = [c.name for c in v.checks if not c.passed]
        txt = f"{len(v.checks) - len(failed)} of {len(v.checks)} checks passed"
        return txt + (": failed " + ", ".join(failed) if failed else "")
    return v.reason


def _overall(v: Verdict) -> str:
    """The overall line under a sub-table.

    For per-unit rows, how the units combine (their reasons are in the sub-table above); otherwise
    the row's reason.
    """
    if not v.units:
        return v.reason
    c = Counter(u.status for u in v.units)
    parts = ", ".join(f"{c[w]} {w}" for w in R.STATUS_WORDS if c.get(w))
    txt = (f"{parts} of {len(v.units)} (model, site) units; supported only if every unit is, not "
           "supported if any unit is not")
    extra = v.reason.split("; also ", 1)
    if len(extra) == 2:
        txt += "; also " + extra[1]
    return txt


def _compact_html(v: Verdict) -> str:
    if v.units:
        return "".join(f'<div class="unit">{_e(u.label)}: {_status_html(u.status)}</div>' for u in v.units)
    return _e(_compact(v))


def _unit_rows(v: Verdict) -> list[tuple[str, str, str, str, str, str]]:
    return [(u.model, u.site, u.status, u.estimate, u.at, u.reason + (f". {u.note}" if u.note else ""))
            for u in v.units]


def _check_rows(v: Verdict) -> list[tuple[str, str, str, str, str]]:
    """(check, what it measures, pass/FAIL, measured vs target, tolerance: kind of error)."""
    return [(c.name, c.what, "pass" if c.passed else "FAIL", f"measured {c.measured} vs target {c.target}",
             (f"{c.tolerance}: " if c.tolerance != "n/a" else "") + c.error_kind)
            for c in v.checks]


_EXTRA_CSS = """
.banner{border:2px solid #c77d00;background:#fff4dc;padding:.6em 1em;border-radius:.4em;margin:1em 0}
.banner.bad{border-color:#a11;background:#fbe3e3}
.banner ul{margin:.2em 0;padding-left:1.2em}
td.num{white-space:nowrap}
.dep{font-size:.8em;color:#6b5200}
td .status{font-size:.85em}
div.unit{white-space:nowrap}
table.facts th{white-space:nowrap;width:12em}
"""


def _render_html(data: RunData, verdicts: list[Verdict], pngs: dict[str, bytes], lim: list[str]) -> str:
    titles = dict(SECTIONS)
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>tangentlab report: {_e(data.run_dir.name)}</title>", f"<style>{_CSS}{_EXTRA_CSS}</style>",
        "</head><body>",
        "<h1>tangentlab: theory against measurement</h1>",
    ]
    lines = banner(data)
    if lines:
        bad = any("FAILED" in x or "SKIPPED" in x for x in lines)
        out.append(f'<div class="banner{" bad" if bad else ""}" id="banner"><b>Read this first.</b><ul>'
                   + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul></div>")
    out.append('<p class="muted">The geometric account of anisotropy in language Transformers, tested '
               f"symbolically, on synthetic manifolds and on real Transformer gradients. Paper: "
               f"{_e(PAPER_CITATION)}.</p>")
    out.append(f'<h2 id="summary">{titles["summary"]}</h2>')
    out.append('<table class="facts">' + "".join(
        f"<tr><th>{_e(k)}</th><td>{'<code>' + _e(v) + '</code>' if k == 'reproduce with' else _e(v)}</td></tr>"
        for k, v in summary_facts(data)) + "</table>")
    out.append("<p><b>Calibration of the method:</b> " + _e(_counts_text(verdicts, "calibration"))
               + ". <b>Predictions of the account:</b> " + _e(_counts_text(verdicts, "prediction")) + ".</p>")
    for sid, section in (("calibration", "calibration"), ("predictions", "prediction")):
        out.append(f'<h2 id="{sid}">{titles[sid]}</h2>')
        if section == "calibration":
            out.append('<p class="muted">Does the instrument measure what it claims? A failure here '
                       "says the method is off, not that the paper is wrong.</p>")
        else:
            out.append('<p class="muted">The paper\'s claims, measured on trained Transformers; each '
                       "(model, site) is a unit, combined by the rule in the sub-table below.</p>")
        out.append("<table><tr><th>#</th><th>row</th><th>status</th><th>per unit / checks</th>"
                   "<th>the paper reported</th><th>source</th></tr>")
        for i, v in enumerate((v for v in verdicts if v.section == section), 1):
            dep = (f'<br><span class="dep">depends on {_e(v.depends_on)}: not an independent verdict</span>'
                   if v.depends_on else "")
            out.append(
                f'<tr><td>{i}</td><td><a href="#row-{_e(v.key)}"><b>{_e(v.title)}</b></a>{dep}</td>'
                f"<td>{_status_html(v.status)}</td><td>{_compact_html(v)}</td>"
                f"<td>{_e(v.paper)}</td><td>{_source_html(v)}</td></tr>")
        out.append("</table>")
    # details: one sub-table per row
    out.append(f'<h2 id="details">{titles["details"]}</h2>')
    out.append('<p class="muted">Theory is drawn as a line, measurements as points with their '
               "confidence intervals; where there is no theory curve (the empirical rows), the null "
               "(controls, shaded: their min-max range) and the step-0 value (dashed) are the references. "
               "A <i>range</i> is a spread over controls or checkpoints, never a confidence interval.</p>")
    for v in verdicts:
        out.append(f'<div class="row" id="row-{_e(v.key)}"><h3>{_e(v.title)} {_status_html(v.status)}</h3>')
        out.append(f"<p><b>{'Prediction' if v.section == 'prediction' else 'Checks'}.</b> {_e(v.prediction)}</p>")
        if v.depends_on:
            out.append(f'<p class="dep">This row depends on the {_e(v.depends_on)} row: it is not an '
                       "independent verdict.</p>")
        if v.units:
            out.append("<table><tr><th>model</th><th>site</th><th>status</th><th>estimate and interval</th>"
                       "<th>checkpoints used</th><th>why, and notes</th></tr>")
            for model, site, st, est, at, note in _unit_rows(v):
                out.append(f"<tr><td>{_e(model)}</td><td>{_e(site)}</td><td>{_status_html(st)}</td>"
                           f"<td>{_e(est)}</td><td>{_e(at)}</td><td>{_e(note)}</td></tr>")
            out.append("</table>")
        if v.checks:
            out.append("<table><tr><th>check</th><th>result</th><th>measured vs target</th>"
                       "<th>tolerance and kind of error</th></tr>")
            for name, what, res, mt, tol in _check_rows(v):
                what_html = f'<br><span class="muted">{_e(what)}</span>' if what else ""
                out.append(f"<tr><td>{_e(name)}{what_html}</td><td><span class=\"status "
                           f"{'ok' if res == 'pass' else 'bad'}\">{_e(res)}</span></td>"
                           f"<td>{_e(mt)}</td><td>{_e(tol)}</td></tr>")
            out.append("</table>")
        out.append(f"<p><b>Overall: {_status_html(v.status)}.</b> {_e(_overall(v))}</p>")
        out.append(f'<p><b>Rule.</b> <span class="muted">{_e(v.rule)}</span></p>')
        if v.numbers:
            out.append('<ul class="nums">' + "".join(f"<li><b>{_e(k)}</b>: {_e(val)}</li>" for k, val in v.numbers)
                       + "</ul>")
        out.append(f"<p><b>The paper reported.</b> {_e(v.paper)}</p>")
        out.append(f"<p><b>Source.</b> {_source_html(v)}; test: {_e(v.test)}</p>")
        if v.key in pngs:
            b64 = base64.b64encode(pngs[v.key]).decode("ascii")
            out.append(f'<img alt="{_e(v.title)}" src="data:image/png;base64,{b64}">')
        elif not v.figures:
            out.append('<p class="muted">No figure: nothing was measured for this row.</p>')
        for src in v.figures:
            b64 = base64.b64encode(src.read_bytes()).decode("ascii")
            out.append(f'<img alt="{_e(v.title)}: {_e(src.name)}" src="data:image/png;base64,{b64}">')
        if v.error:
            out.append(f"<pre>{_e(v.error)}</pre>")
        out.append("</div>")
    # stages
    out.append(f'<h2 id="stages">{titles["stages"]}</h2>')
    out.append("<table><tr><th>stage</th><th>status</th><th>seconds (CPU)</th><th>config hash</th>"
               "<th>output</th><th>note</th></tr>")
    for name, status, secs, h, link, note in _stage_rows(data):
        cls = {"done": "ok", "failed": "bad", "skipped": "off"}.get(status, "unk")
        out.append(f'<tr><td>{_e(name)}</td><td><span class="status {cls}">{_e(status)}</span></td>'
                   f'<td class="num">{_e(secs)}</td><td><code>{_e(h)}</code></td>'
                   f'<td><a href="{_e(link)}">{_e(link)}</a></td><td>{_e(note)}</td></tr>')
    out.append("</table>")
    # theory
    out.append(f'<h2 id="theory">{titles["theory"]}</h2>')
    trows = _theory_rows(data)
    if trows:
        out.append("<table><tr><th>derivation</th><th>check</th><th>kind</th><th>result</th>"
                   "<th>residual</th><th>kind of error</th></tr>")
        for d, c, k, p, r, ek in trows:
            out.append(f"<tr><td>{_e(d)}</td><td>{_e(c)}</td><td>{_e(k)}</td>"
                       f'<td><span class="status {"ok" if p == "pass" else "bad"}">{_e(p)}</span></td>'
                       f"<td>{_e(r)}</td><td>{_e(ek)}</td></tr>")
        out.append("</table>")
    else:
        out.append(f"<p>No theory checks stored: {_e(data.problem('theory') or 'none recorded')}.</p>")
    out.append(f'<h2 id="limitations">{titles["limitations"]}</h2><ul>')
    out.extend(f"<li>{_e(x)}</li>" for x in lim)
    out.append("</ul>")
    out.append(f'<h2 id="provenance">{titles["provenance"]}</h2>')
    out.append("<p>Every number above was read from the stage outputs listed in the Stages table; "
               "<code>tangentlab report RUN_DIR</code> re-renders this page from them without "
               "recomputing. Resolved configuration:</p>")
    out.append(f"<pre>{_e(json.dumps(data.manifest.get('config', {}), indent=2))}</pre>")
    versions = data.manifest.get("versions") or {}
    out.append("<p class=\"muted\">Versions: " + _e(", ".join(f"{k} {v}" for k, v in versions.items() if v))
               + "</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _render_md(data: RunData, verdicts: list[Verdict], figures: dict[str, Path], lim: list[str]) -> str:
    titles = dict(SECTIONS)
    out: list[str] = ["# tangentlab: theory against measurement", ""]
    lines = banner(data)
    if lines:
        out += ["> **Read this first.**", ">"] + [f"> - {x}" for x in lines] + [""]
    out += ["The geometric account of anisotropy in language Transformers, tested symbolically, on "
            f"synthetic manifolds and on real Transformer gradients. Paper: {PAPER_CITATION}.", "",
            f"## {titles['summary']}", "", "| | |", "|---|---|"]
    out += [f"| {_md(k)} | {'`' + v + '`' if k == 'reproduce with' else _md(v)} |" for k, v in summary_facts(data)]
    out += ["", f"**Calibration of the method:** {_counts_text(verdicts, 'calibration')}. "
            f"**Predictions of the account:** {_counts_text(verdicts, 'prediction')}.", ""]
    for sid, section in (("calibration", "calibration"), ("predictions", "prediction")):
        out += [f"## {titles[sid]}", "", "| # | row | status | per unit / checks | the paper reported | source |",
                "|---|---|---|---|---|---|"]
        for i, v in enumerate((v for v in verdicts if v.section == section), 1):
            dep = f" (depends on {v.depends_on}: not an independent verdict)" if v.depends_on else ""
            out.append(f"| {i} | **{_md(v.title)}**{dep} | **{v.status}** | {_md(_compact(v))} "
                       f"| {_md(v.paper)} | {_md(_source_md(v))} |")
        out.append("")
    out += [f"## {titles['details']}", "",
            "Theory is drawn as a line, measurements as points with their confidence intervals; where "
            "there is no theory curve (the empirical rows), the null (controls, shaded: their min-max "
            "range) and the step-0 value (dashed) are the references. A *range* is a spread over "
            "controls or checkpoints, never a confidence interval.", ""]
    for v in verdicts:
        out += [f"### {v.title}: {v.status}", "",
                f"**{'Prediction' if v.section == 'prediction' else 'Checks'}.** {v.prediction}", ""]
        if v.depends_on:
            out += [f"_This row depends on the {v.depends_on} row: it is not an independent verdict._", ""]
        if v.units:
            out += ["| model | site | status | estimate and interval | checkpoints used | why, and notes |",
                    "|---|---|---|---|---|---|"]
            out += [f"| {_md(a)} | {_md(b)} | **{c}** | {_md(d)} | {_md(e)} | {_md(f)} |"
                    for a, b, c, d, e, f in _unit_rows(v)]
            out.append("")
        if v.checks:
            out += ["| check | result | measured vs target | tolerance and kind of error |", "|---|---|---|---|"]
            out += [f"| {_md(a)}{' (' + _md(w) + ')' if w else ''} | {b} | {_md(c)} | {_md(d)} |"
                    for a, w, b, c, d in _check_rows(v)]
            out.append("")
        out += [f"- **Overall: {v.status}.** {_overall(v)}", f"- **Rule.** {v.rule}"]
        out += [f"- **{k}**: {val}" for k, val in v.numbers]
        out += [f"- **The paper reported.** {v.paper}", f"- **Source.** {_source_md(v)}; test: {v.test}", ""]
        if v.key in figures:
            out += [f"![{v.title}](figures/{figures[v.key].name})", ""]
        elif not v.figures:
            out += ["_No figure: nothing was measured for this row._", ""]
        for src in v.figures:
            out += [f"![{v.title}: {src.name}](figures/{v.key}--{src.name})", ""]
        if v.error:
            out += ["```", v.error, "```", ""]
    out += [f"## {titles['stages']}", "", "| stage | status | seconds (CPU) | config hash | output | note |",
            "|---|---|---|---|---|---|"]
    out += [f"| {_md(n)} | {s} | {secs} | `{h}` | [{_md(link)}]({link}) | {_md(note)} |"
            for n, s, secs, h, link, note in _stage_rows(data)]
    out += ["", f"## {titles['theory']}", ""]
    trows = _theory_rows(data)
    if trows:
        out += ["| derivation | check | kind | result | residual | kind of error |", "|---|---|---|---|---|---|"]
        out += [f"| {_md(d)} | {_md(c)} | {k} | {p} | {r} | {_md(ek)} |" for d, c, k, p, r, ek in trows]
    else:
        out.append(f"No theory checks stored: {data.problem('theory') or 'none recorded'}.")
    out += ["", f"## {titles['limitations']}", ""]
    out += [f"- {x}" for x in lim]
    out += ["", f"## {titles['provenance']}", "",
            "Every number above was read from the stage outputs listed in the Stages table; "
            "`tangentlab report RUN_DIR` re-renders this page from them without recomputing. "
            "Resolved configuration:", "", "```json", json.dumps(data.manifest.get("config", {}), indent=2),
            "```", ""]
    return "\n".join(out)

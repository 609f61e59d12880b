"""Render ``report.html`` (self-contained) and ``report.md`` (its twin) from a run directory.

``render_report(run_dir)`` reads only what the stages stored (see
:mod:`tangentlab.report.load`), decides each verdict row (:mod:`tangentlab.report.verdicts`),
draws each row's figure to ``figures/<row>.png``, and writes:

- ``report.html``: one file, figures embedded as base64 PNG, inline CSS, no scripts and no
  external resources, so it opens in any browser, offline;
- ``report.md``: the same content, figures as relative links to ``figures/*.png``.

Sections (each always present; :data:`SECTIONS` lists their ids): summary, verdicts, details,
stages, theory, limitations, provenance.
"""

from __future__ import annotations

import base64
import html
import json
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tangentlab.progress import log
from tangentlab.report import rules as R
from tangentlab.report.figures import panel_has_data, render_png
from tangentlab.report.load import RunData
from tangentlab.report.paper import PAPER_CITATION
from tangentlab.report.verdicts import RowSpec, Verdict, build_verdicts
from tangentlab.runs import atomic_write_bytes, atomic_write_text

__all__ = ["SECTIONS", "SUMMARY_KEYS", "RenderResult", "render_report", "summary_figure", "limitations"]

#: Section ids (HTML ``id`` attributes, and ``##`` headings in the Markdown twin), in order.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("verdicts", "Verdict table"),
    ("details", "Predictions against measurements"),
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
        if v.status == R.INCONCLUSIVE:
            out.append(f"'{v.title}' is inconclusive: {v.reason}.")
        elif v.status == R.NOT_RUN and not any(v.reason.startswith(f"stage {s.stage}") for s in v.sources):
            out.append(f"'{v.title}' was not decided: {v.reason}.")
        if v.error:
            out.append(f"'{v.title}': the verdict rule raised an error ({v.error.splitlines()[0]}).")
    cfg = data.manifest.get("config") or {}
    if data.manifest.get("quick") or cfg.get("quick"):
        out.append("This is a --quick run: tiny models trained for a few steps and quick synthetic "
                   "settings. Its numbers show the pipeline works end to end; they are too small to "
                   "settle the science. Run `tangentlab reproduce` without --quick for the real test.")
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


def _status_counts(verdicts: list[Verdict]) -> Counter:
    return Counter(v.status for v in verdicts)


def _theory_rows(data: RunData) -> list[tuple[str, str, str, str, str]]:
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
                         "" if res is None else f"{float(res):.3g}" if isinstance(res, (int, float)) else str(res)))
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
        f'<a href="{_e(s.path)}/">{_e(s.path)}</a> <span class="muted">'
        f'config {_e(s.config_hash or "?")}, seed {_e(s.seed if s.seed is not None else "?")}</span>'
        for s in v.sources)


def _source_md(v: Verdict) -> str:
    return "; ".join(f"[{s.path}]({s.path}/) (config {s.config_hash or '?'}, "
                     f"seed {s.seed if s.seed is not None else '?'})" for s in v.sources)


# ----------------------------------------------------------------------------------- main

def render_report(run_dir: str | Path, *, rows: list[RowSpec] | None = None) -> RenderResult:
    """Write ``report.html``, ``report.md`` and ``figures/*.png`` into ``run_dir``.

    Reads stored results only. A verdict rule that raises does not stop the report: the row is
    shown as ``not run`` with the error, and the error is listed in ``RenderResult.row_errors``.
    """
    data = RunData.open(run_dir)
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
        png = render_png(panels)
        path = atomic_write_bytes(fig_dir / f"{v.key}.png", png)
        figures[v.key] = path
        pngs[v.key] = png
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
                   ncols: int = 3) -> Path:
    """One PNG with the figures of the headline rows (default :data:`SUMMARY_KEYS`) of a run,
    each panel titled with its row's status word, e.g. for the README. Drawn from the stored
    results, like the report; saved as a palette PNG so it stays small (a few hundred KB)."""
    import io
    from dataclasses import replace

    from PIL import Image  # matplotlib's own dependency

    from tangentlab.errors import DataError

    data = RunData.open(run_dir)
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


def _header_facts(data: RunData) -> list[tuple[str, str]]:
    m = data.manifest
    git = m.get("git") or {}
    total = sum((r.seconds or 0.0) for n, r in data.records.items() if n != "report")
    commit = git.get("commit") or "unknown"
    if git.get("dirty"):
        commit += " (with uncommitted changes)"
    return [
        ("run directory", data.run_dir.name),
        ("started", str(m.get("created", "?"))),
        ("tangentlab", str(m.get("tangentlab_version", "?"))),
        ("git commit", commit),
        ("config hash", str(m.get("config_hash", "?"))),
        ("seed", str((m.get("seeds") or {}).get("seed", "?"))),
        ("mode", "quick" if m.get("quick") else "full"),
        ("device", str(m.get("device", "?"))),
        ("stage time (s)", f"{total:.1f}"),
    ]


def _render_html(data: RunData, verdicts: list[Verdict], pngs: dict[str, bytes], lim: list[str]) -> str:
    counts = _status_counts(verdicts)
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>tangentlab report: {_e(data.run_dir.name)}</title>", f"<style>{_CSS}</style>",
        "</head><body>",
        "<h1>tangentlab: theory against measurement</h1>",
        '<p class="muted">The geometric account of anisotropy in language Transformers, tested '
        f"symbolically, on synthetic manifolds and on real Transformer gradients. Paper: {_e(PAPER_CITATION)}.</p>",
    ]
    titles = dict(SECTIONS)
    # summary
    out.append(f'<h2 id="summary">{titles["summary"]}</h2>')
    out.append("<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in _header_facts(data))
               + "</table>")
    out.append("<p>" + ", ".join(f"{_status_html(w)} {counts.get(w, 0)}" for w in R.STATUS_WORDS)
               + f" of {len(verdicts)} predictions.</p>")
    # verdict table
    out.append(f'<h2 id="verdicts">{titles["verdicts"]}</h2>')
    out.append("<table><tr><th>#</th><th>prediction</th><th>status</th><th>numbers and test</th>"
               "<th>the paper reported</th><th>source</th></tr>")
    for i, v in enumerate(verdicts, 1):
        out.append(
            f'<tr><td>{i}</td><td><a href="#row-{_e(v.key)}"><b>{_e(v.title)}</b></a><br>'
            f'<span class="muted">{_e(v.prediction)}</span></td><td>{_status_html(v.status)}</td>'
            f"<td>{_e(v.reason)}<br><span class=\"muted\">test: {_e(v.test)}</span></td>"
            f"<td>{_e(v.paper)}</td><td>{_source_html(v)}</td></tr>")
    out.append("</table>")
    # details
    out.append(f'<h2 id="details">{titles["details"]}</h2>')
    out.append('<p class="muted">Theory is drawn as a line, measurements as points with their '
               "intervals; where there is no theory curve (the empirical rows), the null (controls) and "
               "the step-0 value are the reference lines.</p>")
    for v in verdicts:
        out.append(f'<div class="row" id="row-{_e(v.key)}"><h3>{_e(v.title)} {_status_html(v.status)}</h3>')
        out.append(f"<p><b>Prediction.</b> {_e(v.prediction)}</p>")
        out.append(f"<p><b>Why this status.</b> {_e(v.reason)}</p>")
        out.append(f'<p><b>Rule.</b> <span class="muted">{_e(v.rule)}</span></p>')
        if v.numbers:
            out.append('<ul class="nums">' + "".join(f"<li><b>{_e(k)}</b>: {_e(val)}</li>" for k, val in v.numbers)
                       + "</ul>")
        out.append(f"<p><b>The paper reported.</b> {_e(v.paper)}</p>")
        out.append(f"<p><b>Source.</b> {_source_html(v)}</p>")
        if v.key in pngs:
            b64 = base64.b64encode(pngs[v.key]).decode("ascii")
            out.append(f'<img alt="{_e(v.title)}" src="data:image/png;base64,{b64}">')
        else:
            out.append('<p class="muted">No figure: nothing was measured for this row.</p>')
        if v.error:
            out.append(f"<pre>{_e(v.error)}</pre>")
        out.append("</div>")
    # stages
    out.append(f'<h2 id="stages">{titles["stages"]}</h2>')
    out.append("<table><tr><th>stage</th><th>status</th><th>seconds</th><th>config hash</th>"
               "<th>output</th><th>note</th></tr>")
    for name, status, secs, h, link, note in _stage_rows(data):
        cls = {"done": "ok", "failed": "bad", "skipped": "off"}.get(status, "unk")
        out.append(f'<tr><td>{_e(name)}</td><td><span class="status {cls}">{_e(status)}</span></td>'
                   f'<td>{_e(secs)}</td><td><code>{_e(h)}</code></td><td><a href="{_e(link)}">{_e(link)}</a></td>'
                   f"<td>{_e(note)}</td></tr>")
    out.append("</table>")
    # theory
    out.append(f'<h2 id="theory">{titles["theory"]}</h2>')
    trows = _theory_rows(data)
    if trows:
        out.append("<table><tr><th>derivation</th><th>check</th><th>kind</th><th>result</th><th>residual</th></tr>")
        for d, c, k, p, r in trows:
            out.append(f"<tr><td>{_e(d)}</td><td>{_e(c)}</td><td>{_e(k)}</td>"
                       f'<td><span class="status {"ok" if p == "pass" else "bad"}">{_e(p)}</span></td>'
                       f"<td>{_e(r)}</td></tr>")
        out.append("</table>")
    else:
        out.append(f"<p>No theory checks stored: {_e(data.problem('theory') or 'none recorded')}.</p>")
    # limitations
    out.append(f'<h2 id="limitations">{titles["limitations"]}</h2><ul>')
    out.extend(f"<li>{_e(x)}</li>" for x in lim)
    out.append("</ul>")
    # provenance
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
    counts = _status_counts(verdicts)
    titles = dict(SECTIONS)
    out: list[str] = [
        "# tangentlab: theory against measurement", "",
        "The geometric account of anisotropy in language Transformers, tested symbolically, on "
        f"synthetic manifolds and on real Transformer gradients. Paper: {PAPER_CITATION}.", "",
        f"## {titles['summary']}", "", "| | |", "|---|---|",
    ]
    out += [f"| {_md(k)} | {_md(v)} |" for k, v in _header_facts(data)]
    out += ["", ", ".join(f"**{w}** {counts.get(w, 0)}" for w in R.STATUS_WORDS)
            + f" of {len(verdicts)} predictions.", ""]
    out += [f"## {titles['verdicts']}", "",
            "| # | prediction | status | numbers and test | the paper reported | source |",
            "|---|---|---|---|---|---|"]
    for i, v in enumerate(verdicts, 1):
        out.append(f"| {i} | **{_md(v.title)}** | **{v.status}** | {_md(v.reason)} (test: {_md(v.test)}) "
                   f"| {_md(v.paper)} | {_md(_source_md(v))} |")
    out += ["", f"## {titles['details']}", "",
            "Theory is drawn as a line, measurements as points with their intervals; where there is no "
            "theory curve (the empirical rows), the null (controls) and the step-0 value are the "
            "reference lines.", ""]
    for v in verdicts:
        out += [f"### {v.title}: {v.status}", "", f"- **Prediction.** {v.prediction}",
                f"- **Why this status.** {v.reason}", f"- **Rule.** {v.rule}"]
        out += [f"- **{k}**: {val}" for k, val in v.numbers]
        out += [f"- **The paper reported.** {v.paper}", f"- **Source.** {_source_md(v)}", ""]
        if v.key in figures:
            out += [f"![{v.title}](figures/{figures[v.key].name})", ""]
        else:
            out += ["_No figure: nothing was measured for this row._", ""]
        if v.error:
            out += ["```", v.error, "```", ""]
    out += [f"## {titles['stages']}", "", "| stage | status | seconds | config hash | output | note |",
            "|---|---|---|---|---|---|"]
    out += [f"| {_md(n)} | {s} | {secs} | `{h}` | [{_md(link)}]({link}) | {_md(note)} |"
            for n, s, secs, h, link, note in _stage_rows(data)]
    out += ["", f"## {titles['theory']}", ""]
    trows = _theory_rows(data)
    if trows:
        out += ["| derivation | check | kind | result | residual |", "|---|---|---|---|---|"]
        out += [f"| {_md(d)} | {_md(c)} | {k} | {p} | {r} |" for d, c, k, p, r in trows]
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

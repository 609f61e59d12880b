"""The self-contained HTML page of the report (figures embedded, inline CSS, no scripts).

A thin emitter: it formats a :class:`~tangentlab.report.page.Page` (computed once, shared with
the Markdown twin) and reads nothing of the run but the PNGs a stage stored, which it embeds.
"""

from __future__ import annotations

import base64
import html
import json
import re

from tangentlab.claims import rules as R
from tangentlab.claims.paper import PAPER_CITATION
from tangentlab.report import page as P  # the parts both pages share
from tangentlab.report import theory_numbers
from tangentlab.report.gating import END_TO_END_HEADER, status_text
from tangentlab.report.verdicts import Verdict

__all__ = ["render_html"]

_STATUS_CLASS = {  # any other word (not applicable (one checkpoint)) is grey
    R.SUPPORTED: "ok",
    R.NOT_SUPPORTED: "bad",
    R.INCONCLUSIVE: "unk",
    R.NOT_RUN: "off",
}


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


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


def _status_html(status: str, text: str | None = None) -> str:
    return (f'<span class="status {_STATUS_CLASS.get(status, "off")}">'
            f'{_e(status if text is None else text)}</span>')


def _row_status_html(v: Verdict) -> str:
    """A row's status; a gated row reads inconclusive (not validated), its raw verdict beside."""
    raw = f'<br><span class="muted">raw: {_e(v.raw_status)}</span>' if v.gated else ""
    return _status_html(v.status, status_text(v)) + raw


#: Column widths of the "validated end to end" table (fixed layout: it never runs past the page).
_END_TO_END_WIDTHS = ("13%", "17%", "7%", "13%", "11%", "8%", "31%")


def _verdict_cell(text: str) -> str:
    """The last cell: a yes/no badge, then the reason as ordinary text that wraps."""
    m = re.match(r"(yes|no)\b:?\s*(.*)", text, re.S)
    word, rest = (m[1], m[2]) if m else (text, "")
    badge = f'<span class="status {"ok" if word == "yes" else "bad"}">{_e(word)}</span>'
    return badge + (f" {_e(rest)}" if rest else "")


def _arms_html(arms: list[tuple[str, str]]) -> str:
    """The learning arms over a horizon (``reproduce --set arms_steps=N``); none: empty."""
    return (f"<p><b>{theory_numbers.ARMS_TITLE}</b> ({_e(theory_numbers.ARMS_NOTE)})</p><ul>"
            + "".join(f"<li>{_e(x)}</li>" for _, x in arms) + "</ul>") if arms else ""


def _end_to_end_html(rows: list[tuple[str, ...]]) -> list[str]:
    """The "validated end to end" table: one row per prediction (:mod:`tangentlab.report.gating`)."""
    if not rows:
        return []
    out = ['<h3 id="end-to-end">Validated end to end</h3>',
           '<p class="muted">A prediction reads supported or not supported only where the '
           "end-to-end battery (planted truths through the real pipeline) validated its row at "
           "this run's setting; otherwise it reads inconclusive (not validated), its raw verdict "
           "kept in the reason.</p>",
           '<table class="e2e"><colgroup>' + "".join(f'<col style="width:{w}">' for w in _END_TO_END_WIDTHS)
           + "</colgroup><tr>" + "".join(f"<th>{_e(h)}</th>" for h in END_TO_END_HEADER) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{_e(x)}</td>" for x in row[:-1])
                   + f"<td>{_verdict_cell(row[-1])}</td></tr>")
    return out + ["</table>"]


def _source_html(v: Verdict, base: str = "") -> str:
    def one(s) -> str:
        facts = (f'<span class="muted">config {_e(s.config_hash or "?")}, '
                 f'seed {_e(s.seed if s.seed is not None else "?")}</span>')
        if s.external:  # named, never a path (the summary lists where each one lives)
            apart = "" if v.pooled or not v.external_units else ", shown apart"
            return f'{_e(s.name)} <span class="muted">(external{apart})</span> {facts}'
        if not s.present:
            return f'{_e(s.path)} <span class="muted">(no such directory)</span>'
        return f'<a href="{_e(base + s.path)}/">{_e(s.path)}</a> {facts}'

    return "<br>".join(one(s) for s in v.sources)


def _compact_html(v: Verdict) -> str:
    if v.units or v.external_units:
        txt = "".join(f'<div class="unit">{_e(u.label)}: {_status_html(u.status)}</div>' for u in v.units)
        if v.external_units:
            txt += '<div class="muted">external, not pooled:</div>' + "".join(
                f'<div class="unit ext">{_e(u.label)}: {_status_html(u.status)}</div>'
                for u in v.external_units)
        return txt
    return _e(P.compact(v))


_EXTRA_CSS = """
.banner{border:2px solid #c77d00;background:#fff4dc;padding:.6em 1em;border-radius:.4em;margin:1em 0}
.banner.bad{border-color:#a11;background:#fbe3e3}
.banner ul{margin:.2em 0;padding-left:1.2em}
td.num{white-space:nowrap}
.dep{font-size:.8em;color:#6b5200}
td .status{font-size:.85em}
div.unit{white-space:nowrap}
table.facts th{white-space:nowrap;width:12em}
table.e2e{table-layout:fixed}
table.e2e th,table.e2e td{overflow-wrap:anywhere;word-break:break-word}
"""


def render_html(page: P.Page, pngs: dict[str, bytes], *, link_base: str = "") -> str:
    """The HTML page of ``page`` (``pngs``: each row's figure, embedded as base64).

    Args:
        page: what the page shows (:func:`tangentlab.report.page.build`).
        pngs: row key -> PNG bytes of the row's figure.
        link_base: prefix of the links to the run's stage folders (when the page is written
            outside the run directory).
    """
    titles = dict(P.SECTIONS)
    verdicts = page.verdicts
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>tangentlab report: {_e(page.name)}</title>", f"<style>{_CSS}{_EXTRA_CSS}</style>",
        "</head><body>",
        "<h1>tangentlab: theory against measurement</h1>",
    ]
    lines = page.banner
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
        for k, v in page.facts) + "</table>")
    out.append("<p>" + " ".join(f"<b>{_e(t)}:</b> {_e(c)}." for t, c in page.counts)
               + "</p>")
    out.append(theory_numbers.findings_html(page.findings) + _arms_html(page.arms))  # issue 36
    for sid, section, caption in P.VERDICT_SECTIONS:
        out.append(f'<h2 id="{sid}">{titles[sid]}</h2>')
        out.append(f'<p class="muted">{_e(caption)}</p>')
        out.append("<table><tr><th>#</th><th>row</th><th>status</th><th>per unit / checks</th>"
                   "<th>the paper reported</th><th>source</th></tr>")
        for i, v in enumerate((v for v in verdicts if v.section == section), 1):
            dep = (f'<br><span class="dep">depends on {_e(v.depends_on)}: not an independent verdict</span>'
                   if v.depends_on else "")
            out.append(
                f'<tr><td>{i}</td><td><a href="#row-{_e(v.key)}"><b>{_e(v.title)}</b></a>{dep}</td>'
                f"<td>{_row_status_html(v)}</td><td>{_compact_html(v)}</td>"
                f"<td>{_e(v.paper)}</td><td>{_source_html(v, link_base)}</td></tr>")
        out.append("</table>")
        if section == "instrument":
            out += _end_to_end_html(page.end_to_end)
    # details: one sub-table per row
    out.append(f'<h2 id="details">{titles["details"]}</h2>')
    out.append('<p class="muted">Theory is drawn as a line, measurements as points with their '
               "confidence intervals; where there is no theory curve (the empirical rows), the null "
               "(controls, shaded: their min-max range) and the step-0 value (dashed) are the references. "
               "A <i>range</i> is a spread over controls or checkpoints, never a confidence interval.</p>")
    for v in verdicts:
        out.append(f'<div class="row" id="row-{_e(v.key)}"><h3>{_e(v.title)} {_row_status_html(v)}</h3>')
        out.append(f"<p><b>{'Prediction' if v.section == 'prediction' else 'Checks'}.</b> {_e(v.prediction)}</p>")
        if v.depends_on:
            out.append(f'<p class="dep">This row depends on the {_e(v.depends_on)} row: it is not an '
                       "independent verdict.</p>")
        if v.units:
            out.append("<table><tr><th>model</th><th>site</th><th>status</th><th>estimate and interval</th>"
                       "<th>checkpoints used</th><th>why, and notes</th></tr>")
            for model, site, st, est, at, note in P.unit_rows(v):
                out.append(f"<tr><td>{_e(model)}</td><td>{_e(site)}</td><td>{_status_html(st)}</td>"
                           f"<td>{_e(est)}</td><td>{_e(at)}</td><td>{_e(note)}</td></tr>")
            out.append("</table>")
        if v.checks:
            out.append("<table><tr><th>check</th><th>result</th><th>measured vs target</th>"
                       "<th>tolerance and kind of error</th></tr>")
            for name, what, res, mt, tol in P.check_rows(v):
                what_html = f'<br><span class="muted">{_e(what)}</span>' if what else ""
                out.append(f"<tr><td>{_e(name)}{what_html}</td><td><span class=\"status "
                           f"{'ok' if res == 'pass' else 'bad'}\">{_e(res)}</span></td>"
                           f"<td>{_e(mt)}</td><td>{_e(tol)}</td></tr>")
            out.append("</table>")
        out.append(f"<p><b>Overall: {_row_status_html(v)}.</b> {_e(P.overall(v))}</p>")
        out.append(f'<p><b>Rule.</b> <span class="muted">{_e(v.rule)}</span></p>')
        if v.numbers:
            out.append('<ul class="nums">' + "".join(f"<li><b>{_e(k)}</b>: {_e(val)}</li>" for k, val in v.numbers)
                       + "</ul>")
        out.append(f"<p><b>The paper reported.</b> {_e(v.paper)}</p>")
        out.append(f"<p><b>Source.</b> {_source_html(v, link_base)}; test: {_e(v.test)}</p>")
        if v.key in pngs:
            b64 = base64.b64encode(pngs[v.key]).decode("ascii")
            out.append(f'<img alt="{_e(v.title)}" src="data:image/png;base64,{b64}">')
        elif not v.figures:
            out.append('<p class="muted">No figure: nothing was measured for this row.</p>')
        for src in v.figures:
            b64 = base64.b64encode(src.read_bytes()).decode("ascii")
            out.append(f'<img alt="{_e(v.title)}: {_e(src.name)}" src="data:image/png;base64,{b64}">')
        if v.external_units:
            out.append(f'<h4 id="row-{_e(v.key)}-external">{_e(P.EXTERNAL_HEADING)}</h4>')
            out.append("<table><tr><th>external run</th><th>site</th><th>status</th>"
                       "<th>estimate and interval</th><th>checkpoints used</th><th>why, and notes</th></tr>")
            for model, site, st, est, at, note in P.unit_rows(v, external=True):
                out.append(f"<tr><td>{_e(model)}</td><td>{_e(site)}</td><td>{_status_html(st)}</td>"
                           f"<td>{_e(est)}</td><td>{_e(at)}</td><td>{_e(note)}</td></tr>")
            out.append("</table>")
            out.append(f"<p><b>External runs on their own: {_status_html(v.external_status or '')}.</b> "
                       f"{_e(P.external_overall(v))}</p>")
            key = P.external_key(v.key)
            if key in pngs:
                b64 = base64.b64encode(pngs[key]).decode("ascii")
                out.append(f'<img alt="{_e(v.title)}: external measurements" src="data:image/png;base64,{b64}">')
        if v.error:
            out.append(f"<pre>{_e(v.error)}</pre>")
        out.append("</div>")
    out += theory_numbers.html_section(page.bridge, page.bridge_missing, pngs)  # issue 20
    # stages
    out.append(f'<h2 id="stages">{titles["stages"]}</h2>')
    out.append("<table><tr><th>stage</th><th>status</th><th>seconds (CPU)</th><th>config hash</th>"
               "<th>output</th><th>note</th></tr>")
    for name, status, secs, h, link, note in page.stages:
        cls = {"done": "ok", "failed": "bad", "skipped": "off"}.get(status, "unk")
        out.append(f'<tr><td>{_e(name)}</td><td><span class="status {cls}">{_e(status)}</span></td>'
                   f'<td class="num">{_e(secs)}</td><td><code>{_e(h)}</code></td>'
                   f'<td><a href="{_e(link_base + link)}">{_e(link)}</a></td><td>{_e(note)}</td></tr>')
    out.append("</table>")
    # theory
    out.append(f'<h2 id="theory">{titles["theory"]}</h2>')
    trows = page.theory
    if trows:
        out.append("<table><tr><th>derivation</th><th>check</th><th>kind</th><th>result</th>"
                   "<th>residual</th><th>kind of error</th></tr>")
        for d, c, k, p, r, ek in trows:
            out.append(f"<tr><td>{_e(d)}</td><td>{_e(c)}</td><td>{_e(k)}</td>"
                       f'<td><span class="status {"ok" if p == "pass" else "bad"}">{_e(p)}</span></td>'
                       f"<td>{_e(r)}</td><td>{_e(ek)}</td></tr>")
        out.append("</table>")
    else:
        out.append(f"<p>No theory checks stored: {_e(page.theory_missing)}.</p>")
    out.append(f'<h2 id="limitations">{titles["limitations"]}</h2><ul>')
    out.extend(f"<li>{_e(x)}</li>" for x in page.limitations)
    out.append("</ul>")
    out.append(f'<h2 id="provenance">{titles["provenance"]}</h2>')
    out.append("<p>Every number above was read from the stage outputs listed in the Stages table; "
               "<code>tangentlab report RUN_DIR</code> re-renders this page from them without "
               "recomputing. Resolved configuration:</p>")
    out.append(f"<pre>{_e(json.dumps(page.config, indent=2))}</pre>")
    versions = page.versions
    out.append("<p class=\"muted\">Versions: " + _e(", ".join(f"{k} {v}" for k, v in versions.items() if v))
               + "</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"

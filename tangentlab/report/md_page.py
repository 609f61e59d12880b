"""The Markdown twin of the report page (figures as links to ``figures/*.png``).

A thin emitter: it formats the same :class:`~tangentlab.report.page.Page` as the HTML page.
"""

from __future__ import annotations

import json
from pathlib import Path

from tangentlab.claims.paper import PAPER_CITATION
from tangentlab.report import page as P  # the parts both pages share
from tangentlab.report import theory_numbers
from tangentlab.report.gating import END_TO_END_HEADER, status_text
from tangentlab.report.verdicts import Verdict

__all__ = ["render_markdown"]

def _md(x: object) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _source_md(v: Verdict, base: str = "") -> str:
    def one(s) -> str:
        facts = f"(config {s.config_hash or '?'}, seed {s.seed if s.seed is not None else '?'})"
        if s.external:  # named, never a path (the summary lists where each one lives)
            apart = "" if v.pooled or not v.external_units else ", shown apart"
            return f"{s.name} (external{apart}) {facts}"
        if not s.present:
            return f"{s.path} (no such directory)"
        return f"[{s.path}]({base}{s.path}/) {facts}"

    return "; ".join(one(s) for s in v.sources)


def _arms_md(arms: list[tuple[str, str]]) -> list[str]:
    """The learning arms over a horizon (``reproduce --set arms_steps=N``); none: no lines."""
    return [f"**{theory_numbers.ARMS_TITLE}** ({theory_numbers.ARMS_NOTE})", "",
            *[f"- {_md(x)}" for _, x in arms], ""] if arms else []


def _end_to_end_md(rows: list[tuple[str, ...]]) -> list[str]:
    """The "validated end to end" table: one row per prediction (:mod:`tangentlab.report.gating`)."""
    if not rows:
        return []
    out = ["### Validated end to end", "",
           "A prediction reads supported or not supported only where the end-to-end battery "
           "(planted truths through the real pipeline) validated its row at this run's setting; "
           "otherwise it reads inconclusive (not validated), its raw verdict kept in the reason.",
           "", "| " + " | ".join(END_TO_END_HEADER) + " |", "|" + "---|" * len(END_TO_END_HEADER)]
    out += ["| " + " | ".join(_md(x) for x in row) + " |" for row in rows]
    return out + [""]


def render_markdown(page: P.Page, figures: dict[str, Path], *, link_base: str = "") -> str:
    """The Markdown page of ``page`` (``figures``: row key -> PNG path, linked as ``figures/NAME``).

    ``link_base`` prefixes the links to the run's stage folders (a page written outside the run).
    """
    titles = dict(P.SECTIONS)
    verdicts = page.verdicts
    out: list[str] = ["# tangentlab: theory against measurement", ""]
    if page.banner:
        out += ["> **Read this first.**", ">"] + [f"> - {x}" for x in page.banner] + [""]
    out += ["The geometric account of anisotropy in language Transformers, tested symbolically, on "
            f"synthetic manifolds and on real Transformer gradients. Paper: {PAPER_CITATION}.", "",
            f"## {titles['summary']}", "", "| | |", "|---|---|"]
    out += [f"| {_md(k)} | {'`' + v + '`' if k == 'reproduce with' else _md(v)} |" for k, v in page.facts]
    out += ["", " ".join(f"**{t}:** {c}." for t, c in page.counts), ""]
    out += theory_numbers.findings_markdown(page.findings) + _arms_md(page.arms)  # issue 36
    for sid, section, caption in P.VERDICT_SECTIONS:
        out += [f"## {titles[sid]}", "", caption, "",
                "| # | row | status | per unit / checks | the paper reported | source |",
                "|---|---|---|---|---|---|"]
        for i, v in enumerate((v for v in verdicts if v.section == section), 1):
            dep = f" (depends on {v.depends_on}: not an independent verdict)" if v.depends_on else ""
            raw = f" (raw: {v.raw_status})" if v.gated else ""
            out.append(f"| {i} | **{_md(v.title)}**{dep} | **{status_text(v)}**{raw} | "
                       f"{_md(P.compact(v))} | {_md(v.paper)} | {_md(_source_md(v, link_base))} |")
        out.append("")
        if section == "instrument":
            out += _end_to_end_md(page.end_to_end)
    out += [f"## {titles['details']}", "",
            "Theory is drawn as a line, measurements as points with their confidence intervals; where "
            "there is no theory curve (the empirical rows), the null (controls, shaded: their min-max "
            "range) and the step-0 value (dashed) are the references. A *range* is a spread over "
            "controls or checkpoints, never a confidence interval.", ""]
    for v in verdicts:
        out += [f"### {v.title}: {status_text(v)}", "",
                f"**{'Prediction' if v.section == 'prediction' else 'Checks'}.** {v.prediction}", ""]
        if v.depends_on:
            out += [f"_This row depends on the {v.depends_on} row: it is not an independent verdict._", ""]
        if v.units:
            out += ["| model | site | status | estimate and interval | checkpoints used | why, and notes |",
                    "|---|---|---|---|---|---|"]
            out += [f"| {_md(a)} | {_md(b)} | **{c}** | {_md(d)} | {_md(e)} | {_md(f)} |"
                    for a, b, c, d, e, f in P.unit_rows(v)]
            out.append("")
        if v.checks:
            out += ["| check | result | measured vs target | tolerance and kind of error |", "|---|---|---|---|"]
            out += [f"| {_md(a)}{' (' + _md(w) + ')' if w else ''} | {b} | {_md(c)} | {_md(d)} |"
                    for a, w, b, c, d in P.check_rows(v)]
            out.append("")
        out += [f"- **Overall: {status_text(v)}.** {P.overall(v)}", f"- **Rule.** {v.rule}"]
        out += [f"- **{k}**: {val}" for k, val in v.numbers]
        out += [f"- **The paper reported.** {v.paper}", f"- **Source.** {_source_md(v, link_base)}; test: {v.test}", ""]
        if v.key in figures:
            out += [f"![{v.title}](figures/{figures[v.key].name})", ""]
        elif not v.figures:
            out += ["_No figure: nothing was measured for this row._", ""]
        for src in v.figures:
            out += [f"![{v.title}: {src.name}](figures/{v.key}--{src.name})", ""]
        if v.external_units:
            out += [f"#### {P.EXTERNAL_HEADING}", "",
                    "| external run | site | status | estimate and interval | checkpoints used | why, and notes |",
                    "|---|---|---|---|---|---|"]
            out += [f"| {_md(a)} | {_md(b)} | **{c}** | {_md(d)} | {_md(e)} | {_md(f)} |"
                    for a, b, c, d, e, f in P.unit_rows(v, external=True)]
            out += ["", f"- **External runs on their own: {v.external_status}.** {P.external_overall(v)}", ""]
            key = P.external_key(v.key)
            if key in figures:
                out += [f"![{v.title}: external measurements](figures/{figures[key].name})", ""]
        if v.error:
            out += ["```", v.error, "```", ""]
    out += theory_numbers.markdown_section(page.bridge, page.bridge_missing, figures)  # issue 20
    out += [f"## {titles['stages']}", "", "| stage | status | seconds (CPU) | config hash | output | note |",
            "|---|---|---|---|---|---|"]
    out += [f"| {_md(n)} | {s} | {secs} | `{h}` | [{_md(link)}]({link_base}{link}) | {_md(note)} |"
            for n, s, secs, h, link, note in page.stages]
    out += ["", f"## {titles['theory']}", ""]
    trows = page.theory
    if trows:
        out += ["| derivation | check | kind | result | residual | kind of error |", "|---|---|---|---|---|---|"]
        out += [f"| {_md(d)} | {_md(c)} | {k} | {p} | {r} | {_md(ek)} |" for d, c, k, p, r, ek in trows]
    else:
        out.append(f"No theory checks stored: {page.theory_missing}.")
    out += ["", f"## {titles['limitations']}", ""]
    out += [f"- {x}" for x in page.limitations]
    out += ["", f"## {titles['provenance']}", "",
            "Every number above was read from the stage outputs listed in the Stages table; "
            "`tangentlab report RUN_DIR` re-renders this page from them without recomputing. "
            "Resolved configuration:", "", "```json", json.dumps(page.config, indent=2),
            "```", ""]
    return "\n".join(out)

"""The report's "theory against measurement, in numbers" table, its context table and figures.

Reads the rows of ``bridge.csv`` the loader read from every measurement stage (ours and the
external runs of ``tangentlab report RUN --measure NAME=DIR``; see
:mod:`tangentlab.empirical.bridge.run`; :attr:`tangentlab.report.load.Stage.bridge`) and lays
out:

- the **table**: one line per (model, site, phase, quantity), columns quantity, predicted
  [interval], measured [interval], agreement (the rule :data:`AGREEMENT_RULE`, decided when the
  measurement was written); a cell the calibration does not trust reads "not measurable here";
- the **context table**: the measured inputs (s, beta, m, ‖II‖²) and the peer baselines
  (RankMe, alpha-ReQ, TwoNN, GRIDE, IsoScore) per checkpoint, without verdicts;
- a **figure per model**: the relative visibility per frequency bucket, measured points with
  intervals and the closed form drawn through them, one panel per (site, phase).

It never changes a verdict. :func:`read_lines` gives the lines once (the page model keeps
them); :func:`html_section` and :func:`markdown_section` lay them out on the two pages, and
:func:`write_figures` draws the PNGs into the report's figure folder.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.claims.bridge_rules import AGREEMENT_RULE, NOT_MEASURABLE, OUTSIDE_DOMAIN
from tangentlab.contract import ARMS, BRIDGE
from tangentlab.report.load import BRIDGE_FILE, EXTERNAL_PREFIX

__all__ = ["TITLE", "AGREEMENT_RULE", "BRIDGE_FILE", "Line", "read_lines", "table_rows",
           "context_rows", "panels", "write_figures", "html_section", "markdown_section",
           "figure_key", "findings", "FINDINGS_TITLE", "FINDINGS_NOTE", "findings_markdown",
           "findings_html", "arms_lines", "ARMS_TITLE", "ARMS_NOTE"]

TITLE = "Theory against measurement, in numbers"
#: What the agreement cell adds for a line whose note carries ``OUTSIDE_DOMAIN`` (predicted at
#: beta = 0, the measured beta being negative); the rule itself is ``claims.bridge_rules``'.
OUTSIDE_DOMAIN_FLAG = " (measured β < 0, outside the closed form: predicted at β = 0)"
_PHASE_ORDER = {"step0": 0, "peak": 1, "last": 2}


@dataclass(frozen=True)
class Line:
    """One row of a ``bridge.csv``, with the measurement it came from (``source``)."""

    source: str
    model: str
    site: str
    phase: str
    step: str
    quantity: str
    bucket: str
    role: str
    predicted: tuple[float, float, float]
    measured: tuple[float, float, float]
    status: str
    note: str

    @property
    def name(self) -> str:
        """``quantity`` or ``quantity [bucket]``."""
        return self.quantity if self.bucket in ("", "all") else f"{self.quantity} [{self.bucket}]"


def _num(x: str | None) -> float:
    try:
        return float(x) if x not in (None, "") else float("nan")
    except ValueError:
        return float("nan")


#: Shown when a run has no pretrained stage at all.
NO_PRETRAINED = ("SmolLM2-135M: not run (the optional stage pretrained/smollm2 is built when "
                 "TANGENTLAB_SMOLLM2 names its GGUF file; it needs the gguf extra)")


def _stages(names: Sequence[str]) -> list[tuple[str, str]]:
    own = [s for s in names if s.startswith("measure/")]
    text = [s for s in names if s.startswith(BRIDGE + "/")]
    pre = [s for s in names if s.startswith("pretrained/")]
    return ([(s, s.split("/", 1)[1]) for s in own]
            + [(s, f"{s.split('/', 1)[1]} (bridge text)") for s in text]
            + [(s, f"{s.split('/', 1)[1]} (pretrained)") for s in pre]
            + [(s, f"{s.split('/', 1)[1]} (external)") for s in names
               if s.startswith(EXTERNAL_PREFIX)])


def read_lines(stages: Any, names: Sequence[str] | None = None) -> tuple[list[Line], list[str]]:
    """(every line of every measurement's ``bridge.csv``, why a measurement has none).

    ``stages``: the opened run's stages by name (:attr:`RunData.stages
    <tangentlab.report.load.RunData.stages>`) and ``names`` its stage names
    (:attr:`~tangentlab.report.load.RunData.names`); or the opened run itself.
    """
    if names is None:  # the opened run itself
        stages, names = stages.stages, stages.names
    lines, missing = [], []
    for stage, label in _stages(names):
        st = stages[stage]
        if not st.done:
            continue
        if st.bridge is None and st.not_run is not None:
            missing.append(f"{label}: {st.not_run}")
            continue
        if st.bridge is None:
            missing.append(f"{label}: no {BRIDGE_FILE} (measured without the bridge, or before "
                           "it existed)")
            continue
        for r in st.bridge:
            lines.append(Line(
                source=label, model=r.get("model", ""), site=r.get("site", ""),
                phase=r.get("phase", ""), step=r.get("step", ""),
                quantity=r.get("quantity", ""), bucket=r.get("bucket", ""),
                role=r.get("role", ""),
                predicted=tuple(_num(r.get(k)) for k in ("predicted", "predicted_low",
                                                         "predicted_high")),
                measured=tuple(_num(r.get(k)) for k in ("measured", "measured_low",
                                                        "measured_high")),
                status=r.get("status", ""), note=r.get("note", "")))
    records = [s for s in names if not s.startswith(EXTERNAL_PREFIX)]
    if not any(s.startswith("pretrained/") for s in records) and records:
        missing.append(NO_PRETRAINED)
    return lines, missing


def _fmt(v: tuple[float, float, float], status: str) -> str:
    x, lo, hi = v
    if not math.isfinite(x):
        return NOT_MEASURABLE if status == NOT_MEASURABLE else "–"
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{x:.3g} [{lo:.3g}, {hi:.3g}]"
    return f"{x:.3g}"


#: Table order of the quantities (others after them, by name).
_QUANTITY_ORDER = {q: i for i, q in enumerate((
    "attenuation_raw", "attenuation_direction", "relative_visibility", "bucket_visibility",
    "zipf_s", "zipf_s_eval", "pinning_beta_raw", "pinning_beta_direction",
    "pinning_curvature_raw", "pinning_curvature_direction", "local_dimension_m",
    "ii_norm_sq", "rankme", "alpha_req", "twonn", "gride", "twonn_per_type",
    "twonn_by_frequency", "isoscore"))}


def _order(line: Line) -> tuple:
    return (line.source, line.site, _PHASE_ORDER.get(line.phase, 9),
            _QUANTITY_ORDER.get(line.quantity, 99), line.quantity, line.bucket)


def _unmeasurable(ln: Line) -> bool:
    """A line with nothing to show: not measurable, and no number on either side."""
    return (ln.status == NOT_MEASURABLE and not math.isfinite(ln.predicted[0])
            and not math.isfinite(ln.measured[0]))


def _reasons(lines: list[Line]) -> list[str]:
    """The distinct reasons the lines' notes give, in order (the phase's own note left out)."""
    out: dict[str, None] = {}
    for ln in lines:
        parts = [p.strip() for p in ln.note.split(";")]
        why = [p.split(":", 1)[1].strip() for p in parts if p.startswith(NOT_MEASURABLE + ":")]
        for w in why or ["no reason recorded"]:
            out.setdefault(w, None)
    return list(out)


#: How many distinct reasons a collapsed line names before it counts the rest.
MAX_REASONS = 3


def _collapsed(lines: list[Line]) -> list[tuple[str, str, str, str, str]]:
    """One line per (model, phase) for the ``lines`` nobody could measure.

    (model, sites, phase (its steps), "N cells: quantity, quantity [k buckets]", the reasons).
    """
    groups: dict[tuple[str, str], list[Line]] = {}
    for ln in sorted(lines, key=lambda x: (x.source, _PHASE_ORDER.get(x.phase, 9), x.phase)):
        groups.setdefault((ln.source, ln.phase), []).append(ln)
    out = []
    for (source, phase), lns in groups.items():
        sites = list(dict.fromkeys(ln.site for ln in sorted(lns, key=lambda x: x.site)))
        steps = list(dict.fromkeys(ln.step for ln in sorted(lns, key=lambda x: _num(x.step))))
        buckets: dict[str, set[str]] = {}
        for ln in sorted(lns, key=lambda x: (_QUANTITY_ORDER.get(x.quantity, 99), x.quantity)):
            buckets.setdefault(ln.quantity, set()).add(ln.bucket)
        names = [q if not (b - {"", "all"}) else f"{q} [{len(b)} bucket{'s' if len(b) > 1 else ''}]"
                 for q, b in buckets.items()]
        reasons = _reasons(lns)
        why = "; ".join(reasons[:MAX_REASONS])
        if len(reasons) > MAX_REASONS:
            more = len(reasons) - MAX_REASONS
            why += f"; and {more} other reason{'s' if more > 1 else ''}"
        out.append((source,
                    sites[0] if len(sites) == 1 else f"{len(sites)} sites: {', '.join(sites)}",
                    f"{phase} (step{'s' if len(steps) > 1 else ''} {', '.join(steps)})",
                    f"{len(lns)} cell{'s' if len(lns) > 1 else ''}: {', '.join(names)}",
                    f"{NOT_MEASURABLE}: {why}"))
    return out


def table_rows(lines: list[Line]) -> list[tuple[str, str, str, str, str, str, str]]:
    """(model, site, phase, quantity, predicted [interval], measured [interval], agreement).

    The agreement carries :data:`OUTSIDE_DOMAIN_FLAG` where the prediction is the closed form's
    boundary value (a negative measured β, predicted at β = 0). Lines with no number on either
    side ("not measurable here") collapse into one line per (model, phase), after that model's
    other lines: its sites, steps and cells, and the distinct reasons.
    """
    comparison = [x for x in lines if x.role == "comparison"]
    out = []
    for source in sorted({ln.source for ln in comparison}):
        mine = [x for x in comparison if x.source == source]
        for ln in sorted((x for x in mine if not _unmeasurable(x)), key=_order):
            pred = _fmt(ln.predicted, ln.status) if math.isfinite(ln.predicted[0]) else NOT_MEASURABLE
            meas = _fmt(ln.measured, ln.status) if math.isfinite(ln.measured[0]) else NOT_MEASURABLE
            flag = OUTSIDE_DOMAIN_FLAG if OUTSIDE_DOMAIN in ln.note else ""
            out.append((ln.source, ln.site, f"{ln.phase} (step {ln.step})", ln.name, pred, meas,
                        ln.status + flag))
        out += [(m, site, phase, cells, NOT_MEASURABLE, NOT_MEASURABLE, why)
                for m, site, phase, cells, why in _collapsed([x for x in mine if _unmeasurable(x)])]
    return out


#: Baseline quantities that are our own controls, not peers' estimators.
_CONTROLS = ("twonn_per_type", "twonn_by_frequency")


def _context_label(ln: Line) -> str:
    """`` (peer baseline)``, `` (frequency control)`` or nothing (an input)."""
    if ln.role != "baseline":
        return ""
    return " (frequency control)" if ln.quantity in _CONTROLS else " (peer baseline)"


def context_rows(lines: list[Line]) -> list[tuple[str, str, str, str, str, str]]:
    """(model, site, phase, quantity, value [interval], note) of the inputs and peer baselines.

    Inputs nobody could measure collapse as in :func:`table_rows` (the reasons in the note).
    """
    context = [x for x in lines if x.role in ("input", "baseline")]
    out = []
    for source in sorted({ln.source for ln in context}):
        mine = [x for x in context if x.source == source]
        for ln in sorted((x for x in mine if not _unmeasurable(x)), key=_order):
            val = _fmt(ln.measured, ln.status) if math.isfinite(ln.measured[0]) else NOT_MEASURABLE
            out.append((ln.source, ln.site, f"{ln.phase} (step {ln.step})",
                        ln.name + _context_label(ln), val, ln.note))
        out += [(m, site, phase, cells, NOT_MEASURABLE, why)
                for m, site, phase, cells, why in _collapsed([x for x in mine if _unmeasurable(x)])]
    return out


def figure_key(source: str) -> str:
    """The figure's key (``figures/<key>.png``) of one measurement."""
    import re

    return "theory-numbers--" + re.sub(r"[^A-Za-z0-9_]+", "-", source).strip("-")


def panels(lines: list[Line]) -> dict[str, list[Any]]:
    """``{source: [Panel]}``: relative visibility per bucket, one panel per (site, phase)."""
    from tangentlab.report.figures import Panel, Series

    out: dict[str, list[Any]] = {}
    rel = [x for x in lines if x.quantity == "relative_visibility"]
    groups: dict[tuple[str, str, str], list[Line]] = {}
    for ln in rel:
        groups.setdefault((ln.source, ln.site, ln.phase), []).append(ln)
    for (source, site, phase), lns in sorted(groups.items(),
                                              key=lambda kv: (kv[0][0], kv[0][1],
                                                              _PHASE_ORDER.get(kv[0][2], 9))):
        lns = sorted(lns, key=lambda x: x.bucket)
        x = tuple(float(i) for i in range(len(lns)))
        meas = Series("measured (token bootstrap)", "points", x, tuple(v.measured[0] for v in lns),
                      tuple(v.measured[1] for v in lns), tuple(v.measured[2] for v in lns),
                      color=0)
        pred = Series("closed form (s, beta measured)", "line", x,
                      tuple(v.predicted[0] for v in lns), style="tick", color=0)
        band = Series("closed form interval", "band", x, (), tuple(v.predicted[1] for v in lns),
                      tuple(v.predicted[2] for v in lns), color=0)
        step = lns[0].step
        out.setdefault(source, []).append(Panel(
            title=f"{source} {site}\n{phase} (step {step})", xlabel="frequency bucket (rarest first)",
            ylabel="bucket / all visibility", series=(band, pred, meas),
            categories=tuple(v.bucket for v in lns)))
    return out


def write_figures(lines: list[Line], fig_dir: Path, figures_at: Path,
                  pngs: dict[str, bytes] | None = None, paths: dict[str, Path] | None = None
                  ) -> tuple[dict[str, bytes], dict[str, Path]]:
    """Draw one PNG per measurement of ``lines`` with a measured panel into ``fig_dir``.

    Adds ``{key: png bytes}`` to ``pngs`` and ``{key: figures_at/key.png}`` to ``paths`` (new
    dicts when None; ``figures_at``: where the figures end up) and returns both.
    """
    from tangentlab.report.figures import panel_has_data, render_png
    from tangentlab.runs import atomic_write_bytes

    pngs = {} if pngs is None else pngs
    paths = {} if paths is None else paths
    for source, ps in panels(lines).items():
        ps = [p for p in ps if panel_has_data(p)]
        if not ps:
            continue
        key = figure_key(source)
        png = render_png(ps, ncols=min(len(ps), 3))
        atomic_write_bytes(Path(fig_dir) / f"{key}.png", png)
        pngs[key], paths[key] = png, Path(figures_at) / f"{key}.png"
    return pngs, paths


_INTRO = ("The closed forms' inputs measured on the activations (at most one occurrence per "
          "document and token), the predictions they give, and the same quantities measured "
          "directly, at step 0, at the enrichment peak and at the last checkpoint. Context "
          "only: these lines decide no verdict.")


def html_section(lines: list[Line], missing: list[str], pngs: Mapping[str, bytes]) -> list[str]:
    """The section's HTML (heading, rule, table, figures, context table)."""
    import base64

    e = html.escape
    out = [f'<h2 id="theory-numbers">{e(TITLE)}</h2>', f"<p>{e(_INTRO)}</p>",
           f'<p><b>Agreement rule.</b> <span class="muted">{e(AGREEMENT_RULE)}</span></p>']
    rows = table_rows(lines)
    if rows:
        out.append("<table><tr><th>model</th><th>site</th><th>phase</th><th>quantity</th>"
                   "<th>predicted [interval]</th><th>measured [interval]</th><th>agreement</th></tr>")
        out += [f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(c)}</td><td>{e(d)}</td>"
                f'<td class="num">{e(p)}</td><td class="num">{e(m)}</td><td>{e(s)}</td></tr>'
                for a, b, c, d, p, m, s in rows]
        out.append("</table>")
    else:
        out.append("<p>No measurement wrote a bridge table.</p>")
    out += [f'<p class="muted">{e(x)}</p>' for x in missing]
    for source in sorted({ln.source for ln in lines}):
        key = figure_key(source)
        if key in pngs:
            b64 = base64.b64encode(pngs[key]).decode("ascii")
            out.append(f'<img alt="{e(TITLE)}: {e(source)}" src="data:image/png;base64,{b64}">')
    ctx = context_rows(lines)
    if ctx:
        out.append("<h3>Inputs and peer baselines (context, no verdicts)</h3>")
        out.append("<table><tr><th>model</th><th>site</th><th>phase</th><th>quantity</th>"
                   "<th>value [interval]</th><th>note</th></tr>")
        out += [f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(c)}</td><td>{e(d)}</td>"
                f'<td class="num">{e(v)}</td><td class="muted">{e(n)}</td></tr>'
                for a, b, c, d, v, n in ctx]
        out.append("</table>")
    return out


def _md(x: str) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def markdown_section(lines: list[Line], missing: list[str],
                     figures: Mapping[str, Path]) -> list[str]:
    """The section's Markdown lines (the twin of :func:`html_section`)."""
    out = [f"## {TITLE}", "", _INTRO, "", f"**Agreement rule.** {AGREEMENT_RULE}", ""]
    rows = table_rows(lines)
    if rows:
        out += ["| model | site | phase | quantity | predicted [interval] | measured [interval] "
                "| agreement |", "|---|---|---|---|---|---|---|"]
        out += [f"| {' | '.join(_md(x) for x in r)} |" for r in rows]
    else:
        out.append("No measurement wrote a bridge table.")
    out += ["", *[f"- {_md(x)}" for x in missing]]
    for source in sorted({ln.source for ln in lines}):
        key = figure_key(source)
        if key in figures:
            out += [f"![{TITLE}: {source}](figures/{figures[key].name})", ""]
    ctx = context_rows(lines)
    if ctx:
        out += ["", "### Inputs and peer baselines (context, no verdicts)", "",
                "| model | site | phase | quantity | value [interval] | note |",
                "|---|---|---|---|---|---|"]
        out += [f"| {' | '.join(_md(x) for x in r)} |" for r in ctx]
    out.append("")
    return out


#: The title of the summary's findings list (:func:`findings`), and what it holds.
FINDINGS_TITLE = "Where measurement disagrees with the account"
FINDINGS_NOTE = ("rows of the argument and predictions that read not supported, units that do, "
                 "and theory-against-measurement lines that disagree; each with its numbers and "
                 "the stages that show it")


#: What a ``pinning_curvature`` line's note says when its interval excludes 0.
POWER_LAW_REJECTED = "one power law rejected"
#: The list of learning-arms studies over a training horizon (``arms/<arch>``): title, rule.
ARMS_TITLE = "Learning arms over a training horizon"
ARMS_NOTE = ("supported when training onto Q_T gains and training away from it costs, both "
             "intervals above 0; not supported when either interval lies below 0")


def _interval(x: tuple[float, float, float]) -> str:
    return f"{x[0]:.3g} [{x[1]:.3g}, {x[2]:.3g}]"


def arms_lines(stages: Any, names: Sequence[str]) -> list[tuple[str, str]]:
    """(status, line) per finished ``arms/<arch>`` stage (``reproduce --set arms_steps=N``).

    Optimizer, steps, the two gaps between held-out curves with their intervals, and the
    study's own rule (:mod:`tangentlab.empirical.training.arms_study`). No verdict reads them.
    """
    out = []  # a line per finished arms stage
    for name in (n for n in names if n.startswith(ARMS + "/")):
        st = stages[name]
        rows = {r["metric"]: r for r in (st.results.to_dict("records") if st.done and
                                         st.has_results else ())}
        if not {"arms_onto_gain", "arms_away_cost"} <= set(rows):
            continue
        g, c = rows["arms_onto_gain"], rows["arms_away_cost"]
        gap = [_interval((x["value"], x["ci_low"], x["ci_high"])) for x in (g, c)]
        out.append((str(g["rule"]), (
            f"{name}: {g['optimizer']} at lr {float(g['lr']):.3g}, {int(g['steps'])} steps from "
            f"the last checkpoint, {int(g['n_controls'])} random subspaces: onto gain {gap[0]}, "
            f"away cost {gap[1]} (mean gaps between held-out curves, nats): {g['rule']}")))
    return out


def findings(verdicts: Sequence[Any], lines: Sequence[Line],
             arms: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Every place where measurement disagrees with the account, one short entry each.

    The summary's findings list (issue 36, item 6), read from the rows and lines the report
    already shows, each with its numbers and the stages that show them:

    - a row of the theory's argument or a prediction whose rules said "not supported" (for a
      gated prediction, its raw verdict, marked as not validated end to end), or, where the row
      as a whole did not, each of its (model, site) units that did, with its estimate and
      interval; the external units likewise;
    - each theory-against-measurement line that disagrees, predicted and measured intervals;
    - each pinning curvature line whose interval rejects one power law of rank (the closed
      forms assume one: :mod:`tangentlab.empirical.bridge.pinning_form`);
    - each learning-arms study over a horizon (:func:`arms_lines`) that read not supported.

    A line repeated under a second phase of the same checkpoint (the peak is the last step) is
    listed once, under the first phase. A failure of the instrument's calibration is not
    listed: it says the method is off, not that the account is.
    """
    from tangentlab.claims.rules import NOT_SUPPORTED

    out = []
    for v in verdicts:
        if v.section not in ("argument", "prediction"):
            continue
        where = ", ".join(s.stage for s in v.sources if s.present) or "no stage"
        raw = v.raw_status or v.status
        if raw == NOT_SUPPORTED:
            mark = " (raw verdict: not validated end to end)" if v.raw_status else ""
            why = v.reason.split(f"raw: {v.raw_status}; ", 1)[-1] if mark else v.reason
            why = why if len(why) <= 240 else why[:239] + "…"
            out.append(f"{v.title}: not supported{mark}. {why} [{where}]")
            continue
        for unit, external in [(u, False) for u in v.units] + [(u, True) for u in
                                                                v.external_units]:
            if unit.status == NOT_SUPPORTED:
                mine = [s.stage for s in v.sources if s.present and unit.model
                        and s.stage.split("/")[-1] == unit.model]
                out.append(f"{v.title}, {'external ' if external else ''}{unit.label}: not "
                           f"supported, {unit.estimate} ({unit.at}) [{', '.join(mine) or where}]")
    seen = set()  # one checkpoint under two phases (the peak is the last step): listed once
    for ln in lines:
        at = f"{ln.model} {ln.site}, {ln.phase} step {ln.step}"
        if ln.status == "disagree":
            entry = (f"{ln.name} ({at}): predicted {_interval(ln.predicted)}, measured "
                     f"{_interval(ln.measured)}: disagree [{ln.source}]")
        elif ln.quantity.startswith("pinning_curvature") and POWER_LAW_REJECTED in ln.note:
            entry = (f"{ln.name} ({at}): the closed forms' single pinning law t_r ∝ r^β does "
                     f"not describe the spreads, curvature {_interval(ln.measured)} (0 under "
                     f"one power law) [{ln.source}]")
        else:
            continue
        key = entry.replace(f", {ln.phase} step ", ", step ")
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out + [f"{ARMS_TITLE}, {x}" for status, x in arms if status == NOT_SUPPORTED]


def findings_markdown(items: Sequence[str]) -> list[str]:
    """The findings list as Markdown lines (a bold title, then one bullet each)."""
    esc = [_md(x) for x in items] or ["none in this run"]
    return [f"**{FINDINGS_TITLE}** ({len(items)}; {FINDINGS_NOTE})", "",
            *[f"- {x}" for x in esc], ""]


def findings_html(items: Sequence[str]) -> str:
    """The findings list as HTML (a bold title, then one list item each)."""
    return (f"<p><b>{FINDINGS_TITLE}</b> ({len(items)}; {html.escape(FINDINGS_NOTE)})</p><ul>"
            + "".join(f"<li>{html.escape(x)}</li>" for x in items or ["none in this run"])
            + "</ul>")

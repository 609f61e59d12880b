"""Predictions against measurements: the report. It reads run directories and nothing else.

- :func:`render_report` renders ``report.html`` and ``report.md`` from a run directory's stored
  results, without recomputing (any run, ours or a user's, can be re-rendered), optionally with
  external measurement runs (``measures={NAME: DIR}``).
- :func:`load_results` (also ``tangentlab.load_results``) returns a measurement's headline numbers,
  one row per (model, site, step), the table ``tangentlab summary RUN`` prints;
- :func:`build_verdicts` decides each row's status word by the rules in
  :mod:`tangentlab.claims.rules` (documented in ``docs/report.md``).

Modules, one job each:

- ``rules``: the status rules, pure functions of plain numbers;
- ``load``: the one reader of a run directory: it opens the run once into plain data (stage
  records, each stage's outputs, external measurement runs, the end-to-end run) that everything
  below reads instead of the directory;
- ``tables``: one measurement's results as typed estimates (confidence intervals kept apart from
  min-max ranges);
- ``units``: the empirical verdicts, one frozen record per (model, site);
- ``checks``: recorded checks as lines that say their kind of error;
- ``synthetic_panels``: which stored rows a synthetic row's figure draws;
- ``verdicts``: the table of row specifications and :func:`build_verdicts`;
- ``gating``: a prediction reads supported / not supported only where the end-to-end battery
  validated its row at the run's setting (else "inconclusive (not validated)");
- ``page``: the one page model (:class:`~tangentlab.report.page.Page`), computed once from the
  opened run and its verdict rows; ``html_page`` and ``md_page``: its two thin emitters;
- ``figures``: figures as data, and their rendering; ``render``: the producer that ties them.

The report imports no other pillar (theory, synthetic, empirical) and not the pipeline that
produced the run: a test parses the imports and keeps it so. Heavy modules (pandas, matplotlib)
load inside the functions that need them.
"""

from __future__ import annotations

from tangentlab.claims.rules import RULES, STATUS_WORDS
from tangentlab.report.gating import GATED_TEXT, read_end_to_end
from tangentlab.report.load import END_TO_END_DIR, RunData, Source, Stage, parse_measure_args
from tangentlab.report.render import SECTIONS, RenderResult, render_report
from tangentlab.report.summary import SUMMARY_COLUMNS, headline_table, load_results
from tangentlab.report.verdicts import ROWS, Verdict, build_verdicts, row_keys

__all__ = [
    "render_report",
    "RenderResult",
    "SECTIONS",
    "RunData",
    "Source",
    "Stage",
    "parse_measure_args",
    "END_TO_END_DIR",
    "GATED_TEXT",
    "read_end_to_end",
    "build_verdicts",
    "Verdict",
    "ROWS",
    "row_keys",
    "RULES",
    "STATUS_WORDS",
    "load_results",
    "headline_table",
    "SUMMARY_COLUMNS",
]

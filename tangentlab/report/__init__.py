"""Predictions against measurements: the report. It reads run directories and nothing else.

- :func:`render_report` renders ``report.html`` and ``report.md`` from a run directory's stored
  results, without recomputing (any run, ours or a user's, can be re-rendered).
- :func:`build_verdicts` decides each prediction's status word by the rules in
  :mod:`tangentlab.report.rules` (documented in ``docs/report.md``).

The report imports no other pillar (theory, synthetic, empirical) and not the pipeline that
produced the run: a test parses the imports and keeps it so. Heavy modules (pandas, matplotlib)
load inside the functions that need them.
"""

from __future__ import annotations

from tangentlab.report.load import RunData, Source
from tangentlab.report.render import SECTIONS, RenderResult, render_report
from tangentlab.report.rules import RULES, STATUS_WORDS
from tangentlab.report.verdicts import ROWS, Verdict, build_verdicts, row_keys

__all__ = [
    "render_report",
    "RenderResult",
    "SECTIONS",
    "RunData",
    "Source",
    "build_verdicts",
    "Verdict",
    "ROWS",
    "row_keys",
    "RULES",
    "STATUS_WORDS",
]

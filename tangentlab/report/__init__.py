"""Predictions against measurements: the reproduce job and the report.

- :func:`reproduce` runs theory → synthetic → empirical → report into one run directory, with a
  resumable stage runner (:mod:`tangentlab.report.stages`).
- :func:`render_report` re-renders ``report.html`` and ``report.md`` from a run directory's stored
  results, without recomputing.
- :func:`build_verdicts` decides each prediction's status word by the rules in
  :mod:`tangentlab.report.rules` (documented in ``docs/report.md``).

Heavy modules (pandas, matplotlib, torch) load inside the functions that need them.
"""

from __future__ import annotations

from tangentlab.report.load import RunData, Source
from tangentlab.report.render import SECTIONS, RenderResult, render_report
from tangentlab.report.reproduce import (
    DEFAULT,
    QUICK,
    ReproduceConfig,
    build_stages,
    config_toml,
    reproduce,
    resolve_config,
)
from tangentlab.report.rules import RULES, STATUS_WORDS
from tangentlab.report.stages import RunSummary, Stage, StageContext, StageRecord, run_stages
from tangentlab.report.verdicts import ROWS, Verdict, build_verdicts, row_keys

__all__ = [
    "reproduce",
    "ReproduceConfig",
    "DEFAULT",
    "QUICK",
    "resolve_config",
    "config_toml",
    "build_stages",
    "Stage",
    "StageContext",
    "StageRecord",
    "RunSummary",
    "run_stages",
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

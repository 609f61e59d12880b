"""The records of the verdict table: a row's inputs (:class:`Built`) and its row (:class:`Verdict`).

:class:`Built` is what a row's builder read; :class:`Verdict` is the row as the pages show it.

Kept apart from :mod:`tangentlab.report.verdicts` (which builds them and re-exports both) so
that module stays within its line budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tangentlab.claims import rules as R
from tangentlab.report.checks import CheckLine
from tangentlab.report.figures import Panel
from tangentlab.report.load import Source
from tangentlab.report.units import Unit

__all__ = ["Built", "Verdict"]


@dataclass(frozen=True)
class Built:
    """What a row's builder read: the overall outcome and everything shown beside it."""

    outcome: R.Outcome
    numbers: tuple[tuple[str, str], ...] = ()
    panels: tuple[Panel, ...] = ()
    units: tuple[Unit, ...] = ()
    checks: tuple[CheckLine, ...] = ()
    figures: tuple[Path, ...] = ()  # PNGs a stage stored itself (the validation battery)
    external_units: tuple[Unit, ...] = ()  # external runs, shown apart (not pooled)
    external_outcome: R.Outcome | None = None  # the external runs' units combined, on their own
    external_panels: tuple[Panel, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """One row of a verdict table.

    Attributes:
        key: stable identifier (``"enrichment"``).
        title: short name of the prediction.
        prediction: what the account predicts (or what the calibration checks), in words.
        section: ``calibration`` or ``prediction``.
        status: one of :data:`tangentlab.claims.rules.STATUS_WORDS`.
        reason: the numbers behind the status.
        rule: the rule text (from :data:`tangentlab.claims.rules.RULES`).
        test: the test behind the numbers.
        numbers: ``(label, value)`` facts shown with the row (set-up, counts).
        paper: what the paper reported for the same quantity.
        sources: where the numbers come from.
        panels: the figure, as data.
        units: one record per (model, site) (empirical rows).
        checks: every recorded check, with its kind of error (calibration rows).
        figures: PNGs the stage stored (shown as they are).
        depends_on: the key of the row this one is not independent of (``None``: independent).
        error: set when the builder itself raised (a bug, shown in the report).
        external_units: the (model, site) units of external measurement runs, shown in their own
            sub-table; they do not enter ``status`` unless the run is rendered with ``pool``.
        external_status, external_reason: the external units combined on their own.
        external_panels: their figure, as data (kept apart from ``panels``).
        pooled: whether external runs were pooled into ``status`` (``--pool``).
        gated: why the row's raw "supported"/"not supported" was gated to "inconclusive (not
            validated)" (:mod:`tangentlab.report.gating`); empty when it was not.
        raw_status: the status the rules gave before gating (empty when not gated).
    """

    key: str
    title: str
    prediction: str
    section: str
    status: str
    reason: str
    rule: str
    test: str
    numbers: tuple[tuple[str, str], ...] = ()
    paper: str = ""
    sources: tuple[Source, ...] = ()
    panels: tuple[Panel, ...] = ()
    units: tuple[Unit, ...] = ()
    checks: tuple[CheckLine, ...] = ()
    figures: tuple[Path, ...] = ()
    depends_on: str | None = None
    error: str | None = None
    external_units: tuple[Unit, ...] = ()
    external_status: str | None = None
    external_reason: str = ""
    external_panels: tuple[Panel, ...] = ()
    pooled: bool = False
    gated: str = ""
    raw_status: str = ""

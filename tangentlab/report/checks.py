"""Recorded checks (theory ``verify.json``, synthetic and validation ``checks.json``) as typed lines.

Every line says which kind of error its tolerance bounds, read from what the check recorded:

- a check's own ``error_kind`` (or ``tolerance_kind``): ``relative``, ``absolute`` or
  ``standard errors`` (also ``se``, ``sigma``, ``z``);
- a validation-battery check's ``kind`` when it names one of those;
- a theory check's ``kind``, whose residual is defined by the derivation's ``Check`` record:
  ``symbolic`` (the simplified difference, exact), ``numeric`` (the largest relative error) and
  ``monte-carlo`` (the error in units of its tolerance scale, see the check's detail);
- otherwise ``tolerance (kind not recorded)``: the report does not guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tangentlab.report.tables import fmt

__all__ = ["CheckLine", "error_kind", "check_lines", "theory_check_lines", "UNKNOWN_KIND"]

UNKNOWN_KIND = "tolerance (kind not recorded)"

_ERROR_KINDS = {
    "relative": "relative error",
    "rel": "relative error",
    "relative error": "relative error",
    "absolute": "absolute error",
    "abs": "absolute error",
    "absolute error": "absolute error",
    "standard errors": "error in standard errors",
    "standard error": "error in standard errors",
    "se": "error in standard errors",
    "sigma": "error in standard errors",
    "z": "error in standard errors",
    "in standard errors": "error in standard errors",
}
#: Theory ``Check.kind`` -> what its residual is (from the Check record's definition).
_THEORY_KINDS = {
    "symbolic": "exact: simplified symbolic difference (absolute)",
    "numeric": "relative error",
    "monte-carlo": "Monte-Carlo error in units of its tolerance scale (see detail)",
}


def error_kind(check: Mapping[str, Any], *, theory: bool = False) -> str:
    """The kind of error a check's tolerance bounds, as recorded; :data:`UNKNOWN_KIND` if none."""
    for key in ("error_kind", "tolerance_kind"):
        v = check.get(key)
        if isinstance(v, str) and v.strip():
            return _ERROR_KINDS.get(v.strip().lower(), v.strip())
    kind = check.get("kind")
    if isinstance(kind, str) and kind.strip():
        k = kind.strip().lower()
        if theory and k in _THEORY_KINDS:
            return _THEORY_KINDS[k]
        if k in _ERROR_KINDS:
            return _ERROR_KINDS[k]
    return UNKNOWN_KIND


@dataclass(frozen=True)
class CheckLine:
    """One recorded check, ready to show: name, pass/fail, numbers and the kind of error."""

    name: str
    passed: bool
    measured: str
    target: str
    tolerance: str
    error_kind: str
    what: str = ""

    def text(self) -> str:
        """The check as one line: name, measured against target, tolerance with its kind of error."""
        tol = f"tolerance {self.tolerance}, {self.error_kind}" if self.tolerance != "n/a" else self.error_kind
        s = f"{'PASS' if self.passed else 'FAIL'}: measured {self.measured} vs target {self.target} ({tol})"
        return s + (f" [{self.what}]" if self.what else "")


def check_lines(checks: Sequence[Mapping[str, Any]]) -> tuple[CheckLine, ...]:
    """Synthetic or validation checks: ``measured`` against ``target`` (or ``predicted``)."""
    out = []
    for c in checks:
        target = c.get("target", c.get("predicted"))
        what = "; ".join(str(c[k]) for k in ("description", "detail") if c.get(k))
        out.append(CheckLine(str(c.get("name")), bool(c.get("passed")), fmt(c.get("measured")),
                             fmt(target), fmt(c.get("tolerance")), error_kind(c), what))
    return tuple(out)


def theory_check_lines(verify: Mapping[str, Any]) -> tuple[CheckLine, ...]:
    """Every derivation's checks from ``theory/verify.json``: residual against 0."""
    out = []
    for d in verify.get("derivations", []):
        name = str(d.get("name") or d.get("derivation"))
        for c in d.get("checks", []):
            out.append(CheckLine(f"{name}: {c.get('name')}", bool(c.get("passed")),
                                 fmt(c.get("residual")), "0", fmt(c.get("tolerance")),
                                 error_kind(c, theory=True), str(c.get("detail") or "")))
    return tuple(out)

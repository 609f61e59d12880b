"""Deliberate mutants of the verdict path, to show the end-to-end battery has teeth (issue 33).

A battery that passes an unmutated run must fail a broken one. Each mutant here breaks one piece
of the code the report's verdicts run through, in the way a plausible bug would:

- ``combine-first-unit``: a row reads its first unit only (``claims.rules.combine``);
- ``late-fixed-only``: weakens-late reads only the fixed proxy (the refit proxy is replaced by
  the fixed one, so the drift guard never speaks);
- ``narrow-intervals``: the enrichment intervals are half as wide, on the log scale the
  studentized interval is built on (``measure.batch_control_test``);
- ``causal-variance-only``: the causal double match loses its displacement half (the ``both``
  dose plan is built as the variance-only one: no noise, variance-matched strengths).

``EndToEndConfig.mutant`` names one; :func:`tangentlab.validate.end_to_end.simulate` runs every
simulation inside :func:`mutant` (in its own process too, with ``--nproc``), so the verdicts of a
mutated run come from the mutated code and nothing else. A mutant is *caught* when some check of
the run fails. The settings fingerprint includes the mutant, so a mutated run is never resumed
or merged into an unmutated one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import MappingProxyType

__all__ = ["MUTANTS", "mutant"]


def _combine_first_unit() -> contextlib.AbstractContextManager:
    from unittest import mock

    from tangentlab.claims import rules

    def first(outcomes):
        if not outcomes:
            return rules.Outcome(rules.INCONCLUSIVE, "no unit was measured")
        unit, out = next(iter(outcomes.items()))
        return rules.Outcome(out.status, f"{unit}: {out.status} ({out.reason}) [mutant: first unit]")

    return mock.patch.object(rules, "combine", first)


def _late_fixed_only() -> contextlib.AbstractContextManager:
    from unittest import mock

    from tangentlab.claims import rules

    original = rules.weakens_late_rule

    def fixed_only(fixed, refit=None, *, drift_angle=None):
        return original(fixed, fixed, drift_angle=drift_angle)

    return mock.patch.object(rules, "weakens_late_rule", fixed_only)


def _narrow_intervals() -> contextlib.AbstractContextManager:
    from unittest import mock

    import tangentlab.measure as measure

    original = measure.batch_control_test

    def narrow(*args, **kwargs):
        res = original(*args, **kwargs)
        v, lo, hi = res.enrichment, res.enrichment_ci_low, res.enrichment_ci_high
        if not all(x is not None and math.isfinite(x) and x > 0 for x in (v, lo, hi)):
            return res
        return replace(res, enrichment_ci_low=v * math.sqrt(lo / v),
                       enrichment_ci_high=v * math.sqrt(hi / v))

    return mock.patch.object(measure, "batch_control_test", narrow)


def _causal_variance_only() -> contextlib.AbstractContextManager:
    from unittest import mock

    from tangentlab.measure import causal_controls

    original = causal_controls.dose_plan

    def variance_only(*args, match="variance", **kwargs):
        plan = original(*args, match="variance" if match == "both" else match, **kwargs)
        return replace(plan, match=match)

    return mock.patch.object(causal_controls, "dose_plan", variance_only)


#: name -> (what it breaks, in words; the patch that breaks it).
MUTANTS: MappingProxyType = MappingProxyType({
    "combine-first-unit": ("a row reads its first unit only", _combine_first_unit),
    "late-fixed-only": ("weakens-late reads only the fixed proxy", _late_fixed_only),
    "narrow-intervals": ("enrichment intervals half as wide", _narrow_intervals),
    "causal-variance-only": ("the causal double match loses its displacement half",
                             _causal_variance_only),
})


@contextlib.contextmanager
def mutant(name: str) -> Iterator[None]:
    """Run the block with mutant ``name`` patched in (``""``: unmutated, nothing patched)."""
    if not name:
        yield
        return
    from tangentlab.errors import UnknownNameError

    if name not in MUTANTS:
        raise UnknownNameError(f"unknown mutant {name!r}; choose from {', '.join(MUTANTS)}")
    make: Callable[[], contextlib.AbstractContextManager] = MUTANTS[name][1]
    with make():
        yield

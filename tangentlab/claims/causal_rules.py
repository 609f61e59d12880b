"""The causal rows' rules: the paired ablation excess and the learning arms (issue 18).

Their texts are in :data:`tangentlab.claims.rules.RULES` with the others'. Pure functions of
plain numbers, like every rule. (The variance-only ``matched_ablation_rule`` of the causal check
before issue 18 is retired with the variance-matched controls, issue 34.)
"""

from __future__ import annotations

from tangentlab.claims.rules import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Interval,
    Outcome,
    _f,
    _ok,
)

__all__ = ["ablation_excess_rule", "learning_arms_rule",
           "ABLATION_MARGIN", "LEARNING_MARGIN"]


#: Equivalence margin of the ablation rule, as a fraction of the matched controls' loss increase.
ABLATION_MARGIN = 0.2


def ablation_excess_rule(excess: Interval | None, control: float | None, *,
                         displacement: Interval | None = None,
                         control_displacement: float | None = None,
                         both: Interval | None = None, control_both: float | None = None,
                         margin: float = ABLATION_MARGIN) -> Outcome:
    """Causal ablation: the paired excess of Q_T over matched controls; see ``RULES["ablation"]``.

    Args:
        excess: the paired excess at the largest dose matched on removed variance, with its
            interval (None: not stored, inconclusive).
        control: the matched controls' mean loss increase at that dose (the margin's unit).
        displacement: the same excess with the doses matched on displacement (None: a run that
            stored only the variance match; then that one decides alone).
        control_displacement: the displacement-matched controls' mean loss increase.
        both: the excess matched on removed variance *and* displacement (what decides when
            stored; the two arguments above are then descriptions).
        control_both: those controls' mean loss increase (the margin's unit).
        margin: the equivalence margin as a fraction of the controls' loss increase.
    """
    if both is not None and _ok(both.value):
        txt = f"{both.text()} (controls {_f(control_both)})"
        if not both.has_interval():
            return Outcome(INCONCLUSIVE, txt + "; an interval is missing")
        bound = margin * (abs(float(control_both)) if _ok(control_both) else 0.0)
        txt += f"; equivalence bound {_f(margin)} x |C| = {_f(bound)}"
        up, down = float(both.lo) > 0, float(both.hi) < bound
        if up and not down:
            return Outcome(SUPPORTED, txt + "; the interval lies above 0")
        if down and not up:
            return Outcome(NOT_SUPPORTED, txt + "; the interval lies below the bound")
        return Outcome(INCONCLUSIVE, txt + ("; a small excess: above 0 but below the bound"
                                            if up else "; the interval spans the bound"))
    if excess is None or not _ok(excess.value):
        return Outcome(INCONCLUSIVE, "no paired excess stored (a run from before the "
                                     "dose-response check, or no matched dose could be built)")
    disp = displacement if displacement is not None and _ok(displacement.value) else excess
    c_d = control_displacement if displacement is not None else control
    both = [excess] + ([disp] if disp is not excess else [])
    if not all(e.has_interval() for e in both):
        return Outcome(INCONCLUSIVE, "; ".join(e.text() for e in both) + "; an interval is missing")
    bound = margin * (abs(float(c_d)) if _ok(c_d) else 0.0)
    txt = (f"variance-matched {excess.text()} (controls {_f(control)})"
           + (f"; displacement-matched {disp.text()} (controls {_f(c_d)})" if disp is not excess
              else "") + f"; equivalence bound {_f(margin)} x |C| = {_f(bound)}")
    up, down = float(excess.lo) > 0, float(disp.hi) < bound
    if up and not down:
        return Outcome(SUPPORTED, txt + "; the variance-matched interval lies above 0")
    if down and not up:
        return Outcome(NOT_SUPPORTED, txt + "; the displacement-matched interval lies below the "
                                            "bound")
    why = "the two matches contradict each other" if up else "neither interval decides"
    return Outcome(INCONCLUSIVE, txt + f"; {why}")


#: Equivalence margin of the learning-arms rule, as a fraction of the unmodified arm's decrease.
LEARNING_MARGIN = 0.1


def learning_arms_rule(excess: Interval | None, unmodified: float | None, *,
                       margin: float = LEARNING_MARGIN) -> Outcome:
    """Learning needs the tangent directions; see ``RULES["learning-arms"]``.

    Args:
        excess: X = mean D(away from a control) - D(away from Q_T), with its interval
            (None: not stored).
        unmodified: D(U), the unmodified arm's held-out loss decrease (the margin's unit).
        margin: the equivalence margin as a fraction of D(U).
    """
    if excess is None or not _ok(excess.value):
        return Outcome(INCONCLUSIVE, "no learning-arms excess stored (a run from before the "
                                     "learning-arms test, or no rank-r control exists)")
    txt = f"{excess.text()}; unmodified decrease {_f(unmodified)}"
    if not _ok(unmodified) or float(unmodified) <= 0:
        return Outcome(INCONCLUSIVE, txt + "; the unmodified arm did not lower the held-out "
                                           "loss, so there is no learning to compare")
    if not excess.has_interval():
        return Outcome(INCONCLUSIVE, txt + "; an interval is missing")
    bound = margin * float(unmodified)
    txt += f"; equivalence bound {_f(margin)} x D(U) = {_f(bound)}"
    up, down = float(excess.lo) > 0, float(excess.hi) < bound
    if up and not down:
        return Outcome(SUPPORTED, txt + "; removing Q_T costs more learning than removing a "
                                        "control, interval above 0")
    if down and not up:
        return Outcome(NOT_SUPPORTED, txt + "; the interval lies below the bound")
    return Outcome(INCONCLUSIVE, txt + ("; a small excess: above 0 but below the bound"
                                        if up else "; the interval spans the bound"))

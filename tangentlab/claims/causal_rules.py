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


def _learning_leg(name: str, iv: Interval, bound: float) -> tuple[str, str]:
    """One leg of the learning-arms rule: its status and its text (``bound`` = margin x D(U))."""
    up, down = float(iv.lo) > 0, float(iv.hi) < bound
    if up and not down:
        return SUPPORTED, f"{name} {iv.text()} above 0"
    if down and not up:
        return NOT_SUPPORTED, f"{name} {iv.text()} below the bound"
    return INCONCLUSIVE, f"{name} {iv.text()} " + ("above 0 but below the bound" if up
                                                    else "spans the bound")


def learning_arms_rule(excess: Interval | None, unmodified: float | None, *,
                       onto: Interval | None = None, haar: Interval | None = None,
                       margin: float = LEARNING_MARGIN) -> Outcome:
    """Learning needs the tangent directions; see ``RULES["learning-arms"]``.

    Two legs (three where the Haar leg is stored), each an excess with its interval, against the
    same equivalence bound:

    Args:
        excess: the away leg, X = mean D(away from a control) - D(away from Q_T) (None: not
            stored).
        unmodified: D(U), the unmodified arm's held-out loss decrease (the margin's unit).
        onto: the onto leg, Y = D(onto Q_T) - mean D(onto a control) (None: not stored, as in a
            run from before the onto-control arms; then the row is inconclusive).
        haar: the Haar leg, H = (D(U) - D(away Q_T)) - r/(d - r) (D(U) - D(onto Q_T)), training
            inside Q_T against the mean over every rank-r subspace of its complement, to first order
            (None: not stored, as in a run from before it; the two legs decide alone).
        margin: the equivalence margin as a fraction of D(U).

    Supported when every leg's interval lies above 0 (and none below the bound); not supported
    when a leg's interval lies below the bound (and not above 0): the claim is the conjunction,
    so one leg shown absent refutes it; otherwise inconclusive.
    """
    if excess is None or not _ok(excess.value):
        return Outcome(INCONCLUSIVE, "no learning-arms excess stored (a run from before the "
                                     "learning-arms test, or no rank-r control exists)")
    if onto is None or not _ok(onto.value):
        return Outcome(INCONCLUSIVE, f"away leg {excess.text()}; no onto-control arms stored (a "
                                     "run from before them: without them the random-subspace "
                                     "objection is unanswered)")
    txt = f"unmodified decrease {_f(unmodified)}"
    if not _ok(unmodified) or float(unmodified) <= 0:
        return Outcome(INCONCLUSIVE, txt + "; the unmodified arm did not lower the held-out "
                                           "loss, so there is no learning to compare")
    stored = haar is not None and _ok(haar.value)
    named = [("away leg", excess), ("onto leg", onto)] + ([("Haar leg", haar)] if stored else [])
    if not all(iv.has_interval() for _, iv in named):
        return Outcome(INCONCLUSIVE, "; ".join(f"{n} {iv.text()}" for n, iv in named)
                       + f"; {txt}; an interval is missing")
    bound = margin * float(unmodified)
    legs = [_learning_leg(n, iv, bound) for n, iv in named]
    txt = "; ".join(t for _, t in legs) + f"; {txt}; equivalence bound {_f(margin)} x D(U) = {_f(bound)}"
    states = {s for s, _ in legs}
    if states == {SUPPORTED}:
        return Outcome(SUPPORTED, txt + "; removing Q_T costs more learning than removing a "
                                        "control, and training inside Q_T learns more than inside "
                                        "a control" + (" and than the Haar mean" if stored else ""))
    if NOT_SUPPORTED in states and SUPPORTED not in states:
        return Outcome(NOT_SUPPORTED, txt + "; a leg lies below the bound")
    if NOT_SUPPORTED in states:
        return Outcome(NOT_SUPPORTED, txt + "; the legs disagree, and the claim needs both")
    return Outcome(INCONCLUSIVE, txt + "; a leg is undecided")

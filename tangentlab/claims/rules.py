"""Verdict rules: the status word of each prediction, decided in code from stored numbers.

Every rule is a small pure function of plain numbers (so it can be tested on hand-made inputs),
and its text is in :data:`RULES` (documented in ``docs/report.md``). Status words:

- ``supported``: the measurement agrees with the prediction by the rule below;
- ``not supported``: it disagrees, by the same rule;
- ``inconclusive``: the numbers cannot decide (an interval overlaps the reference, or a
  required piece such as an interval is missing);
- ``not run``: the stage that produces the numbers did not finish (it failed or was skipped).

Combining several units (architectures, sites, extractors) into one row is an
intersection-union rule (issue 33): ``supported`` if every unit is supported, ``not supported``
only if every unit is not supported (the mirror of ``supported``), else ``inconclusive`` (units
that disagree, or any unit inconclusive). Either word then needs every unit to reach it, so the
row's chance of a wrong ``supported`` or a wrong ``not supported`` is at most one unit's: at
least one unit reaches it wrongly, and that unit alone does so at most at its own rate. (The
old rule, ``not supported`` if *any* unit was, added the units' error rates up: four units each
wrong 2.5% of the time read a wrong "not supported" about 10% of the time.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "SUPPORTED",
    "NOT_SUPPORTED",
    "INCONCLUSIVE",
    "NOT_RUN",
    "STATUS_WORDS",
    "RULES",
    "COMBINED",
    "Outcome",
    "combine",
    "checks_rule",
    "enrichment_rule",
    "bucket_rule",
    "greater_than_control_rule",
    "negative_correlation_rule",
    "weakens_late_rule",
    "ProxyTrajectory",
    "p_floor",
    "Interval",
]

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
NOT_RUN = "not run"
STATUS_WORDS: tuple[str, ...] = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_RUN)

#: How a row's units combine (the end of the per-unit rules' texts; see :func:`combine`).
COMBINED = (
    "Combined over architectures and sites by intersection-union: the row is supported if every "
    "unit is supported, not supported only if every unit is not supported, otherwise (units "
    "that disagree, or any unit inconclusive) inconclusive; so the row's rate of a wrong \"not "
    "supported\" (and of a wrong \"supported\") is at most one unit's."
)

#: The rule behind each status word, per row (also in docs/report.md; a test keeps them equal).
RULES: dict[str, str] = {
    "checks": (
        "supported if every check the stage recorded for this prediction passed (each compares "
        "a measured number with the theory's prediction within the tolerance stated in the "
        "experiment's config); not supported if any such check failed; inconclusive if the "
        "stage recorded no check for it."
    ),
    "enrichment": (
        "At the last checkpoint, with reference = max(1, enrichment at step 0): supported if the "
        "enrichment CI lower bound is above the reference and the p-value is at its floor "
        "1/(1+n_controls); not supported if the CI upper bound is below the reference; "
        "otherwise (CI overlapping the reference, p above its floor, or no CI stored) "
        "inconclusive. Heavy tails: where the unit's per-batch ratio CV lies above the range in "
        "which the interval was validated (ratio_cv above its band_high, the note "
        "cv_outside_validated_range), the interval runs low, with the truth above it more often "
        "than the nominal one-sided rate; a CI upper bound below the reference then does not "
        "show the enrichment is below it, so such a unit reads inconclusive instead of not "
        "supported. Supported stands there: a wrong supported needs the truth below the CI, "
        "the side the heavy tails do not make more likely. " + COMBINED
    ),
    "frequency-buckets": (
        "At the last checkpoint, comparing the most frequent bucket F with the least frequent "
        "bucket R: supported if F has the largest enrichment of all buckets and F's CI lower "
        "bound is above R's CI upper bound; not supported if F's CI upper bound is below R's "
        "CI lower bound; otherwise (overlapping CIs, or no CIs) inconclusive."
    ),
    "isoscore": (
        "At the last checkpoint, T = delta IsoScore* after removing Q_T and N = the mean over "
        "controls: with intervals, supported if T's lower bound is above N's upper bound, not "
        "supported if T's upper bound is below N's lower bound, else inconclusive; with point "
        "values only, supported if T > N and not supported if T <= N."
    ),
    "frequency-distance": (
        "Spearman rho of log-frequency against occurrence spread at the last checkpoint: "
        "supported if its CI upper bound is below 0 and rho is not above the step-0 rho; "
        "inconclusive if the CI is below 0 but rho is above the step-0 rho, or if the CI "
        "contains 0; not supported if the CI lower bound is above 0."
    ),
    "weakens-late": (
        "Read on the fixed proxy and on the refit proxy, each over its trained checkpoints (step "
        "> 0). Late window = the checkpoints after the early/late cut the measurement recorded "
        "(its late window where it records one); peak = the checkpoint with the largest "
        "enrichment; the late window's end = its last checkpoint (or the late-window aggregate "
        "when the run stores a confidence interval for it and not the checkpoints). A proxy "
        "declines if its peak lies before the late window, the late window's end has its CI "
        "upper bound below the peak's CI lower bound, and the late window does not grow on the "
        "way (its last checkpoint's value is not above its first's); it rises if the late "
        "window grows: its last checkpoint's CI lower bound above its first checkpoint's CI "
        "upper bound. Both read the late window itself, so they do not depend on where the cut "
        "falls between checkpoints: a plateau reached before or at the cut is neither (a "
        "plateau neither weakens nor grows late, so it reads inconclusive), and rising needs at "
        "least two late-window checkpoints. Supported if the fixed proxy declines and either "
        "the refit proxy declines too or the decline is larger than the measured drift can "
        "explain (every late-window CI upper bound is below cos^2(largest principal angle "
        "between the fixed and refit proxies in the late window) times the peak's CI lower "
        "bound: a rotation by that angle cannot lower a fixed proxy's energy below that "
        "share). Not supported if a proxy rises and none declines: the enrichment still grows "
        "late in training. Otherwise (overlapping intervals, a plateau, a peak inside the late "
        "window, a fixed-proxy decline that the refit proxy does not show and the drift could "
        "explain, no checkpoint after the cut, or no interval stored) inconclusive."
    ),
    "ablation": (
        "At the last causal checkpoint, E = the paired excess matched on both removed variance "
        "and displacement (ablation_excess_both): the loss increase when Q_T is edited so that "
        "it removes a dose v of activation variance and moves the edited rows by a mean squared "
        "distance v (a shrink along Q_T plus noise inside span(Q_T)), minus the mean loss "
        "increase over rank-r controls (spectrum-weighted draws from the complement of Q_T) "
        "edited the same way to the same v, on the same edited positions; v is the largest "
        "variance every control can remove (each control at v is a full mean-ablation); the "
        "interval's replicates resample the causal test batches and redraw the controls; C = "
        "the controls' mean loss increase (ablation_loss_matched_both_mean). Supported if E's "
        "CI lower bound is above 0; not supported if E's CI upper bound is below 0.2 |C| "
        "(ablating Q_T costs at most a fifth more than controls that remove as much variance "
        "and move the rows as far: an equivalence claim, true when the loss depends on "
        "direction-blind amounts only); otherwise (neither, or both) inconclusive. A run from "
        "before the double match (no ablation_excess_both) reads the older pair: supported if "
        "the variance-matched excess (ablation_excess) has its CI lower bound above 0, not "
        "supported if the displacement-matched excess (ablation_excess_displacement) has its "
        "upper bound below 0.2 |C_D|, else inconclusive; a run without any paired excess is "
        "inconclusive."
    ),
    "learning-arms": (
        "At the last causal checkpoint, from the checkpoint every arm trains for the same SGD "
        "steps on the same batches at one shared learning rate, with the site's activation "
        "gradient projected away from Q_T (arm A) or onto it (arm O), away from or onto each "
        "of several rank-r Haar controls drawn from the complement of Q_T (arms C_j and "
        "O_j), or left alone (arm U); D = the held-out loss decrease (test-half batches, before "
        "minus after). Two legs: X = mean_j D(C_j) - D(A) (learning_excess: how much more "
        "learning survives removing a control than removing Q_T) and Y = D(O) - mean_j D(O_j) "
        "(learning_excess_onto: how much more training inside Q_T learns than training inside "
        "a control, the answer to \"any low-rank subspace helps\"); the intervals' replicates "
        "resample the held-out batches and redraw the controls. A third, the Haar leg H = (D(U) "
        "- D(A)) - r/(d - r) (D(U) - D(O)) (learning_excess_onto_haar), compares training inside "
        "Q_T with the mean over every rank-r subspace of its complement, exact to first order in "
        "the step (where what the parameters after the site learn, D(O) + D(A) - D(U), cancels) "
        "and free of the noise of drawing a few controls; its replicates resample the held-out "
        "batches. A leg is up if its CI lower bound is above 0 and down if its CI upper "
        "bound is below 0.1 D(U) (at most a tenth of the unmodified learning: an equivalence "
        "claim). Supported if every stored leg is up (and none down); not supported if a leg "
        "is down and not up (the claim is the conjunction, so one leg shown absent refutes it); "
        "otherwise inconclusive; inconclusive too when the unmodified arm did not lower the "
        "held-out loss (D(U) <= 0), "
        "an interval is missing, or the run stored no onto-control arms. " + COMBINED
    ),
}


@dataclass(frozen=True)
class Interval:
    """A labelled point estimate with its interval (a checkpoint, a window, a bucket)."""

    label: str
    value: float | None
    lo: float | None = None
    hi: float | None = None

    def has_interval(self) -> bool:
        """True when both ends of the interval are known."""
        return _ok(self.lo) and _ok(self.hi)

    def text(self) -> str:
        """The estimate as text, e.g. ``3.1 [2.8, 3.4]``."""
        iv = f" [CI {_f(self.lo)}, {_f(self.hi)}]" if self.has_interval() else " (no CI stored)"
        return f"{self.label}: {_f(self.value)}{iv}"


@dataclass(frozen=True)
class Outcome:
    """A status word and the one sentence (with numbers) that justifies it."""

    status: str
    reason: str


def _f(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    x = float(x)
    if x != 0 and (abs(x) >= 1e4 or abs(x) < 1e-3):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def _ok(x: float | None) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def combine(outcomes: Mapping[str, Outcome]) -> Outcome:
    """One status over several units by intersection-union (see the module docstring).

    ``supported`` / ``not supported`` only when every unit says so, else ``inconclusive``. The
    reason lists every unit with its own reason; when the units disagree it first says which
    units read which word.
    """
    if not outcomes:
        return Outcome(INCONCLUSIVE, "no unit was measured")
    statuses = [o.status for o in outcomes.values()]
    every = "; ".join(f"{unit}: {o.status} ({o.reason})" for unit, o in outcomes.items())
    for word in (SUPPORTED, NOT_SUPPORTED):
        if all(s == word for s in statuses):
            return Outcome(word, every)
    if len(set(statuses)) == 1:  # every unit inconclusive (or not run): nothing to disagree on
        return Outcome(INCONCLUSIVE, every)
    groups = {w: [u for u, o in outcomes.items() if o.status == w] for w in dict.fromkeys(statuses)}
    said = "; ".join(f"{w}: {', '.join(us)}" for w, us in groups.items())
    return Outcome(INCONCLUSIVE, f"the units disagree ({said}), and a row reads supported or not "
                                 f"supported only when every unit does; {every}")


def checks_rule(checks: Sequence[Mapping[str, object]]) -> Outcome:
    """Status from recorded theory-vs-measurement checks (``passed`` flags)."""
    if not checks:
        return Outcome(INCONCLUSIVE, "the stage recorded no check for this prediction")
    failed = [str(c.get("name")) for c in checks if not bool(c.get("passed"))]
    if failed:
        return Outcome(NOT_SUPPORTED, f"{len(failed)} of {len(checks)} checks failed: "
                                      + ", ".join(failed))
    return Outcome(SUPPORTED, f"all {len(checks)} checks passed")


def p_floor(n_controls: int | None) -> float | None:
    """The smallest p-value ``(1 + #{E_N >= E_T})/(1 + n)`` can take: ``1/(1+n)``."""
    if n_controls is None or n_controls < 1:
        return None
    return 1.0 / (1.0 + n_controls)


def enrichment_rule(
    enrichment: float | None,
    ci_low: float | None,
    ci_high: float | None,
    p_value: float | None,
    n_controls: int | None,
    step0: float | None,
    *,
    ratio_cv: float | None = None,
    cv_limit: float | None = None,
) -> Outcome:
    """Enrichment at the last checkpoint against max(1, step-0 enrichment); see RULES.

    ``ratio_cv``: the unit's per-batch ratio CV (the ``ratio_cv`` row); ``cv_limit``: the
    largest CV at which the interval was validated (that row's ``band_high``,
    ``tangentlab.measure.tails.VALIDATED_RATIO_CV``). Above it the batches are heavy-tailed and
    the interval runs low: in the coverage study the misses are one-sided, the truth *above*
    the interval (17% of the time at a median CV of 1.97 against the nominal 2.5%, docs/
    empirical.md; for issue 33, ``coverage_study(n_sims=200, tail_sigma=2.0 / 2.5, seed=0)``:
    median CV 0.95 / 0.92, truth above 12.5% / 22%, below 0% / 0.5%). "Not supported" (upper bound below the reference) is exactly the reading
    such a miss produces, so it is withheld: inconclusive, saying why. "Supported" (lower bound
    above the reference) goes wrong only when the truth lies *below* the interval, which the
    heavy tails do not make more frequent, so it stands (its reason names the flag).
    """
    if not _ok(enrichment):
        return Outcome(INCONCLUSIVE, "no enrichment value at the last checkpoint")
    ref = max(1.0, float(step0)) if _ok(step0) else 1.0
    ref_txt = (f"max(1, step-0 {_f(step0)}) = {_f(ref)}" if _ok(step0)
               else "1 (no step-0 value stored)")
    floor = p_floor(n_controls)
    at_floor = _ok(p_value) and floor is not None and float(p_value) <= floor * (1 + 1e-9)
    ptxt = f"p = {_f(p_value)}" + (f" (floor {_f(floor)})" if floor is not None else " (floor unknown)")
    base = f"enrichment {_f(enrichment)}"
    if not (_ok(ci_low) and _ok(ci_high)):
        return Outcome(INCONCLUSIVE, f"{base} with no CI stored; reference {ref_txt}; {ptxt}")
    base += f" [CI {_f(ci_low)}, {_f(ci_high)}]"
    heavy = _ok(ratio_cv) and _ok(cv_limit) and float(ratio_cv) > float(cv_limit)
    cv_txt = (f"per-batch ratio CV {_f(ratio_cv)} lies outside the range where the interval was "
              f"validated (<= {_f(cv_limit)}; cv_outside_validated_range)")
    if float(ci_high) < ref:
        if heavy:
            return Outcome(INCONCLUSIVE, f"{base} lies below the reference {ref_txt}; {ptxt}; but "
                                         f"the {cv_txt}: there the interval runs low, with the "
                                         "truth above it more often than the nominal one-sided "
                                         "rate, so it cannot show the enrichment is below the "
                                         "reference")
        return Outcome(NOT_SUPPORTED, f"{base} lies below the reference {ref_txt}; {ptxt}")
    if float(ci_low) > ref and at_floor:
        note = (f"; the {cv_txt}: the interval may run low, which leaves a lower bound above the "
                "reference conservative" if heavy else "")
        return Outcome(SUPPORTED, f"{base} lies above the reference {ref_txt}; {ptxt}{note}")
    why = "the CI overlaps the reference" if float(ci_low) <= ref else "p is not at its floor"
    return Outcome(INCONCLUSIVE, f"{base}, reference {ref_txt}, {ptxt}: {why}")


def bucket_rule(buckets: Sequence[tuple[str, float | None, float | None, float | None]]) -> Outcome:
    """Enrichment by frequency bucket, ordered from most to least frequent.

    Args:
        buckets: ``(label, enrichment, ci_low, ci_high)`` from the most frequent bucket to the
            least frequent one (at least two).
    """
    rows = [b for b in buckets if _ok(b[1])]
    if len(rows) < 2:
        return Outcome(INCONCLUSIVE, "fewer than two frequency buckets were measured")
    (fl, fe, flo, fhi), (rl, re, rlo, rhi) = rows[0], rows[-1]
    top = max(rows, key=lambda b: float(b[1]))
    txt = (f"most frequent {fl}: {_f(fe)} [{_f(flo)}, {_f(fhi)}]; least frequent {rl}: "
           f"{_f(re)} [{_f(rlo)}, {_f(rhi)}]; largest: {top[0]}")
    if not all(_ok(v) for v in (flo, fhi, rlo, rhi)):
        return Outcome(INCONCLUSIVE, txt + "; no CIs stored")
    if float(fhi) < float(rlo):
        return Outcome(NOT_SUPPORTED, txt + "; the most frequent bucket is below the least frequent")
    if top[0] == fl and float(flo) > float(rhi):
        return Outcome(SUPPORTED, txt)
    if top[0] != fl:
        return Outcome(INCONCLUSIVE, txt + "; the most frequent bucket is not the largest")
    return Outcome(INCONCLUSIVE, txt + "; the CIs overlap")


def greater_than_control_rule(
    tangent: float | None,
    tangent_lo: float | None,
    tangent_hi: float | None,
    control: float | None,
    control_lo: float | None,
    control_hi: float | None,
    *,
    what: str,
) -> Outcome:
    """Tangent value against the control mean (used by the isoscore and ablation rows)."""
    if not (_ok(tangent) and _ok(control)):
        return Outcome(INCONCLUSIVE, f"{what}: tangent or control value missing")
    t, c = float(tangent), float(control)
    has_t = _ok(tangent_lo) and _ok(tangent_hi)
    has_c = _ok(control_lo) and _ok(control_hi)
    txt = (f"{what}: tangent {_f(t)}" + (f" [{_f(tangent_lo)}, {_f(tangent_hi)}]" if has_t else "")
           + f" vs controls {_f(c)}" + (f" [{_f(control_lo)}, {_f(control_hi)}]" if has_c else ""))
    if has_t or has_c:
        t_lo = float(tangent_lo) if has_t else t
        t_hi = float(tangent_hi) if has_t else t
        c_lo = float(control_lo) if has_c else c
        c_hi = float(control_hi) if has_c else c
        if t_lo > c_hi:
            return Outcome(SUPPORTED, txt)
        if t_hi < c_lo:
            return Outcome(NOT_SUPPORTED, txt)
        return Outcome(INCONCLUSIVE, txt + "; the intervals overlap")
    if t > c:
        return Outcome(SUPPORTED, txt + " (point values, no interval stored)")
    return Outcome(NOT_SUPPORTED, txt + " (point values, no interval stored)")


def negative_correlation_rule(
    rho: float | None, ci_low: float | None, ci_high: float | None, step0: float | None
) -> Outcome:
    """Frequency-distance correlation (predicted negative); see RULES."""
    if not _ok(rho):
        return Outcome(INCONCLUSIVE, "no correlation stored at the last checkpoint")
    s0 = f"; step 0: {_f(step0)}" if _ok(step0) else "; no step-0 value"
    if not (_ok(ci_low) and _ok(ci_high)):
        return Outcome(INCONCLUSIVE, f"rho {_f(rho)} with no CI stored{s0}")
    txt = f"rho {_f(rho)} [CI {_f(ci_low)}, {_f(ci_high)}]{s0}"
    if float(ci_low) > 0:
        return Outcome(NOT_SUPPORTED, txt + "; positive")
    if float(ci_high) < 0:
        if _ok(step0) and float(rho) > float(step0):
            return Outcome(INCONCLUSIVE, txt + "; negative, but not below the step-0 value")
        return Outcome(SUPPORTED, txt)
    return Outcome(INCONCLUSIVE, txt + "; the CI contains 0")


@dataclass(frozen=True)
class ProxyTrajectory:
    """One proxy's enrichment over training, as the weakens-late rule reads it.

    Attributes:
        name: ``fixed`` or ``refit``.
        peak: the trained checkpoint (step > 0) with the largest enrichment, with its CI.
        peak_in_late: whether the peak lies inside the late window.
        before: the trained checkpoints before the late window, each with its CI.
        late: the late-window enrichment: one aggregate, or each late-window checkpoint.
        late_points: each late-window checkpoint with its own CI, in step order (what the
            late window's slope and its end are read from; empty: read ``late`` when it holds
            the checkpoints themselves).
    """

    name: str
    peak: Interval | None
    peak_in_late: bool
    before: Sequence[Interval]
    late: Sequence[Interval]
    late_points: Sequence[Interval] = ()

    def points(self) -> list[Interval]:
        """The late-window checkpoints with a value, in step order."""
        pts = self.late_points or (self.late if len(self.late) > 1 else ())
        return [x for x in pts if _ok(x.value)]

    def text(self) -> str:
        """The peak and the late window as text."""
        late = [x for x in self.late if _ok(x.value)]
        peak = self.peak.text() if self.peak is not None else "none"
        return (f"{self.name} proxy: peak {peak}; late window "
                + ("; ".join(x.text() for x in late) or "empty"))


def _trend(p: ProxyTrajectory | None) -> str:
    """``declines``, ``rises``, ``flat`` (intervals overlap) or why it cannot be read.

    Declines: the peak lies before the late window, the late window ends below it (its last
    checkpoint's CI upper bound, or the late aggregate's, below the peak's CI lower bound) and
    does not grow on the way (its last checkpoint is not above its first). Rises: the late
    window grows, its last checkpoint's CI lower bound above its first checkpoint's CI upper
    bound. Both read the late window alone, so where the cut falls between two checkpoints does
    not matter; a plateau reached before or at the cut is flat.
    """
    if p is None or p.peak is None or not _ok(p.peak.value):
        return "missing"
    late = [x for x in p.late if _ok(x.value)]
    if not late:
        return "no late window"
    pts = p.points()
    if not (p.peak.has_interval() and all(x.has_interval() for x in late + pts)):
        return "no interval"
    end = pts[-1] if pts else late[-1]
    growing = len(pts) >= 2 and float(pts[-1].value) > float(pts[0].value)
    if not p.peak_in_late and not growing and float(end.hi) < float(p.peak.lo):
        return "declines"
    if len(pts) >= 2 and float(pts[-1].lo) > float(pts[0].hi):
        return "rises"
    return "flat"


def weakens_late_rule(fixed: ProxyTrajectory | None, refit: ProxyTrajectory | None = None, *,
                      drift_angle: float | None = None) -> Outcome:
    """Enrichment weakens late in training, read on both proxies; see ``RULES["weakens-late"]``.

    Args:
        fixed: the fixed proxy's trajectory (the paper's protocol).
        refit: the proxy refitted at every checkpoint, or None when the run has none.
        drift_angle: the largest principal angle (radians) between the fixed and the refit proxy
            over the late window, or None when not stored.
    """
    tf, tr = _trend(fixed), _trend(refit)
    if tf == "missing":
        return Outcome(INCONCLUSIVE, "no trained checkpoint has an enrichment value")
    txt = fixed.text() + "; " + (refit.text() if refit is not None else "no refit proxy stored")
    dtxt = (f"; largest late drift {math.degrees(float(drift_angle)):.3g} deg"
            if _ok(drift_angle) else "; no drift stored")
    txt += dtxt
    if tf == "declines":
        if tr == "declines":
            return Outcome(SUPPORTED, txt + "; both proxies decline, intervals apart")
        if _ok(drift_angle):
            share = math.cos(float(drift_angle)) ** 2
            late = [x for x in fixed.late if _ok(x.value)]
            if all(float(x.hi) < share * float(fixed.peak.lo) for x in late):
                return Outcome(SUPPORTED, txt + f"; the fixed proxy declines below {_f(share)} "
                                                "x its peak's CI lower bound, more than the "
                                                "drift can explain")
        return Outcome(INCONCLUSIVE, txt + f"; the fixed proxy declines but the refit proxy "
                                           f"does not ({tr}) and the drift could explain it")
    if "rises" in (tf, tr) and "declines" not in (tf, tr):
        who = [n for n, t in (("fixed", tf), ("refit", tr)) if t == "rises"]
        what = f"the {who[0]} proxy rises" if len(who) == 1 else "both proxies rise"
        return Outcome(NOT_SUPPORTED, txt + f"; {what} through the late window (its last "
                                             "checkpoint above its first, intervals apart)")
    why = {"no late window": "no checkpoint after the early/late cut",
           "no interval": "an interval is missing",
           "flat": "the intervals overlap (a plateau neither weakens nor grows late)"}.get(tf, tf)
    if tf == "flat" and fixed.peak_in_late:
        why = ("the peak lies inside the late window and the intervals overlap (a plateau "
               "neither weakens nor grows late)")
    if tf == "flat" and len(fixed.points()) < 2:
        why += "; one late-window checkpoint cannot show the late window growing"
    return Outcome(INCONCLUSIVE, txt + "; " + why)


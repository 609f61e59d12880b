"""The verdict rules on small hand-made numbers: each status word is reachable, and a rule that
must say "not supported" does."""

from __future__ import annotations

import math

import pytest

from tangentlab.claims import causal_rules as CR
from tangentlab.claims import rules as R


def test_status_words_are_the_documented_four():
    assert R.STATUS_WORDS == ("supported", "not supported", "inconclusive", "not run")


def test_checks_rule():
    assert R.checks_rule([{"name": "a", "passed": True}, {"name": "b", "passed": True}]).status == R.SUPPORTED
    out = R.checks_rule([{"name": "a", "passed": True}, {"name": "b", "passed": False}])
    assert out.status == R.NOT_SUPPORTED and "b" in out.reason
    assert R.checks_rule([]).status == R.INCONCLUSIVE


def test_p_floor():
    assert R.p_floor(20) == pytest.approx(1 / 21)
    assert R.p_floor(None) is None and R.p_floor(0) is None


class TestEnrichment:
    def test_supported_needs_ci_above_step0_and_one_and_p_at_floor(self):
        out = R.enrichment_rule(3.0, 2.5, 3.5, 1 / 21, 20, step0=1.1)
        assert out.status == R.SUPPORTED
        assert "2.5" in out.reason and "0.0476" in out.reason

    def test_not_supported_when_below_one(self):
        assert R.enrichment_rule(0.8, 0.7, 0.9, 0.9, 20, step0=1.0).status == R.NOT_SUPPORTED

    def test_not_supported_when_training_lowered_it_below_step0(self):
        # tied embeddings: step 0 already enriched at 5; trained 3 [2.8, 3.2] is significantly lower
        out = R.enrichment_rule(3.0, 2.8, 3.2, 1 / 21, 20, step0=5.0)
        assert out.status == R.NOT_SUPPORTED and "step-0 5" in out.reason

    def test_inconclusive_when_ci_overlaps_reference(self):
        assert R.enrichment_rule(1.3, 0.9, 1.7, 1 / 21, 20, step0=1.0).status == R.INCONCLUSIVE

    def test_inconclusive_when_p_above_floor(self):
        out = R.enrichment_rule(3.0, 2.5, 3.5, 0.2, 20, step0=1.0)
        assert out.status == R.INCONCLUSIVE and "floor" in out.reason

    def test_inconclusive_without_ci_or_without_value(self):
        assert R.enrichment_rule(3.0, None, None, 1 / 21, 20, step0=1.0).status == R.INCONCLUSIVE
        assert R.enrichment_rule(None, None, None, None, 20, step0=None).status == R.INCONCLUSIVE

    def test_missing_step0_falls_back_to_one(self):
        out = R.enrichment_rule(3.0, 2.5, 3.5, 1 / 21, 20, step0=None)
        assert out.status == R.SUPPORTED and "no step-0" in out.reason

    def test_heavy_tails_withhold_not_supported(self):
        # issue 33: above the validated per-batch ratio CV the interval runs low (truth above
        # it), so an upper bound below the reference is not evidence: inconclusive, saying why
        out = R.enrichment_rule(0.8, 0.7, 0.9, 0.9, 20, step0=1.0, ratio_cv=2.7, cv_limit=0.9)
        assert out.status == R.INCONCLUSIVE
        assert "ratio CV 2.7" in out.reason and "cv_outside_validated_range" in out.reason
        assert "runs low" in out.reason and "0.9" in out.reason
        # at the limit itself the interval is validated: not supported as before
        at = R.enrichment_rule(0.8, 0.7, 0.9, 0.9, 20, step0=1.0, ratio_cv=0.9, cv_limit=0.9)
        assert at.status == R.NOT_SUPPORTED
        # no CV stored, or no limit: as before
        assert R.enrichment_rule(0.8, 0.7, 0.9, 0.9, 20, step0=1.0, ratio_cv=None,
                                 cv_limit=0.9).status == R.NOT_SUPPORTED

    def test_heavy_tails_leave_supported_standing(self):
        # a low-running interval whose lower bound is still above the reference is conservative
        out = R.enrichment_rule(3.0, 2.5, 3.5, 1 / 21, 20, step0=1.0, ratio_cv=2.7, cv_limit=0.9)
        assert out.status == R.SUPPORTED and "cv_outside_validated_range" in out.reason
        assert "cv_outside" not in R.enrichment_rule(3.0, 2.5, 3.5, 1 / 21, 20, step0=1.0,
                                                     ratio_cv=0.5, cv_limit=0.9).reason

    def test_the_rule_text_says_how_heavy_tails_are_read(self):
        text = R.RULES["enrichment"]
        assert "cv_outside_validated_range" in text and "inconclusive instead of not supported" in text
        assert "Supported stands there" in text


class TestBuckets:
    def test_supported_when_most_frequent_is_largest_and_separated(self):
        rows = [("q4", 5.0, 4.5, 5.5), ("q2", 3.0, 2.5, 3.5), ("q0", 1.5, 1.2, 1.8)]
        assert R.bucket_rule(rows).status == R.SUPPORTED

    def test_not_supported_when_rare_tokens_enrich_more(self):
        rows = [("q4", 1.2, 1.0, 1.4), ("q2", 2.0, 1.8, 2.2), ("q0", 4.0, 3.5, 4.5)]
        out = R.bucket_rule(rows)
        assert out.status == R.NOT_SUPPORTED and "below the least frequent" in out.reason

    def test_inconclusive_when_overlapping_or_not_largest(self):
        assert R.bucket_rule([("q4", 2.0, 1.0, 3.0), ("q0", 1.8, 1.0, 2.6)]).status == R.INCONCLUSIVE
        middle_largest = [("q4", 3.0, 2.9, 3.1), ("q2", 6.0, 5.0, 7.0), ("q0", 1.0, 0.9, 1.1)]
        assert R.bucket_rule(middle_largest).status == R.INCONCLUSIVE
        assert R.bucket_rule([("q4", 3.0, None, None), ("q0", 1.0, None, None)]).status == R.INCONCLUSIVE
        assert R.bucket_rule([("q4", 3.0, 2.0, 4.0)]).status == R.INCONCLUSIVE


class TestVersusControl:
    def test_intervals(self):
        f = R.greater_than_control_rule
        assert f(0.5, 0.4, 0.6, 0.1, 0.05, 0.15, what="x").status == R.SUPPORTED
        assert f(0.1, 0.05, 0.15, 0.5, 0.4, 0.6, what="x").status == R.NOT_SUPPORTED
        assert f(0.3, 0.1, 0.5, 0.25, 0.2, 0.3, what="x").status == R.INCONCLUSIVE
        # only the control has an interval
        assert f(0.5, None, None, 0.1, 0.05, 0.15, what="x").status == R.SUPPORTED

    def test_point_values(self):
        f = R.greater_than_control_rule
        assert f(0.2, None, None, 0.1, None, None, what="x").status == R.SUPPORTED
        out = f(0.1, None, None, 0.1, None, None, what="x")
        assert out.status == R.NOT_SUPPORTED and "no interval" in out.reason
        assert f(None, None, None, 0.1, None, None, what="x").status == R.INCONCLUSIVE


class TestNegativeCorrelation:
    def test_statuses(self):
        f = R.negative_correlation_rule
        assert f(-0.5, -0.6, -0.4, step0=-0.05).status == R.SUPPORTED
        assert f(0.3, 0.2, 0.4, step0=0.0).status == R.NOT_SUPPORTED
        assert f(-0.1, -0.3, 0.1, step0=0.0).status == R.INCONCLUSIVE
        # negative but already more negative at initialization: not credited to training
        assert f(-0.3, -0.4, -0.2, step0=-0.5).status == R.INCONCLUSIVE
        assert f(-0.3, None, None, step0=None).status == R.INCONCLUSIVE


def test_combine():
    s, n, i = (R.Outcome(R.SUPPORTED, "a"), R.Outcome(R.NOT_SUPPORTED, "b"), R.Outcome(R.INCONCLUSIVE, "c"))
    assert R.combine({"enc": s, "dec": s}).status == R.SUPPORTED
    assert R.combine({"enc": n, "dec": n}).status == R.NOT_SUPPORTED
    assert R.combine({"enc": s, "dec": n}).status == R.INCONCLUSIVE  # issue 33: units disagree
    assert R.combine({"enc": s, "dec": i}).status == R.INCONCLUSIVE
    assert R.combine({"enc": n, "dec": i}).status == R.INCONCLUSIVE
    assert R.combine({"enc": i, "dec": i}).status == R.INCONCLUSIVE
    assert R.combine({}).status == R.INCONCLUSIVE
    assert "enc: supported (a)" in R.combine({"enc": s, "dec": i}).reason


class TestCombineIntersectionUnion:
    """Issue 33: "not supported" only when every unit says so (the mirror of "supported")."""

    S, N = R.Outcome(R.SUPPORTED, "lo 2.1 > 1"), R.Outcome(R.NOT_SUPPORTED, "hi 0.8 < 1")

    def test_one_not_supported_among_three_supported_is_inconclusive(self):
        # the old rule read "not supported" here (any unit not supported)
        units = {"enc a": self.N, "enc b": self.S, "dec a": self.S, "dec b": self.S}
        out = R.combine(units)
        assert out.status == R.INCONCLUSIVE
        # the reason says in words which units disagreed, and still lists every unit
        assert "the units disagree (not supported: enc a; supported: enc b, dec a, dec b)" in out.reason
        for label, o in units.items():
            assert f"{label}: {o.status} ({o.reason})" in out.reason

    def test_every_unit_not_supported_is_not_supported(self):
        out = R.combine({"enc": self.N, "dec": self.N})
        assert out.status == R.NOT_SUPPORTED and "disagree" not in out.reason
        assert "enc: not supported (hi 0.8 < 1)" in out.reason and "dec: not supported" in out.reason

    def test_the_row_wrong_not_supported_rate_is_at_most_one_units(self):
        # Simulated: 4 units, each independently reads "not supported" wrongly with probability
        # 0.025 (else "supported"). Through combine() the row reads it only when all four do:
        # exactly 0.025^4 = 3.9e-7, far below one unit's 0.025 (the old any-unit rule: 1 -
        # 0.975^4 = 0.096). 40000 rows: at the bound 0.025 the count's sd is 31, so 0.025 is
        # checked with room for the simulation's own error; the exact value is checked too.
        import numpy as np

        rng = np.random.default_rng(33)
        wrong = rng.random((40_000, 4)) < 0.025
        patterns, counts = np.unique(wrong, axis=0, return_counts=True)
        n_ns = sum(c for pat, c in zip(patterns, counts)
                   if R.combine({f"u{j}": self.N if w else self.S for j, w in enumerate(pat)}).status
                   == R.NOT_SUPPORTED)
        assert n_ns / 40_000 <= 0.025
        assert n_ns == int(wrong.all(axis=1).sum())  # only the all-wrong rows, 0.025^4 expected
        # exact, over every one of the 16 patterns weighted by its probability
        exact = sum(0.025 ** sum(pat) * 0.975 ** (4 - sum(pat))
                    for pat in np.ndindex(2, 2, 2, 2)
                    if R.combine({f"u{j}": self.N if w else self.S for j, w in enumerate(pat)}).status
                    == R.NOT_SUPPORTED)
        assert exact == pytest.approx(0.025 ** 4) and exact <= 0.025

    def test_rule_texts_state_the_row_level_bound(self):
        for key in ("enrichment", "learning-arms"):
            assert R.RULES[key].endswith(R.COMBINED)
        assert "not supported only if every unit is not supported" in R.COMBINED
        assert "at most one unit's" in R.COMBINED


def test_docs_state_every_rule_verbatim():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "report.md").read_text()
    for key, text in R.RULES.items():
        assert text in doc, f"docs/report.md does not state the {key!r} rule as the code applies it"


class TestWeakensLate:
    """Read on both proxies; "not supported" only from intervals (issue 18, item 3)."""

    iv = R.Interval

    def traj(self, name, values, late_from, half=0.3):
        """A proxy trajectory from (step, value) pairs with CI value +- half; late = steps >= late_from."""
        ivs = [(st, self.iv(f"step {st}", v, v - half, v + half)) for st, v in values]
        peak_step, peak = max(ivs, key=lambda x: x[1].value)
        return R.ProxyTrajectory(name, peak, peak_step >= late_from,
                                 [x for st, x in ivs if st < late_from],
                                 [x for st, x in ivs if st >= late_from])

    def test_supported_when_both_proxies_decline(self):
        fixed = self.traj("fixed", [(100, 5.0), (400, 3.0), (800, 2.5)], 400)
        refit = self.traj("refit", [(100, 5.2), (400, 3.3), (800, 2.8)], 400)
        out = R.weakens_late_rule(fixed, refit, drift_angle=math.radians(10))
        assert out.status == R.SUPPORTED and "both proxies decline" in out.reason
        assert "4.7" in out.reason and "3.3" in out.reason and "step 800" in out.reason

    def test_drift_at_a_constant_relation_is_not_supported(self):
        # the subspace rotates 35 deg while the gradient-subspace relation stays constant: the
        # fixed proxy "weakens" (by about cos^2 35 = 0.67), the refit proxy stays flat
        fixed = self.traj("fixed", [(100, 6.0), (400, 4.6), (800, 4.3)], 400, half=0.2)
        refit = self.traj("refit", [(100, 6.0), (400, 6.1), (800, 5.9)], 400, half=0.2)
        out = R.weakens_late_rule(fixed, refit, drift_angle=math.radians(35))
        assert out.status == R.INCONCLUSIVE and "drift could explain" in out.reason
        # no refit proxy and no drift stored: a stale proxy cannot be ruled out either
        assert R.weakens_late_rule(fixed, None).status == R.INCONCLUSIVE

    def test_supported_when_the_decline_is_larger_than_the_drift_explains(self):
        fixed = self.traj("fixed", [(100, 6.0), (400, 2.0), (800, 1.8)], 400, half=0.2)
        refit = self.traj("refit", [(100, 6.0), (400, 5.8), (800, 5.6)], 400, half=0.3)
        out = R.weakens_late_rule(fixed, refit, drift_angle=math.radians(20))
        assert out.status == R.SUPPORTED and "more than the drift" in out.reason
        # the same decline with a 60 deg drift (cos^2 = 0.25): drift could explain it
        assert R.weakens_late_rule(fixed, refit, drift_angle=math.radians(60)).status == \
            R.INCONCLUSIVE

    def test_supported_with_one_late_aggregate(self):
        peak = self.iv("step 100", 5.0, 4.6, 5.4)
        late = [self.iv("late", 3.0, 2.7, 3.3)]
        fixed = R.ProxyTrajectory("fixed", peak, False, [peak], late)
        refit = R.ProxyTrajectory("refit", peak, False, [peak], late)
        assert R.weakens_late_rule(fixed, refit).status == R.SUPPORTED

    def test_flat_truth_with_a_noisy_last_point_peak_is_not_not_supported(self):
        fixed = self.traj("fixed", [(100, 5.0), (200, 5.1), (400, 4.9), (800, 5.5)], 400)
        refit = self.traj("refit", [(100, 5.0), (200, 4.9), (400, 5.0), (800, 5.4)], 400)
        out = R.weakens_late_rule(fixed, refit, drift_angle=math.radians(5))
        assert out.status == R.INCONCLUSIVE and "inside the late window" in out.reason

    def test_not_supported_when_a_proxy_rises_through_the_late_window_intervals_apart(self):
        fixed = self.traj("fixed", [(100, 2.0), (200, 2.5), (400, 4.0), (800, 5.0)], 400)
        refit = self.traj("refit", [(100, 2.0), (200, 2.4), (400, 3.1), (800, 3.0)], 400)
        out = R.weakens_late_rule(fixed, refit, drift_angle=math.radians(5))
        # the refit proxy is flat inside the late window (3.1 then 3.0): only the fixed one rises
        assert out.status == R.NOT_SUPPORTED and "the fixed proxy rises" in out.reason
        both = self.traj("refit", [(100, 2.0), (200, 2.4), (400, 3.1), (800, 4.0)], 400)
        out = R.weakens_late_rule(fixed, both, drift_angle=math.radians(5))
        assert out.status == R.NOT_SUPPORTED and "both proxies rise" in out.reason
        flat = self.traj("refit", [(100, 2.0), (400, 2.1), (800, 2.2)], 400)
        out = R.weakens_late_rule(fixed, flat)
        assert out.status == R.NOT_SUPPORTED and "the fixed proxy rises" in out.reason
        # a decline on one proxy and a rise on the other: conflicting, so inconclusive
        down = self.traj("refit", [(100, 6.0), (400, 3.0), (800, 2.0)], 400)
        assert R.weakens_late_rule(fixed, down).status != R.NOT_SUPPORTED

    def test_a_plateau_reached_before_a_sparse_schedules_cut_is_not_a_rise(self):
        """Issue 33: at the small preset's schedule (no checkpoint between 251 and 501, cut at
        300) a trajectory that rises until the cut and then stays flat read "not supported" in
        every unit: the late window lay above the last checkpoint before the cut. A plateau
        neither weakens nor grows late: inconclusive, whatever the schedule."""
        curve = [(63, 1.5), (126, 2.5), (251, 3.6), (501, 4.0), (1000, 4.0)]
        for cut_at in (300, 251):  # a checkpoint just before the cut, or none near it
            p = self.traj("fixed", curve, cut_at + 1, half=0.15)
            out = R.weakens_late_rule(p, p, drift_angle=math.radians(2))
            assert out.status == R.INCONCLUSIVE and "plateau" in out.reason, out

    def test_a_decline_is_found_when_a_late_checkpoint_sits_near_the_peak(self):
        """The effect curve at the small preset's schedule: the peak (step 300) falls between
        checkpoints, step 501 is still near it; the late window ends far below the peak."""
        curve = [(63, 2.0), (126, 3.5), (251, 5.2), (501, 5.1), (1000, 3.0)]
        p = self.traj("fixed", curve, 301, half=0.3)
        out = R.weakens_late_rule(p, p, drift_angle=math.radians(2))
        assert out.status == R.SUPPORTED, out
        # an end below the peak reached by a late rise is not a decline: the late window grows
        up = self.traj("fixed", [(126, 3.5), (251, 5.2), (501, 2.0), (1000, 3.0)], 301, half=0.3)
        assert R.weakens_late_rule(up, up).status == R.NOT_SUPPORTED

    def test_inconclusive_when_intervals_overlap(self):
        fixed = self.traj("fixed", [(100, 5.0), (800, 4.5)], 400, half=0.8)
        out = R.weakens_late_rule(fixed, fixed)
        assert out.status == R.INCONCLUSIVE and "overlap" in out.reason

    def test_inconclusive_without_intervals_or_late_window_or_peak(self):
        peak = self.iv("step 100", 5.0)
        no_ci = R.ProxyTrajectory("fixed", peak, False, [peak], [self.iv("step 800", 1.0)])
        assert R.weakens_late_rule(no_ci, no_ci).status == R.INCONCLUSIVE
        early = self.traj("fixed", [(100, 5.0)], 400)
        out = R.weakens_late_rule(early, early)
        assert out.status == R.INCONCLUSIVE and "no checkpoint after" in out.reason
        assert R.weakens_late_rule(None).status == R.INCONCLUSIVE


class TestAblation:
    iv = R.Interval

    def test_paired_excess_rule(self):
        f = CR.ablation_excess_rule
        assert f(self.iv("E", 0.2, 0.05, 0.35), 1.0).status == R.SUPPORTED
        assert f(self.iv("E", -0.3, -0.5, -0.1), 1.0).status == R.NOT_SUPPORTED
        assert f(self.iv("E", 0.0, -0.1, 0.15), 1.0).status == R.NOT_SUPPORTED  # below 0.2 |C|
        assert f(self.iv("E", 0.0, -0.1, 0.25), 1.0).status == R.INCONCLUSIVE  # low power
        assert f(self.iv("E", 0.2), 1.0).status == R.INCONCLUSIVE
        assert f(None, None).status == R.INCONCLUSIVE
        # supported reads the variance match, not supported the displacement match
        up, flat = self.iv("E", 0.2, 0.05, 0.35), self.iv("E", 0.0, -0.1, 0.15)
        low = self.iv("E", -0.5, -0.7, -0.3)
        assert f(up, 1.0, displacement=up, control_displacement=1.0).status == R.SUPPORTED
        assert f(up, 1.0, displacement=flat, control_displacement=1.0).status == R.INCONCLUSIVE
        assert f(low, 1.0, displacement=flat, control_displacement=1.0).status == R.NOT_SUPPORTED
        assert f(low, 1.0, displacement=up, control_displacement=1.0).status == R.INCONCLUSIVE

    def test_the_double_match_decides_when_stored(self):
        f = CR.ablation_excess_rule
        low = self.iv("E", -0.5, -0.7, -0.3)  # variance-only: negative (partial ablation moves less)
        up, flat = self.iv("B", 0.4, 0.2, 0.6), self.iv("B", 0.01, -0.05, 0.1)
        small = self.iv("B", 0.1, 0.05, 0.15)
        kw = {"displacement": low, "control_displacement": 1.0}
        assert f(low, 1.0, both=up, control_both=1.0, **kw).status == R.SUPPORTED
        assert f(up, 1.0, both=flat, control_both=1.0, **kw).status == R.NOT_SUPPORTED
        assert f(low, 1.0, both=small, control_both=1.0).status == R.INCONCLUSIVE  # > 0, < bound
        assert f(low, 1.0, both=self.iv("B", 0.4), control_both=1.0).status == R.INCONCLUSIVE
        assert f(low, 1.0, both=self.iv("B", 0.1, -0.1, 0.3), control_both=1.0).status == R.INCONCLUSIVE
        # a NaN double match (none could be built) falls back to the single matches
        assert f(low, 1.0, both=self.iv("B", float("nan")), control_both=1.0,
                 displacement=flat, control_displacement=1.0).status == R.NOT_SUPPORTED


class TestLearningArms:
    iv = R.Interval

    def test_statuses(self):
        f, iv = CR.learning_arms_rule, self.iv
        up, down = iv("Y", 0.3, 0.1, 0.5), iv("Y", 0.0, -0.05, 0.08)
        small, wide = iv("Y", 0.05, 0.01, 0.08), iv("Y", 0.05, -0.1, 0.3)
        assert f(iv("X", 0.3, 0.1, 0.5), 1.0, onto=up).status == R.SUPPORTED
        assert f(iv("X", 0.0, -0.05, 0.08), 1.0, onto=down).status == R.NOT_SUPPORTED
        assert f(iv("X", 0.05, 0.01, 0.08), 1.0, onto=up).status == R.INCONCLUSIVE  # small, > 0
        assert f(iv("X", 0.05, -0.1, 0.3), 1.0, onto=up).status == R.INCONCLUSIVE
        assert f(iv("X", 0.3), 1.0, onto=up).status == R.INCONCLUSIVE  # no interval
        assert f(None, 1.0, onto=up).status == R.INCONCLUSIVE
        # the claim is the conjunction: one leg shown below the bound refutes it ...
        out = f(iv("X", 0.3, 0.1, 0.5), 1.0, onto=down)
        assert out.status == R.NOT_SUPPORTED and "disagree" in out.reason
        assert f(iv("X", 0.05, -0.1, 0.3), 1.0, onto=down).status == R.NOT_SUPPORTED
        # ... and an undecided leg leaves it undecided
        assert f(iv("X", 0.3, 0.1, 0.5), 1.0, onto=small).status == R.INCONCLUSIVE
        assert f(iv("X", 0.3, 0.1, 0.5), 1.0, onto=wide).status == R.INCONCLUSIVE
        assert f(iv("X", 0.3, 0.1, 0.5), 1.0, onto=iv("Y", 0.3)).status == R.INCONCLUSIVE

    def test_the_haar_leg_joins_the_conjunction_where_it_is_stored(self):
        """The Haar leg (training inside Q_T against the mean over every rank-r subspace of its
        complement) must be up too; one below the bound refutes; a NaN one is not stored."""
        f, iv = CR.learning_arms_rule, self.iv
        up, down, wide = iv("Y", 0.3, 0.1, 0.5), iv("H", 0.0, -0.05, 0.08), iv("H", 0.1, -0.1, 0.3)
        x = iv("X", 0.3, 0.1, 0.5)
        out = f(x, 1.0, onto=up, haar=iv("H", 0.3, 0.1, 0.5))
        assert out.status == R.SUPPORTED and "Haar leg" in out.reason and "Haar mean" in out.reason
        assert f(x, 1.0, onto=up, haar=wide).status == R.INCONCLUSIVE  # the drawn legs alone: up
        assert f(x, 1.0, onto=up).status == R.SUPPORTED
        assert f(x, 1.0, onto=up, haar=down).status == R.NOT_SUPPORTED
        assert f(x, 1.0, onto=up, haar=iv("H", 0.3)).status == R.INCONCLUSIVE  # no interval
        nan = f(x, 1.0, onto=up, haar=iv("H", float("nan")))
        assert nan.status == R.SUPPORTED and "Haar" not in nan.reason

    def test_without_onto_control_arms_the_away_leg_alone_decides_nothing(self):
        """A run from before the onto-control arms: the random-subspace objection is open."""
        out = CR.learning_arms_rule(self.iv("X", 0.3, 0.1, 0.5), 1.0)
        assert out.status == R.INCONCLUSIVE and "no onto-control arms" in out.reason
        out = CR.learning_arms_rule(self.iv("X", 0.3, 0.1, 0.5), 1.0,
                                    onto=self.iv("Y", float("nan")))
        assert out.status == R.INCONCLUSIVE and "no onto-control arms" in out.reason

    def test_no_learning_no_verdict(self):
        out = CR.learning_arms_rule(self.iv("X", 0.3, 0.1, 0.5), -0.01,
                                    onto=self.iv("Y", 0.3, 0.1, 0.5))
        assert out.status == R.INCONCLUSIVE and "did not lower" in out.reason

    def test_the_report_row_reads_the_stored_arms(self, tmp_path):
        from tangentlab.report.load import RunData
        from tangentlab.report.verdicts import build_verdicts
        from tests.report.fixtures import measure_rows, write_run

        rows = measure_rows("decoder")
        base = {k: rows[0][k] for k in ("model", "arch", "site", "bucket")}
        for metric, v, lo, hi in (("learning_excess", 0.004, 0.002, 0.006),
                                  ("learning_loss_decrease_unmodified", 0.02, 0.018, 0.022),
                                  ("learning_loss_decrease_away", 0.01, 0.009, 0.011),
                                  ("learning_loss_decrease_away_control_mean", 0.014, 0.012, 0.016),
                                  ("learning_loss_decrease_onto", 0.01, 0.009, 0.011),
                                  ("learning_loss_decrease_onto_control_mean", 0.006, 0.005,
                                   0.007)):
            rows.append({**base, "step": 100, "checkpoint": "step_000100", "metric": metric,
                         "value": v, "ci_low": lo, "ci_high": hi})

        def verdict(name, extra):
            run = write_run(tmp_path / name, {"decoder": rows + extra})
            return {x.key: x for x in build_verdicts(RunData.open(run))}["learning-arms"]

        onto = {**base, "step": 100, "checkpoint": "step_000100", "metric": "learning_excess_onto",
                "value": 0.004, "ci_low": 0.003, "ci_high": 0.005}
        v = verdict("run", [onto])
        assert v.status == R.SUPPORTED, v.reason
        assert "away from Q_T 0.01" in v.units[0].estimate and v.units[0].at.startswith("step 100")
        assert "onto controls 0.006" in v.units[0].estimate
        # onto a random subspace learns as much as onto Q_T: the onto leg refutes the claim
        v = verdict("flat", [{**onto, "value": 0.0, "ci_low": -0.001, "ci_high": 0.001}])
        assert v.status == R.NOT_SUPPORTED, v.reason
        # a run without the onto-control arms reads inconclusive and says why
        v = verdict("old", [])
        assert v.status == R.INCONCLUSIVE and "no onto-control arms" in v.reason


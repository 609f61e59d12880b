"""The claims table, checked claim by claim (scikit-learn's estimator checks, for claims).

Every claim must: have a row builder in the report; state its rule in docs/report.md as the code
applies it; reach every status word of its rule from plain numbers; read metrics the measurement
writes; and, for a prediction, have a truth in every planted scenario or say why not.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tangentlab.claims import causal_rules as CR
from tangentlab.claims import rules as R
from tangentlab.claims.table import CLAIMS, KINDS, TRUTHS, claim, claim_keys

_IDS = [c.key for c in CLAIMS]
_PREDICTIONS = [c for c in CLAIMS if c.kind == "prediction"]


def _iv(v, lo=None, hi=None, label="x"):
    return R.Interval(label, v, lo, hi)


def _late(values, late_from, half=0.3):
    ivs = [(st, _iv(v, v - half, v + half, f"step {st}")) for st, v in values]
    peak_step, peak = max(ivs, key=lambda x: x[1].value)
    return R.ProxyTrajectory("fixed", peak, peak_step >= late_from,
                             [x for st, x in ivs if st < late_from],
                             [x for st, x in ivs if st >= late_from])


#: Per rule: plain-number inputs that reach each decided status word, and one that cannot decide.
STATUS_EXAMPLES = {
    "checks": {
        R.SUPPORTED: lambda: R.checks_rule([{"name": "a", "passed": True}]),
        R.NOT_SUPPORTED: lambda: R.checks_rule([{"name": "a", "passed": False}]),
        R.INCONCLUSIVE: lambda: R.checks_rule([]),
    },
    "enrichment": {
        R.SUPPORTED: lambda: R.enrichment_rule(3.0, 2.5, 3.5, 1 / 21, 20, 1.0),
        R.NOT_SUPPORTED: lambda: R.enrichment_rule(0.5, 0.4, 0.6, 0.9, 20, 1.0),
        R.INCONCLUSIVE: lambda: R.enrichment_rule(1.0, 0.8, 1.2, 0.5, 20, 1.0),
    },
    "frequency-buckets": {
        R.SUPPORTED: lambda: R.bucket_rule([("f1", 3.0, 2.8, 3.2), ("f5", 1.0, 0.9, 1.1)]),
        R.NOT_SUPPORTED: lambda: R.bucket_rule([("f1", 1.0, 0.9, 1.1), ("f5", 3.0, 2.8, 3.2)]),
        R.INCONCLUSIVE: lambda: R.bucket_rule([("f1", 1.0, 0.8, 1.2)]),
    },
    "isoscore": {
        R.SUPPORTED: lambda: R.greater_than_control_rule(0.3, 0.25, 0.35, 0.1, 0.05, 0.15,
                                                         what="d iso"),
        R.NOT_SUPPORTED: lambda: R.greater_than_control_rule(0.1, 0.05, 0.15, 0.3, 0.25, 0.35,
                                                             what="d iso"),
        R.INCONCLUSIVE: lambda: R.greater_than_control_rule(0.2, 0.1, 0.3, 0.2, 0.1, 0.3,
                                                            what="d iso"),
    },
    "frequency-distance": {
        R.SUPPORTED: lambda: R.negative_correlation_rule(-0.5, -0.6, -0.4, 0.0),
        R.NOT_SUPPORTED: lambda: R.negative_correlation_rule(0.3, 0.2, 0.4, 0.0),
        R.INCONCLUSIVE: lambda: R.negative_correlation_rule(0.0, -0.1, 0.1, 0.0),
    },
    "weakens-late": {
        R.SUPPORTED: lambda: R.weakens_late_rule(
            _late([(100, 5.0), (400, 3.0), (800, 2.5)], 400),
            _late([(100, 5.0), (400, 3.0), (800, 2.5)], 400), drift_angle=math.radians(5)),
        R.NOT_SUPPORTED: lambda: R.weakens_late_rule(
            _late([(100, 2.0), (400, 3.0), (800, 5.0)], 400),
            _late([(100, 2.0), (400, 3.0), (800, 5.0)], 400)),
        R.INCONCLUSIVE: lambda: R.weakens_late_rule(
            _late([(100, 4.0), (400, 4.0), (800, 4.0)], 400),
            _late([(100, 4.0), (400, 4.0), (800, 4.0)], 400)),
    },
    "ablation": {
        R.SUPPORTED: lambda: CR.ablation_excess_rule(
            None, None, both=_iv(0.4, 0.2, 0.6), control_both=1.0),
        R.NOT_SUPPORTED: lambda: CR.ablation_excess_rule(
            None, None, both=_iv(0.0, -0.1, 0.1), control_both=1.0),
        R.INCONCLUSIVE: lambda: CR.ablation_excess_rule(
            None, None, both=_iv(0.1, -0.1, 0.5), control_both=1.0),
    },
    "learning-arms": {
        R.SUPPORTED: lambda: CR.learning_arms_rule(_iv(0.2, 0.1, 0.3), 1.0,
                                                   onto=_iv(0.2, 0.1, 0.3)),
        R.NOT_SUPPORTED: lambda: CR.learning_arms_rule(_iv(0.0, -0.05, 0.05), 1.0,
                                                       onto=_iv(0.0, -0.05, 0.05)),
        R.INCONCLUSIVE: lambda: CR.learning_arms_rule(_iv(0.05, -0.05, 0.5), 1.0,
                                                      onto=_iv(0.2, 0.1, 0.3)),
    },
}


@pytest.mark.parametrize("c", CLAIMS, ids=_IDS)
def test_a_claim_is_well_formed(c):
    assert c.kind in KINDS and c.title and c.statement and c.test
    assert c.rule in R.RULES and c.rule_text == R.RULES[c.rule]
    assert claim(c.key) is c


@pytest.mark.parametrize("c", CLAIMS, ids=_IDS)
def test_every_status_of_the_rule_is_reachable(c):
    examples = STATUS_EXAMPLES[c.rule]
    for word in (R.SUPPORTED, R.NOT_SUPPORTED, R.INCONCLUSIVE):
        assert examples[word]().status == word, (c.rule, word)


@pytest.mark.parametrize("c", CLAIMS, ids=_IDS)
def test_the_rule_text_is_the_one_the_docs_state(c):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "report.md").read_text()
    assert c.rule_text in doc, f"docs/report.md does not state the {c.key!r} rule as the code applies it"


@pytest.mark.parametrize("c", CLAIMS, ids=_IDS)
def test_the_report_builds_every_claim_in_order(c):
    from tangentlab.report.verdicts import ROWS

    spec = {r.key: r for r in ROWS}[c.key]
    assert [r.key for r in ROWS] == list(claim_keys())
    assert (spec.title, spec.prediction, spec.section, spec.rule) == (
        c.title, c.statement, c.kind, c.rule_text)


@pytest.mark.parametrize("c", _PREDICTIONS, ids=[c.key for c in _PREDICTIONS])
def test_a_prediction_has_a_truth_in_every_scenario_or_says_why_not(c):
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS, SCENARIOS

    if not c.validated_end_to_end:
        assert c.not_validated.startswith("not validated end to end") and c.key not in PREDICTION_ROWS
        return
    assert c.key in PREDICTION_ROWS and not c.not_validated
    assert set(c.planted) <= set(SCENARIOS), f"{c.key} names a scenario the battery does not plant"
    for name, sc in SCENARIOS.items():
        assert c.truth(name) in TRUTHS and sc.truth[c.key] == c.truth(name)
    assert c.truth("effect") == "positive"  # the power scenario plants every effect


@pytest.mark.parametrize("c", _PREDICTIONS, ids=[c.key for c in _PREDICTIONS])
def test_a_prediction_on_an_empty_run_directory_decides_nothing(c, tmp_path):
    from tangentlab.report.load import RunData
    from tangentlab.report.verdicts import build_verdicts
    from tangentlab.runs import atomic_write_json, build_manifest

    atomic_write_json(tmp_path / "manifest.json", {
        **build_manifest(kind="reproduce", config={"seed": 0}, seeds={"seed": 0}),
        "stages": {}, "stage_order": []})
    v = {v.key: v for v in build_verdicts(RunData.open(tmp_path))}[c.key]
    assert v.status in (R.INCONCLUSIVE, R.NOT_RUN) and not v.error, (v.status, v.reason)


def test_the_metrics_a_claim_reads_are_ones_the_measurement_writes(quick_reproduce):
    import pandas as pd

    run, rc, _, _ = quick_reproduce(2)
    written = set()
    for arch in ("encoder", "decoder"):
        written |= set(pd.read_csv(run / "measure" / arch / "results.csv")["metric"])
    for c in _PREDICTIONS:
        missing = [m for m in c.metrics if m not in written]
        assert c.metrics and not missing, f"{c.key} reads {missing}, which no measure stage wrote"


def test_the_committed_claims_page_is_the_table():
    """docs/claims.md is generated from CLAIMS (as docs/theory is from the derivations)."""
    from tangentlab.claims.pages import render_claims

    doc = Path(__file__).resolve().parents[2] / "docs" / "claims.md"
    assert doc.read_text() == render_claims(), (
        "docs/claims.md is stale; regenerate it with `python -m tangentlab.claims_reference "
        "docs/claims.md`")
    for c in CLAIMS:
        assert f"(`{c.key}`)" in doc.read_text()

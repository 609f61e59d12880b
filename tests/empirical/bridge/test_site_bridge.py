"""The theory-against-measurement glue (issue 20): known answers, the theory's own predict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tangentlab.claims.bridge_rules import NOT_MEASURABLE, agreement, trust
from tangentlab.empirical.bridge.pinning_form import POWER_LAW_REJECTED
from tangentlab.empirical.bridge.site_bridge import BridgeSettings, _theory_pool, site_bridge

S, BETA, V = 1.1, 0.4, 20


def planted(**kw):
    from tangentlab.empirical.bridge.planted import planted_site

    return planted_site(**{"V": V, "s": S, "beta": BETA, **kw})


@pytest.fixture(scope="module")
def rows():
    return {(r["quantity"], r["bucket"]): r
            for r in site_bridge(planted(), BridgeSettings(n_boot=60, max_tokens=V,
                                                          intrinsic_dimension=False))}


def test_inputs_recover_the_planted_law(rows):
    z = rows[("zipf_s", "all")]
    assert z["measured_low"] <= S <= z["measured_high"]
    b = rows[("pinning_beta_raw", "all")]
    assert b["status"] == "measured" and b["measured_low"] <= BETA <= b["measured_high"]
    assert rows[("local_dimension_m", "all")]["measured"] == 2
    # the planted spread is one power law of rank: its curvature interval covers 0
    c = rows[("pinning_curvature_raw", "all")]
    assert c["status"] == "measured" and c["measured_low"] <= 0.0 <= c["measured_high"], c
    assert POWER_LAW_REJECTED not in c["note"]


def test_the_power_law_note_is_the_one_the_report_reads():
    from tangentlab.report.theory_numbers import POWER_LAW_REJECTED as READ

    assert POWER_LAW_REJECTED == READ


def test_predictions_agree_with_measurement_where_the_theory_holds(rows):
    from tangentlab.theory.attenuation import attenuation

    att = rows[("attenuation_raw", "all")]
    assert att["status"] == "agree", att
    assert att["predicted_low"] <= float(attenuation(S, BETA / S, V)) <= att["predicted_high"]
    for lab in ("f1", "f2", "f3", "f4"):
        rel = rows[("relative_visibility", lab)]
        assert rel["status"] == "agree", rel
    # rare tokens (f1) are more visible than frequent ones (f4): the pinning law
    assert rows[("relative_visibility", "f1")]["measured"] > rows[("relative_visibility", "f4")]["measured"]


def test_untrusted_cells_carry_no_number(rows):
    # m = 2, d = 10: outside the calibration's trusted cells for ‖II‖²
    for lab in ("f1", "f4"):
        r = rows[("bucket_visibility", lab)]
        assert r["status"] == NOT_MEASURABLE and math.isnan(r["predicted"])
        assert "calibration trusts" in r["note"]
    assert math.isnan(rows[("ii_norm_sq", "all")]["measured"])


def test_peer_baselines_are_context(rows):
    r = rows[("rankme", "all")]
    assert r["role"] == "baseline" and r["status"] == "context" and 1 <= r["measured"] <= 10
    assert rows[("alpha_req", "all")]["status"] == NOT_MEASURABLE  # d = 10 < rank 11
    assert ("twonn", "all") not in rows  # switched off here (tested with a measurement run)


def test_too_few_documents_is_not_measurable():
    a = planted(V=8, k=30)
    got = {(r["quantity"], r["bucket"]): r for r in site_bridge(a, BridgeSettings(n_boot=20, intrinsic_dimension=False))}
    assert got[("local_dimension_m", "all")]["status"] == NOT_MEASURABLE
    assert got[("attenuation_raw", "all")]["status"] == NOT_MEASURABLE
    assert "64 occurrences" in got[("attenuation_raw", "all")]["note"]
    assert got[("pinning_beta_raw", "all")]["status"] == NOT_MEASURABLE  # 8 tokens < 20


def test_prediction_path_is_the_theorys_own_predict():
    from tangentlab.theory.derivation import get
    from tangentlab.theory.measured_inputs import Measured, predict_bucket_visibility

    r = np.arange(1, 11)
    one = np.zeros(10, dtype=bool)
    one[3] = True
    got = _theory_pool(r, 1.2, 0.3, 10, [one], t0=0.1, ii=2.0, m=3)[0]
    want = get("frequency-attenuation").predict("visibility_by_rank", rank=4, s=1.2, alpha=0.25,
                                                 t0=0.1, ii_norm_sq=2.0, m=3, n_types=10)
    assert got == pytest.approx(float(want), rel=1e-12)
    c = lambda x: Measured(x, np.full(4, x))  # noqa: E731
    mask = r >= 6
    pooled = _theory_pool(r, 1.2, 0.3, 10, [mask], t0=0.1, ii=2.0, m=3)[0]
    ref = predict_bucket_visibility(r[mask], c(1.2), c(0.3), c(0.1), c(2.0), 3, 10)
    assert pooled == pytest.approx(ref.value, rel=1e-12)


def test_agreement_rule():
    assert agreement(1.0, 0.9, 1.1, 1.1, 1.0, 1.2) == "agree"
    # intervals overlap but the ratio is outside the 20% tolerance
    assert agreement(1.0, 0.5, 2.0, 1.5, 1.2, 1.8) == "disagree"
    # close ratio but disjoint intervals
    assert agreement(1.0, 0.99, 1.01, 1.05, 1.04, 1.06) == "disagree"
    assert agreement(1.0, float("nan"), 1.1, 1.0, 0.9, 1.1) == NOT_MEASURABLE


def test_trust_rules_follow_the_calibration():
    # the calibrated range of the two-scale estimate (docs/bridge.md: 28 of 30 cells trusted)
    assert trust("ii_norm_sq", m=8, d=256) == "" and trust("ii_norm_sq", m=2, d=64) == ""
    assert trust("ii_norm_sq", m=32, d=768) == "" and trust("ii_norm_sq", m=4, d=128) == ""
    assert "m = 2-32 in d = 64-768" in trust("ii_norm_sq", m=1, d=768)
    assert trust("ii_norm_sq", m=64, d=256) and trust("ii_norm_sq", m=8, d=32)
    assert trust("ii_norm_sq", m=8, d=1024) and trust("ii_norm_sq", m=None, d=256)
    assert trust("zipf_s", n_ranks=4) and not trust("zipf_s", n_ranks=5)
    assert trust("pinning_beta", n_tokens=19) and not trust("pinning_beta", n_tokens=20)


def test_a_negative_pinning_exponent_is_predicted_at_the_boundary_and_says_so(rows):
    # planted beta < 0: frequent tokens more spread. The closed form needs alpha >= 0, so the
    # prediction is its boundary value (no pinning: attenuation 1), and the note says so.
    got = {(r["quantity"], r["bucket"]): r
           for r in site_bridge(planted(beta=-0.3), BridgeSettings(n_boot=40, max_tokens=V,
                                                                    intrinsic_dimension=False))}
    b = got[("pinning_beta_raw", "all")]
    assert b["measured_high"] < 0, b
    att = got[("attenuation_raw", "all")]
    assert att["predicted"] == 1.0 and "outside the closed form" in att["note"], att
    assert "outside the closed form" in got[("relative_visibility", "f1")]["note"]
    # a positive beta carries no such note
    assert "outside the closed form" not in rows[("attenuation_raw", "all")]["note"]
    assert "outside the closed form" not in rows[("relative_visibility", "f1")]["note"]


def test_beta_by_rank_range_reads_only_those_ranks_and_moves_the_prediction():
    """Issue 36: beta is also fitted over the most frequent ranks only (here 100 of 150), and the
    closed form at each range's beta is shown as an input beside the comparison."""
    site = planted(V=150)
    got = {(r["quantity"], r["bucket"]): r
           for r in site_bridge(site, BridgeSettings(n_boot=40, max_tokens=V,
                                                     intrinsic_dimension=False))}
    full, top = got[("pinning_beta_raw", "all")], got[("pinning_beta_raw", "ranks <= 100")]
    assert full["n"] == 150 and top["n"] == 100  # the range keeps only its own tokens
    assert top["role"] == "input" and top["measured_low"] <= BETA <= top["measured_high"]
    assert ("pinning_beta_raw", "ranks <= 300") not in got  # no range at or above V
    moved = got[("attenuation_raw", "beta from ranks <= 100")]
    assert moved["role"] == "input" and moved["status"] == "measured"
    base = got[("attenuation_raw", "all")]
    assert abs(moved["measured"] - base["predicted"]) < 0.1 * base["predicted"]

"""The verdict table on run directories written by hand: one unit per (model, site), each model
read from its own table (the old ``cats`` bug), weakens-late windows, intervals against ranges."""

from __future__ import annotations

import pytest

from tangentlab.claims import rules as R
from tangentlab.report.load import RunData
from tangentlab.report.tables import ResultTable
from tangentlab.report.verdicts import build_verdicts
from tests.report.fixtures import (
    activation_only_rows,
    measure_rows,
    trajectory_rows,
    write_run,
)


def _by_key(run) -> dict:
    return {v.key: v for v in build_verdicts(RunData.open(run))}


class TestBucketsPerModel:
    """Issue 9: ``_bucket_build`` used ``cats`` after its loop. With an activation-only model first it
    raised UnboundLocalError; after another model it silently reused that model's buckets."""

    def test_activation_only_model_first_does_not_break_the_row(self, tmp_path):
        run = write_run(tmp_path / "run", {"encoder": activation_only_rows("encoder"),
                                           "decoder": measure_rows("decoder")})
        v = _by_key(run)["frequency-buckets"]
        assert v.error is None, v.error
        assert [u.model for u in v.units] == ["decoder"]
        assert v.units[0].status == R.SUPPORTED  # q2 (most frequent) largest, CIs apart
        titles = {p.title.split(":")[0].split()[0]: p for p in v.panels}
        assert set(titles) == {"decoder"}
        assert titles["decoder"].categories == ("q0", "q1", "q2")
        assert ("not measured", "no enrichment rows in: encoder") in v.numbers

    def test_a_model_without_buckets_does_not_reuse_the_previous_models(self, tmp_path):
        run = write_run(tmp_path / "run", {"encoder": measure_rows("encoder"),
                                           "decoder": activation_only_rows("decoder")})
        v = _by_key(run)["frequency-buckets"]
        assert v.error is None, v.error
        for panel in v.panels:
            model = panel.title.split(":")[0].split()[0]
            assert model == "encoder", f"{model} drew buckets it never measured: {panel.categories}"
        assert v.panels[0].categories == ("q0", "q1", "q2")

    def test_two_models_with_different_buckets_each_keep_their_own(self, tmp_path):
        run = write_run(tmp_path / "run", {
            "encoder": trajectory_rows("enc", {0: 1.0, 10: 2.0}, buckets=("q0", "q1")),
            "decoder": trajectory_rows("dec", {0: 1.0, 10: 2.0}, buckets=("f1", "f2", "f3"))})
        v = _by_key(run)["frequency-buckets"]
        cats = {p.title.split(":")[0].split()[0]: p.categories for p in v.panels}
        assert cats == {"encoder": ("q0", "q1"), "decoder": ("f1", "f2", "f3")}
        assert [u.model for u in v.units] == ["encoder", "decoder"]


class TestEveryEmpiricalRowIsPerUnit:
    def test_one_unit_per_model_and_site_with_estimate_and_interval(self, tmp_path):
        rows = trajectory_rows("dec", {0: 1.0, 10: 3.0}, site="blocks.0.resid_post") + \
            trajectory_rows("dec", {0: 1.0, 10: 0.5}, site="blocks.1.resid_post")
        run = write_run(tmp_path / "run", {"decoder": rows})
        v = _by_key(run)["enrichment"]
        assert [(u.model, u.site, u.status) for u in v.units] == [
            ("decoder", "blocks.0.resid_post", R.SUPPORTED),
            ("decoder", "blocks.1.resid_post", R.NOT_SUPPORTED)]
        assert v.status == R.INCONCLUSIVE  # the units disagree: intersection-union (issue 33)
        assert v.units[0].estimate == "3 CI [2.85, 3.15]" and v.units[0].at == "step 10"

    def test_a_missing_measure_stage_reads_not_run_without_crashing(self, tmp_path):
        run = write_run(tmp_path / "run", {}, stages={
            "measure/decoder": {"status": "skipped", "config_hash": "x", "reason": "train failed"}})
        for key in ("enrichment", "weakens-late", "frequency-buckets", "isoscore", "frequency-distance",
                    "ablation", "validation"):
            v = _by_key(run)[key]
            assert v.status == R.NOT_RUN and v.error is None, (key, v.reason)


def _with_refit(rows, refit=None, drift_deg=None):
    """Add refit-proxy enrichment rows (the fixed values, or ``refit`` {step: value}) and drift."""
    import math

    out = list(rows)
    for r in rows:
        if r["metric"] != "enrichment" or r["bucket"] != "all" or r["step"] is None:
            continue
        v = r["value"] if refit is None else refit[r["step"]]
        out.append({**r, "proxy": "refit", "value": v, "ci_low": v * 0.95, "ci_high": v * 1.05})
        if drift_deg is not None:
            out.append({**r, "proxy": "refit", "metric": "proxy_drift_max_angle",
                        "value": math.radians(drift_deg), "ci_low": None, "ci_high": None})
    return out


class TestWeakensLate:
    def test_supported_when_late_checkpoints_fall_below_the_peak(self, tmp_path):
        rows = trajectory_rows("dec", {0: 1.0, 10: 2.0, 100: 5.0, 400: 3.0, 800: 2.5}, half_width=0.05)
        run = write_run(tmp_path / "run", {"decoder": _with_refit(rows)},
                        measure_extra={"decoder": {"early_late_cut_step": 240.0}})
        u = _by_key(run)["weakens-late"].units[0]
        assert u.status == R.SUPPORTED, u.reason
        assert "steps 400, 800" in u.at and "early/late cut at step 240" in u.at and "peak at step 100" in u.at

    def test_a_stale_fixed_proxy_is_not_supported(self, tmp_path):
        # issue 18: the subspace drifts 35 deg at a constant relation; the refit proxy stays flat
        fixed = {0: 1.0, 10: 5.0, 100: 5.0, 400: 3.6, 800: 3.4}
        rows = trajectory_rows("dec", fixed, half_width=0.05)
        rows = _with_refit(rows, refit={0: 1.0, 10: 5.0, 100: 5.0, 400: 5.1, 800: 4.9},
                           drift_deg=35)
        run = write_run(tmp_path / "run", {"decoder": rows},
                        measure_extra={"decoder": {"early_late_cut_step": 240.0}})
        u = _by_key(run)["weakens-late"].units[0]
        assert u.status == R.INCONCLUSIVE and "drift could explain" in u.reason, u.reason
        assert "35 deg" in u.reason and "refit proxy late window" in u.note

    def test_not_supported_when_still_rising_at_the_end(self, tmp_path):
        rows = trajectory_rows("dec", {0: 1.0, 10: 2.0, 100: 3.0, 400: 4.0, 800: 5.0})
        run = write_run(tmp_path / "run", {"decoder": rows},
                        measure_extra={"decoder": {"early_late_cut_step": 240.0}})
        assert _by_key(run)["weakens-late"].units[0].status == R.NOT_SUPPORTED

    def test_one_late_checkpoint_cannot_show_a_late_rise(self, tmp_path):
        """Issue 33: one checkpoint after the cut above every earlier one is what a plateau
        reached between the last early checkpoint and the cut looks like too."""
        rows = trajectory_rows("dec", {0: 1.0, 10: 2.0, 100: 3.0, 800: 5.0})
        run = write_run(tmp_path / "run", {"decoder": rows},
                        measure_extra={"decoder": {"early_late_cut_step": 240.0}})
        u = _by_key(run)["weakens-late"].units[0]
        assert u.status == R.INCONCLUSIVE and "one late-window checkpoint" in u.reason

    def test_a_recorded_weighted_late_window_is_read(self, tmp_path):
        rows = trajectory_rows("dec", {0: 1.0, 10: 2.0, 100: 5.0, 400: 4.9, 800: 2.0})
        extra = {"early_late_cut_step": 50.0,  # ignored: the recorded window wins
                 "late_window": {"steps": [800], "weights": [1.0], "weighted_median_step": 800}}
        run = write_run(tmp_path / "run", {"decoder": _with_refit(rows)},
                        measure_extra={"decoder": extra})
        u = _by_key(run)["weakens-late"].units[0]
        assert u.status == R.SUPPORTED and "late window: steps 800" in u.at and "weighted" in u.at

    def test_old_late_aggregate_is_a_range_not_an_interval(self, tmp_path):
        import pandas as pd

        rows = trajectory_rows("dec", {0: 1.0, 100: 5.0, 400: 4.9, 800: 2.0}, late=(3.0, 2.0, 4.9))
        run = write_run(tmp_path / "run", {"decoder": rows},
                        measure_extra={"decoder": {"early_late_cut_step": 240.0}})
        # an old run's results.csv has no band_* columns (write_results now always writes them)
        for path in run.rglob("results.csv"):
            df = pd.read_csv(path)
            df.drop(columns=[c for c in ("band_low", "band_high") if c in df], inplace=True)
            df.to_csv(path, index=False)
        u = _by_key(run)["weakens-late"].units[0]
        # per-checkpoint CIs are used; 400 overlaps the peak's CI
        assert u.status == R.INCONCLUSIVE and "range over checkpoints" in u.note

    def test_new_late_aggregate_with_a_ci_is_used(self, tmp_path):
        rows = trajectory_rows("dec", {0: 1.0, 100: 5.0, 400: 4.9, 800: 2.0}, band_columns=True,
                               late=(3.0, 2.8, 3.2))
        # the refit proxy overlaps its peak at step 400, but a 5 deg drift cannot explain the
        # fixed proxy's fall to 3.0
        rows = _with_refit(rows, drift_deg=5)
        run = write_run(tmp_path / "run", {"decoder": rows},
                        measure_extra={"decoder": {"early_late_cut_step": 240.0}})
        u = _by_key(run)["weakens-late"].units[0]
        assert u.status == R.SUPPORTED and "late-window aggregate" in u.estimate


class TestIntervalsAndRanges:
    def test_old_tables_read_control_means_and_windows_as_ranges(self):
        import pandas as pd

        df = pd.DataFrame(trajectory_rows("m", {0: 1.0, 10: 2.0}, late=(2.0, 1.5, 2.5)))
        t = ResultTable(df)
        c = t.get("energy_control_mean", site="blocks.1.resid_post", step=10)
        assert not c.has_ci and (c.band_low, c.band_high) == (0.15, 0.25)
        assert c.interval_text() == "range [0.15, 0.25]"
        late = t.get("enrichment", site="blocks.1.resid_post", window="late")
        assert not late.has_ci and late.has_band
        e = t.get("enrichment", site="blocks.1.resid_post", step=10)
        assert e.has_ci and not e.has_band

    def test_new_tables_keep_ci_and_band_apart(self):
        import pandas as pd

        df = pd.DataFrame(trajectory_rows("m", {0: 1.0, 10: 2.0}, band_columns=True, late=(2.0, 1.9, 2.1)))
        t = ResultTable(df)
        c = t.get("energy_control_mean", site="blocks.1.resid_post", step=10)
        assert (c.ci_low, c.ci_high, c.band_low, c.band_high) == (0.19, 0.21, 0.15, 0.25)
        assert c.interval_text() == "CI [0.19, 0.21], range [0.15, 0.25]"
        late = t.get("enrichment", site="blocks.1.resid_post", window="late")
        assert late.has_ci and (late.ci_low, late.ci_high) == (1.9, 2.1)


class TestCausalAndLabels:
    def test_ablation_without_matched_controls_is_inconclusive(self, tmp_path):
        run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
        v = _by_key(run)["ablation"]
        assert v.status == R.INCONCLUSIVE
        assert all("no paired excess" in u.reason for u in v.units)

    @pytest.mark.parametrize("excess, status", [((0.3, 0.1, 0.5), R.SUPPORTED),
                                                ((0.0, -0.03, 0.05), R.NOT_SUPPORTED),
                                                ((0.05, -0.1, 0.3), R.INCONCLUSIVE)])
    def test_ablation_against_matched_controls(self, tmp_path, excess, status):
        rows = measure_rows("decoder")
        for r in rows:
            if r["metric"] == "ablation_loss_tangent":
                r.update(ci_low=0.45, ci_high=0.55)
        base = {k: rows[0][k] for k in ("model", "arch", "site", "bucket")}
        for step in (0, 10, 100):
            v, lo, hi = excess
            rows += [{**base, "step": step, "checkpoint": f"step_{step:06d}",
                      "metric": "ablation_excess", "value": v, "ci_low": lo, "ci_high": hi},
                     {**base, "step": step, "checkpoint": f"step_{step:06d}",
                      "metric": "ablation_loss_matched_mean", "value": 0.5, "ci_low": 0.4,
                      "ci_high": 0.6},
                     {**base, "step": step, "checkpoint": f"step_{step:06d}",
                      "metric": "ablation_loss_per_variance_tangent", "value": 2.0, "ci_low": 1.8,
                      "ci_high": 2.2}]
        run = write_run(tmp_path / "run", {"decoder": rows})
        u = _by_key(run)["ablation"].units[0]
        assert u.status == status, u.reason
        assert "per unit of removed variance: tangent 2 CI [1.8, 2.2]" in u.note
        assert "not variance-matched" in u.note

    def test_isoscore_row_says_it_depends_on_the_enrichment(self, tmp_path):
        run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
        v = _by_key(run)["isoscore"]
        assert v.depends_on == "enrichment"
        assert all("depends on the enrichment" in u.note for u in v.units)

    def test_frequency_distance_shows_pearson_beside_the_readers_value(self, tmp_path):
        run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder", rho_last=-0.4)})
        u = _by_key(run)["frequency-distance"].units[0]
        assert "Spearman -0.4 CI [-0.5, -0.3]" in u.estimate and "Pearson -0.4" in u.estimate
        assert "Pearson value" in u.note


def test_an_optional_measurement_nobody_stored_reads_not_run(tmp_path):
    rows = [r for r in measure_rows("decoder") if not r["metric"].startswith("ablation")]
    run = write_run(tmp_path / "run", {"decoder": rows})
    v = _by_key(run)["ablation"]
    assert v.status == R.NOT_RUN and v.error is None
    assert "no measured model stored ablation_loss_tangent rows (decoder)" in v.reason


def test_rows_told_apart_only_by_an_unread_column_are_flagged(tmp_path):
    rows = trajectory_rows("dec", {0: 1.0, 10: 3.0})
    rows += [dict(r, space="reachable", value=r["value"] * 2) for r in rows if r["metric"] == "enrichment"
             and r["bucket"] == "all"]
    run = write_run(tmp_path / "run", {"decoder": rows})
    v = _by_key(run)["enrichment"]
    assert v.units[0].estimate.startswith("3 CI")  # the first stored row
    assert ("decoder: duplicate rows", ) == tuple(k for k, _ in v.numbers if "duplicate" in k)


def test_constrained_rows_never_stand_in_for_the_full_space_enrichment(tmp_path):
    """Rows repeated with subspace=constrained (and proxy=refit) are not read as the enrichment,
    whatever their order in results.csv."""
    from tangentlab.report.tables import ResultTable
    from tangentlab.runs import read_results, write_results

    base = {"step": 10, "site": "blocks.0.resid_post", "bucket": "all", "metric": "enrichment"}
    rows = [
        {**base, "subspace": "constrained", "proxy": "fixed", "value": 99.0},
        {**base, "proxy": "refit", "value": 55.0},
        {**base, "proxy": "fixed", "value": 3.0, "ci_low": 2.5, "ci_high": 3.5},
    ]
    write_results(rows, tmp_path / "results.csv")
    table = ResultTable(read_results(tmp_path / "results.csv"))
    est = table.get("enrichment", step=10, site="blocks.0.resid_post")
    assert est.value == 3.0 and table.duplicates == {}


def test_sites_with_forced_directions_are_read_on_the_constrained_energy(tmp_path):
    """Issue 18: a norm-forced site's plain enrichment is deflated (0.88-0.95 under nulls); the
    verdicts read the reachable (else the 1-complement) test where the run stored one."""
    rows = trajectory_rows("dec", {0: 1.0, 100: 0.9, 800: 0.9}, half_width=0.05)
    for st, v in ((0, 1.0), (100, 2.0), (800, 2.0)):
        base = {"model": "dec", "arch": "decoder", "checkpoint": f"step_{st:06d}", "step": st,
                "site": "blocks.1.resid_post", "bucket": "all", "proxy": "fixed",
                "subspace": "constrained", "forced": "raw"}
        rows += [{**base, "metric": "enrichment_reachable", "value": v, "ci_low": v * 0.95,
                  "ci_high": v * 1.05},
                 {**base, "metric": "p_value_reachable", "value": 1 / 21}]
    run = write_run(tmp_path / "run", {"decoder": rows},
                    measure_extra={"decoder": {"early_late_cut_step": 240.0}})
    u = _by_key(run)["enrichment"].units[0]
    assert u.status == R.SUPPORTED and "2 " in u.estimate, (u.reason, u.estimate)
    assert "forced directions" in u.note and "plain enrichment 0.9" in u.note
    wl = _by_key(run)["weakens-late"].units[0]
    assert "enrichment_reachable" in wl.note
    # without the constrained rows the plain (deflated) enrichment reads "not supported"
    plain = [r for r in rows if r.get("subspace") != "constrained"]
    run2 = write_run(tmp_path / "run2", {"decoder": plain})
    assert _by_key(run2)["enrichment"].units[0].status == R.NOT_SUPPORTED


def test_a_unit_outside_the_validated_ratio_cv_is_flagged(tmp_path):
    rows = trajectory_rows("dec", {0: 1.0, 100: 3.0, 800: 3.0}, band_columns=True)
    base = {"model": "dec", "arch": "decoder", "checkpoint": "step_000800", "step": 800,
            "site": "blocks.1.resid_post", "bucket": "all", "proxy": "fixed"}
    rows.append({**base, "metric": "ratio_cv", "value": 2.7, "band_high": 0.9,
                 "note": "cv_outside_validated_range"})
    run = write_run(tmp_path / "run", {"decoder": rows})
    u = _by_key(run)["enrichment"].units[0]
    assert "cv_outside_validated_range" in u.note and "2.7" in u.note

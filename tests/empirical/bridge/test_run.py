"""bridge.csv of a measurement run: phases, the CSV, the measure config's switch."""

from __future__ import annotations

import csv

import pytest

from tangentlab.empirical.bridge.run import (
    BRIDGE_COLUMNS,
    BRIDGE_NAME,
    PHASES,
    choose_phases,
    write_bridge_csv,
)


def _row(metric, ck, value, **kw):
    return {"metric": metric, "site": "s", "checkpoint": ck, "bucket": "all", "value": value, **kw}


def test_phases_step0_peak_last():
    steps, names = [0, 10, 20, 30], ["c0", "c10", "c20", "c30"]
    rows = [_row("enrichment", "c0", 9.0), _row("enrichment", "c10", 2.0),
            _row("enrichment", "c20", 5.0), _row("enrichment", "c30", 3.0),
            _row("enrichment", "c10", 99.0, proxy="refit"),  # not the fixed proxy
            _row("enrichment", "c30", 99.0, bucket="f1")]  # not the whole-space bucket
    got = choose_phases(steps, names, rows, "s")
    assert {p: i for p, (i, _) in got.items()} == {"step0": 0, "peak": 2, "last": 3}
    # step 0 is never the peak (the peak is a trained checkpoint)
    assert "enrichment" in got["peak"][1]


def test_peak_falls_back_to_mean_cosine_without_a_head():
    rows = [_row("representation_mean_cosine", "c1", 0.2), _row("representation_mean_cosine", "c2", 0.1)]
    got = choose_phases([1, 2], ["c1", "c2"], rows, "s")
    assert got["peak"][0] == 0 and "mean_cosine" in got["peak"][1]
    assert "no step-0" in got["step0"][1]


def test_csv_has_the_stated_columns(tmp_path):
    p = write_bridge_csv([{"model": "m", "phase": "peak", "quantity": "zipf_s",
                           "measured": 1.1, "predicted": float("nan")}], tmp_path / BRIDGE_NAME)
    rows = list(csv.DictReader(p.open()))
    assert tuple(rows[0]) == BRIDGE_COLUMNS
    assert rows[0]["measured"] == "1.1" and rows[0]["predicted"] == ""


def test_config_switch_and_bounds():
    from tangentlab.empirical.measurement.measure_config import (
        MeasureConfig,
        resolve_measure_config,
    )
    from tangentlab.errors import ConfigError

    cfg = MeasureConfig.quick()
    assert cfg.bridge and cfg.bridge_boot == 50
    with pytest.raises(ConfigError, match="bridge_boot"):
        resolve_measure_config({"bridge_boot": 5})
    assert not resolve_measure_config({"bridge": False}).bridge


def test_measurement_writes_bridge_csv(measured):
    for arch, out in measured.items():
        rows = list(csv.DictReader((out / BRIDGE_NAME).open()))
        assert {r["phase"] for r in rows} == set(PHASES), arch
        assert {r["role"] for r in rows} == {"input", "comparison", "baseline"}
        got = {r["quantity"] for r in rows}  # this session's rows reach a real measurement
        assert {"pinning_curvature_raw", "pinning_curvature_direction", "twonn_per_type",
                "twonn_by_frequency"} <= got, arch
        for r in rows:  # a cell is a number or 'not measurable here' with its reason, never both
            if r["status"] == "not measurable here" and r["role"] != "baseline":
                assert r["note"].startswith("not measurable here") or "not measurable" in r["note"]
            if r["role"] == "comparison" and r["status"] in ("agree", "disagree"):
                assert r["predicted"] and r["measured"]

"""estimator-calibration: the trust rule status by status, and the quick run's table."""

from __future__ import annotations

import csv
import json

import pytest

from tangentlab.errors import ConfigError
from tangentlab.synthetic.experiments import names, resolve_config, run_experiment
from tangentlab.synthetic.experiments.calibration import cell_status, wilson_interval


def test_registered():
    assert "estimator-calibration" in names()


def test_wilson_interval():
    lo, hi = wilson_interval(95, 100)
    assert lo < 0.95 < hi and hi < 1
    assert wilson_interval(0, 10)[0] == 0.0


@pytest.mark.parametrize("args, want", [
    ((57, 60, 60, 0.01), "trusted"),
    ((40, 60, 60, 0.01), "undercovers"),
    ((57, 60, 60, 0.2), "biased"),
    ((9, 10, 60, 0.0), "mostly not measurable"),
    ((1000, 1000, 1000, 0.0), "overcovers"),
])
def test_cell_status(args, want):
    assert cell_status(*args) == want


def test_dimension_below_ambient_is_a_config_error():
    from tangentlab.synthetic.experiments import get

    with pytest.raises(ConfigError, match="ambient_dims"):
        resolve_config(get("estimator-calibration"), quick=True,
                       overrides={"dims": (2, 64), "ambient_dims": (64,)})


@pytest.mark.slow
def test_quick_run_writes_the_table(tmp_path):
    out = run_experiment("estimator-calibration", tmp_path / "run", quick=True)
    rows = list(csv.DictReader((out / "results.csv").open()))
    ests = {r["estimator"] for r in rows}
    assert {"ii_norm_sq", "visibility", "local_dimension", "zipf_s", "pinning_beta_raw",
            "pinning_beta_direction"} <= ests
    metrics = {r["metric"] for r in rows}
    assert {"coverage", "relative_bias", "measurable_fraction", "trusted"} <= metrics
    checks = {c["name"]: c for c in json.loads((out / "checks.json").read_text())}
    assert checks["calibration: zipf_s"]["passed"]
    assert (out / "calibration.png").stat().st_size > 1000

"""estimator-calibration: the trust rule status by status, and the quick run's table."""

from __future__ import annotations

import csv
import json

import pytest

from tangentlab.config import config_to_dict
from tangentlab.errors import ConfigError
from tangentlab.synthetic.experiments import get, names, resolve_config
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
def test_quick_run_writes_the_table(quick_reproduce):
    # the suite's shared quick reproduce ran run_experiment("estimator-calibration", quick=True)
    run_dir, _rc, err, _ = quick_reproduce(2)
    out = run_dir / "synthetic" / "estimator-calibration"
    assert (out / "results.csv").is_file(), err[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "synthetic/estimator-calibration"
    assert manifest["config"] == json.loads(json.dumps(config_to_dict(
        resolve_config(get("estimator-calibration"), quick=True)))), "not the quick config"
    rows = list(csv.DictReader((out / "results.csv").open()))
    ests = {r["estimator"] for r in rows}
    assert {"ii_norm_sq", "visibility", "local_dimension", "zipf_s", "pinning_beta_raw",
            "pinning_beta_direction"} <= ests
    metrics = {r["metric"] for r in rows}
    assert {"coverage", "relative_bias", "measurable_fraction", "trusted"} <= metrics
    checks = {c["name"]: c for c in json.loads((out / "checks.json").read_text())}
    assert checks["calibration: zipf_s"]["passed"]
    assert (out / "calibration.png").stat().st_size > 1000

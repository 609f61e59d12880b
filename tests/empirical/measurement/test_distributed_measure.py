"""Distributed ``measure`` on gloo ranks (CPU): the single-process results, and clean failures.

- checkpoint-parallel (more checkpoints than ranks: ranks take whole checkpoints, the fixed
  proxy is fitted first and broadcast): ``results.csv`` is byte-identical to one process;
- data-parallel (ranks split each checkpoint's eval batches and merge the statistics in rank
  order): identical except float64 sums, within 1e-10 relative;
- an unknown site, or a rank killed part-way, ends every rank with one line and no results (the
  killed run then resumes to the one-process results).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.empirical.conftest import TEST_MEASURE

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TANGENTLAB_QUIET": "1"})
    env.pop("TANGENTLAB_FAULT", None)
    env.pop("TANGENTLAB_FAULT_AFTER", None)
    env.update(extra)
    return env


def _measure(run: Path, out: Path, nproc: int, overrides: dict, **env: str):
    sets = [x for k, v in overrides.items() for x in ("--set", f"{k}={v}")]
    cmd = [sys.executable, "-m", "tangentlab", "empirical", "measure", str(run), "--out", str(out),
           "--device", "cpu", "--nproc", str(nproc), *sets]
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(**env), timeout=400)


def _single(run: Path, out: Path, overrides: dict) -> Path:
    from tangentlab.empirical.measurement.protocol import measure_trajectory

    return measure_trajectory(run, out, device="cpu", seed=0, overrides=overrides)


def _rows(path: Path) -> list[dict]:
    with open(path / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


#: Metrics that take square roots of covariance eigenvalues: the post-LayerNorm activations of
#: the (post-LN, BERT-style) encoder span d-1 dimensions, so one eigenvalue is zero up to
#: rounding (lambda_min/lambda_max ~ 1e-15); a 1e-16 relative change of the covariance (a
#: different grouping of its float64 sums) moves sqrt(lambda_min) by ~1e-8 of the spectrum and
#: the sigma effective rank by ~1e-9 relative. Bounded by sqrt(float64 eps) ~ 1.5e-8 instead.
SQRT_SPECTRUM_METRICS = {"representation_effective_rank"}


def _largest_float_difference(a: list[dict], b: list[dict], skip=frozenset()) -> float:
    """Largest relative difference over every numeric cell (rows whose metric is in ``skip``
    left out); every other cell must be equal."""
    assert len(a) == len(b)
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        if ra["metric"] in skip:
            continue
        for k in ra:
            if ra[k] == rb[k]:
                continue
            x, y = float(ra[k]), float(rb[k])  # a non-numeric difference raises here
            if math.isnan(x) and math.isnan(y):
                continue
            worst = max(worst, abs(x - y) / max(abs(x), 1e-300))
    return worst


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


@pytest.fixture(scope="module")
def one_decoder(tiny_runs, tmp_path_factory) -> Path:
    """The decoder measured in this process: what both checkpoint-parallel tests must equal."""
    return _single(tiny_runs["decoder"], tmp_path_factory.mktemp("one") / "one", TEST_MEASURE)


def test_checkpoint_parallel_equals_one_process(tiny_runs, one_decoder, tmp_path):
    run, one = tiny_runs["decoder"], one_decoder
    r = _measure(run, tmp_path / "two", 2, TEST_MEASURE)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "two")  # rank 0 alone printed
    assert (tmp_path / "two" / "results.csv").read_bytes() == (one / "results.csv").read_bytes()
    d = _manifest(tmp_path / "two")["distributed"]
    assert d.pop("wall_s") >= d.pop("measure_s") > 0
    assert d == {"world_size": 2, "backend": "gloo", "mode": "checkpoint", "autocast": None,
                 "rank_devices": {"0": "cpu", "1": "cpu"}}
    assert _manifest(one)["distributed"]["mode"] == "single"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["two"]  # nothing else written


def test_data_parallel_three_ranks_within_float_rounding(tiny_runs, tmp_path):
    """2 checkpoints on 3 ranks: each rank takes 1-2 of the 4 fit and 4 test batches."""
    run = tiny_runs["encoder"]
    ov = dict(TEST_MEASURE, max_checkpoints=2)
    one = _single(run, tmp_path / "one", ov)
    r = _measure(run, tmp_path / "three", 3, ov)
    assert r.returncode == 0, r.stderr
    assert _manifest(tmp_path / "three")["distributed"]["mode"] == "data"
    a, b = _rows(one), _rows(tmp_path / "three")
    assert _largest_float_difference(a, b, skip=SQRT_SPECTRUM_METRICS) <= 1e-10
    assert _largest_float_difference(a, b) <= 1.5e-8


def test_unknown_site_ends_every_rank_with_one_line(tiny_runs, tmp_path):
    r = _measure(tiny_runs["decoder"], tmp_path / "bad", 2,
                 dict(TEST_MEASURE, sites="blocks.0.resid_post,blocks.0.no_such_site"))
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tangentlab: error:")]
    assert len(lines) == 1 and "no_such_site" in lines[0], r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_killed_rank_0_gets_its_one_line_from_the_launcher(tiny_runs, tmp_path):
    """Rank 0 killed at its first checkpoint cannot print; ``--nproc``'s launcher prints the one
    line. The elastic agent reports only the first rank that failed, so the launcher learns from
    rank 0 itself whether it printed (with rank 1 killed, above, rank 0 prints and it does not)."""
    out = tmp_path / "two"
    r = _measure(tiny_runs["decoder"], out, 2, TEST_MEASURE,
                 TANGENTLAB_FAULT="measure_checkpoint:0:0")
    assert r.returncode != 0 and not out.exists()
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tangentlab: error:")]
    assert lines == ["tangentlab: error: rank 0 of 2 stopped with exit code -9; no results were "
                     "written"], r.stderr


def test_a_killed_checkpoint_parallel_run_leaves_no_results_and_resumes_to_them(
        tiny_runs, one_decoder, tmp_path):
    """Rank 1 killed at its last checkpoint ends every rank with one error line and leaves no
    run folder and no results anywhere, only rank 0's finished checkpoints in the hidden
    partial folder; ``--resume`` on 2 ranks gives one process's results.csv byte for byte."""
    from tangentlab.empirical.measurement.partial import partial_dir

    run, one = tiny_runs["decoder"], one_decoder
    out = tmp_path / "two"
    # rank 1 dies only once rank 0 has finished a checkpoint (ordered, not timed)
    r = _measure(run, out, 2, TEST_MEASURE, TANGENTLAB_FAULT="measure_checkpoint:5:1",
                 TANGENTLAB_FAULT_AFTER=str(partial_dir(out) / "checkpoint_*.json"))
    assert r.returncode != 0 and not out.exists()
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("tangentlab: error:")]
    assert len(lines) == 1, r.stderr
    assert "leaked" not in r.stderr, r.stderr  # no semaphore of a rank left to the tracker
    assert [p.name for p in tmp_path.iterdir()] == [partial_dir(out).name]
    assert not list(tmp_path.rglob("results.csv"))
    assert sorted(p.name for p in partial_dir(out).glob("checkpoint_*.json"))  # rank 0's, kept
    sets = [x for k, v in TEST_MEASURE.items() for x in ("--set", f"{k}={v}")]
    cmd = [sys.executable, "-m", "tangentlab", "empirical", "measure", str(run), "--out", str(out),
           "--device", "cpu", "--nproc", "2", "--resume", *sets]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=400)
    assert r.returncode == 0, r.stderr
    assert (out / "results.csv").read_bytes() == (one / "results.csv").read_bytes()
    assert not partial_dir(out).exists()

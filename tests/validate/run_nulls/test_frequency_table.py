"""The frequency-distance row under permuted frequency tables, on a run's own activations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tangentlab.errors import ConfigError, DataError, OutputPathError


def test_a_permuted_table_shuffles_only_the_ids_that_occur():
    from tangentlab.validate.run_nulls.frequency_table import permuted_counts

    counts = np.array([0, 5, 0, 7, 1, 9, 3, 0], dtype=float)
    np.testing.assert_array_equal(permuted_counts(counts, 0, 0), counts)  # table 0: the run's
    p1, p1_again, p2 = (permuted_counts(counts, s, i) for s, i in ((0, 1), (0, 1), (0, 2)))
    np.testing.assert_array_equal(p1, p1_again)  # seeded by [seed, index]
    assert not np.array_equal(p1, p2)
    for p in (p1, p2):
        assert list(np.flatnonzero(p == 0)) == [0, 2, 7] and sorted(p) == sorted(counts)


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    """A planted trajectory whose frequent tokens are pinned (alpha = 0.8), measured."""
    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.validate.planted_trajectories import PlantedSpec, shared_text, write_trajectory

    text = shared_text("wikipedia", 512, max_train_tokens=60_000)
    root = tmp_path_factory.mktemp("pinned")
    spec = PlantedSpec(steps=(0, 100), curve="flat", k_end=2.0, alpha=0.8, seed=5)
    traj = write_trajectory(spec, root / "run", text)
    return measure_trajectory(traj, root / "measure", device="cpu", overrides={
        "sites": ("blocks.-1.resid_post",), "rank": 4, "n_batches": 32, "batch_size": 4,
        "n_boot": 200, "sample_rows": 1024, "causal": False, "learning_arms": False,
        "threads": 1}, figures=False)


def test_pinning_is_found_on_the_run_s_table_and_not_on_shuffled_ones(pinned, tmp_path,
                                                                      monkeypatch):
    """Table 0 runs the run's own code on its own data (its stored numbers and status come
    back exactly); a shuffled table breaks the pinning, so the row reads "supported" rarely. The
    broken variant (the table never shuffled) reads it every time and fails the check."""
    import tangentlab.validate.run_nulls.frequency_table as ft

    out, passed = ft.write_frequency_table_null(pinned, tmp_path / "null", permutations=12)
    checks = {c["name"]: c for c in json.loads((out / "checks.json").read_text())}
    assert checks["same_code"]["passed"] and checks["same_code"]["measured"] == 0.0
    assert json.loads((out / "manifest.json").read_text())["run_status"] == "supported"
    assert checks["wrong_supported"]["measured"] <= 2 / 12
    assert not passed  # 12 tables cannot bound a rate at 0.08 (the check needs >= 45)
    lines = (out / "null.csv").read_text().splitlines()
    assert len(lines) == 1 + 13 and lines[1].endswith("supported,supported")
    monkeypatch.setattr(ft, "permuted_counts", lambda counts, seed, index: np.array(counts))
    _, broken = ft.write_frequency_table_null(pinned, tmp_path / "broken", permutations=12)
    bad = {c["name"]: c for c in json.loads((tmp_path / "broken" / "checks.json").read_text())}
    assert bad["wrong_supported"]["measured"] == 1.0 and not bad["wrong_supported"]["passed"]


def test_bad_input_is_refused_before_anything_runs(tmp_path, pinned):
    from tangentlab.validate.run_nulls.frequency_table import write_frequency_table_null

    with pytest.raises(ConfigError, match="at least 1"):
        write_frequency_table_null(pinned, tmp_path / "n", permutations=0)
    with pytest.raises(DataError, match="holds no measurement"):
        write_frequency_table_null(tmp_path, tmp_path / "n", permutations=2)
    assert not (tmp_path / "n").exists()
    before = sorted((p.name, p.stat().st_mtime_ns) for p in pinned.iterdir())
    with pytest.raises(OutputPathError, match="not a 'validate/frequency-table-null' run"):
        write_frequency_table_null(pinned, pinned, permutations=2)  # a measure run: not ours
    user = tmp_path / "notes.txt"
    user.write_text("mine")
    with pytest.raises(OutputPathError):
        write_frequency_table_null(pinned, user, permutations=2)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in pinned.iterdir()) == before
    assert user.read_text() == "mine"


def test_the_cli_runs_on_a_reproduce_run(quick_reproduce, tmp_path, capsys):
    """`validate frequency-null RUN` on a real (tiny) reproduce: both measurements, one line per
    check; too few tables to pass, so exit 1; a flag of the battery is refused (exit 2)."""
    from tangentlab.cli import main

    run = quick_reproduce(2)[0]
    rc = main(["validate", "frequency-null", str(run), "--permutations", "2", "--out",
               str(tmp_path / "null")])
    text = capsys.readouterr().out
    assert rc == 1 and "pass  same_code" in text and "FAIL  wrong_supported" in text
    models = {line.split(",")[1] for line in
              (tmp_path / "null" / "null.csv").read_text().splitlines()[1:]}
    assert models == {"encoder", "decoder"}
    assert main(["validate", "--quick", "frequency-null", str(run), "--out",
                 str(tmp_path / "x")]) == 2
    assert "drop --quick" in capsys.readouterr().err and not (tmp_path / "x").exists()

"""tangentlab.runs: atomic writes, run directories, tidy results and manifests."""

from __future__ import annotations

import csv
import json

import pytest

from tangentlab.errors import ConfigError, DataError
from tangentlab.runs import (
    RESULT_COLUMNS,
    atomic_directory,
    atomic_write_text,
    build_manifest,
    read_manifest,
    read_results,
    write_manifest,
    write_results,
)


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "a" / "b.txt"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two")
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.txt"]


def test_atomic_directory_removes_partial_output_on_error(tmp_path):
    final = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with atomic_directory(final) as tmp:
            (tmp / "results.csv").write_text("partial")
            raise RuntimeError("boom")
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_replaces_a_previous_run_but_refuses_other_folders(tmp_path):
    final = tmp_path / "run"
    with atomic_directory(final) as tmp:
        write_manifest(tmp, {"kind": "x"})
        (tmp / "old.txt").write_text("old")
    with atomic_directory(final) as tmp:
        write_manifest(tmp, {"kind": "y"})
    assert read_manifest(final)["kind"] == "y"
    assert not (final / "old.txt").exists()
    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match="not a tangentlab run directory"):
        with atomic_directory(user):
            pass
    assert (user / "thesis.tex").read_text() == "precious"


def test_results_table_has_standard_columns_then_extras_and_roundtrips(tmp_path):
    rows = [
        {"experiment": "e", "metric": "m", "value": 0.1, "t": 0.5},
        {"experiment": "e", "metric": "m", "value": 1 / 3, "ci_low": 0.2, "manifold": "sphere"},
    ]
    path = write_results(rows, tmp_path / "results.csv")
    header = next(csv.reader(path.open()))
    assert header == list(RESULT_COLUMNS) + ["manifold", "t"]
    df = read_results(tmp_path)
    assert df["value"].tolist() == [0.1, 1 / 3]  # repr floats round-trip exactly
    with pytest.raises(DataError, match="lacks 'metric' or 'value'"):
        write_results([{"metric": "m"}], tmp_path / "bad.csv")


def test_manifest_records_config_seeds_versions_and_commit(tmp_path):
    manifest = build_manifest(kind="test", config={"rank": 3}, seeds={"data": 7},
                              device="cpu", dtype="float64", timings={"fit": 1.23456})
    write_manifest(tmp_path, manifest)
    loaded = json.loads((tmp_path / "manifest.json").read_text())
    assert loaded["config"] == {"rank": 3}
    assert loaded["seeds"] == {"data": 7}
    assert loaded["dtype"] == "float64" and loaded["device"] == "cpu"
    assert loaded["versions"]["numpy"] is not None
    assert "commit" in loaded["git"]
    assert loaded["timings_s"] == {"fit": 1.235}
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        read_manifest(tmp_path)


def test_written_files_and_run_directories_have_ordinary_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.html", "<html></html>")
        with atomic_directory(tmp_path / "run") as tmp:
            write_manifest(tmp, {"kind": "x"})
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "run" / "manifest.json").stat().st_mode & 0o777 == 0o644

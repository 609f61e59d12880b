"""tangentlab.runs: atomic writes, run directories, tidy results and manifests."""

from __future__ import annotations

import csv
import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from tangentlab.errors import ConfigError, DataError, OutputPathError, RunLockedError
from tangentlab.runs import (
    RESULT_COLUMNS,
    TRAIN_CONFIG_NAME,
    atomic_directory,
    atomic_write_text,
    build_manifest,
    check_output_dir,
    lock_paths,
    read_lock_holder,
    read_manifest,
    read_results,
    remove_partials,
    run_lock,
    write_manifest,
    write_results,
)
from tests.killing import subprocess_env


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


def test_package_versions_read_each_package_s_metadata_once_per_process(monkeypatch):
    """Every manifest records the versions; the metadata is read once, and each caller gets its
    own dict (changing one changes no later manifest)."""
    from tangentlab import runs

    runs._package_versions.cache_clear()
    seen, real = [], runs.metadata.version
    monkeypatch.setattr(runs.metadata, "version", lambda name: seen.append(name) or real(name))
    try:
        first = runs.package_versions(("numpy", "no-such-package-here"))
        first["numpy"] = "changed"
        second = runs.package_versions(("numpy", "no-such-package-here"))
        assert seen == ["numpy", "no-such-package-here"]
        assert second == {"python": first["python"], "numpy": real("numpy"),
                          "no-such-package-here": None}
    finally:
        runs._package_versions.cache_clear()


def test_git_commit_names_the_checkout_s_commit_and_whether_tracked_files_changed(
        tmp_path, monkeypatch):
    import subprocess

    from tangentlab.runs import git_commit

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no checkout above
    assert git_commit(tmp_path) == {"commit": None, "dirty": None}  # not a checkout
    git("init", "-q")
    assert git_commit(tmp_path) == {"commit": None, "dirty": None}  # no commit yet
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD").strip()
    (tmp_path / "untracked.txt").write_text("not counted")
    assert git_commit(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "a.txt").write_text("two")
    assert git_commit(tmp_path) == {"commit": head, "dirty": True}


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


# ----------------------------------------------------------------------- output-path checks


def test_check_output_dir_accepts_new_empty_and_same_kind(tmp_path):
    assert check_output_dir(tmp_path / "a" / "b", kind="synthetic/visibility") == "new"
    (tmp_path / "empty").mkdir()
    assert check_output_dir(tmp_path / "empty", kind="synthetic/visibility") == "empty"
    write_manifest(tmp_path / "run", {"kind": "synthetic/visibility"})
    assert check_output_dir(tmp_path / "run", kind="synthetic/visibility") == "run"
    assert check_output_dir(tmp_path / "run", kind=None) == "run"
    assert not (tmp_path / "a").exists()  # a check writes nothing
    # what a killed attempt left (its own temporary names) does not make a folder non-empty
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / ".tokenizer.partial-x1").mkdir()
    (tmp_path / "killed" / ".train_config.json.x2.tmp").write_text("{")
    assert check_output_dir(tmp_path / "killed", kind="empirical/train") == "empty"
    (tmp_path / "killed" / ".git").mkdir()  # a user's hidden folder does
    with pytest.raises(OutputPathError, match="is not empty"):
        check_output_dir(tmp_path / "killed", kind="empirical/train")


@pytest.mark.parametrize("case,match", [
    ("file", "is an existing file"),
    ("under-file", "which is a file"),
    ("other-kind", "holds a 'empirical/train' run, not a 'synthetic/visibility' run"),
    ("not-empty", "is not empty and is not a tangentlab run directory"),
    ("same-kind-refused", "pass --resume to continue it"),
])
def test_check_output_dir_refusals_are_typed_one_line_errors(tmp_path, case, match):
    target = tmp_path / "out"
    existing = "replace"
    if case == "file":
        target.write_text("user data")
    elif case == "under-file":
        (tmp_path / "f").write_text("x")
        target = tmp_path / "f" / "out"
    elif case == "other-kind":
        target.mkdir()
        (target / TRAIN_CONFIG_NAME).write_text("{}")  # an unfinished training run
    elif case == "not-empty":
        target.mkdir()
        (target / "thesis.tex").write_text("precious")
    else:
        write_manifest(target, {"kind": "synthetic/visibility"})
        existing = "refuse"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(OutputPathError, match=match) as info:
        check_output_dir(target, kind="synthetic/visibility", existing=existing)
    assert isinstance(info.value, ConfigError)  # exit 2 in the CLI
    assert "\n" not in str(info.value) and "--out" in str(info.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_atomic_directory_refuses_an_existing_file(tmp_path):
    target = tmp_path / "out"
    target.write_text("user data")
    with pytest.raises(OutputPathError, match="existing file"):
        with atomic_directory(target):
            pass
    assert target.read_text() == "user data"


def test_remove_partials_only_takes_temporary_names(tmp_path):
    (tmp_path / ".step_000003.partial-abc").mkdir()
    (tmp_path / ".step_000003.partial-abc" / "model.safetensors").write_text("half")
    (tmp_path / ".results.csv.x1.tmp").write_text("half")
    (tmp_path / "results.csv").write_text("kept")
    (tmp_path / ".hidden").write_text("kept")
    removed = remove_partials(tmp_path)
    assert sorted(p.name for p in removed) == [".results.csv.x1.tmp", ".step_000003.partial-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "results.csv"]


# ----------------------------------------------------------------------- run locks

_HOLD = (
    "import sys, time, pathlib\n"
    "from tangentlab.runs import run_lock\n"
    "with run_lock(sys.argv[1], command='holder test'):\n"
    "    pathlib.Path(sys.argv[2]).write_text('held')\n"
    "    time.sleep(120)\n"
)


def _hold_in_subprocess(run_dir, tmp_path):
    marker = tmp_path / "held.marker"
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(run_dir), str(marker)],
                            env=subprocess_env(), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the lock holder did not start"
        time.sleep(0.02)
    return proc


def test_lock_is_released_without_leaving_files_and_is_reentrant(tmp_path):
    run = tmp_path / "new" / "run"
    with run_lock(run, command="outer") as me:
        lock, info = lock_paths(run)
        assert lock.parent == tmp_path / "new" and lock.name == ".run.lock"
        assert read_lock_holder(run) == me and me.pid == os.getpid()
        assert json.loads(info.read_text())["command"] == "outer"
        with run_lock(run, command="inner") as again:  # same process: re-entrant
            assert again == me
        assert read_lock_holder(run) == me  # the inner exit did not release it
    assert not lock.exists() and not info.exists()
    assert not (tmp_path / "new").exists()  # the folder made for the lock is gone too


def test_second_writer_gets_a_typed_error_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    proc = _hold_in_subprocess(run, tmp_path)
    try:
        with pytest.raises(RunLockedError) as info:
            with run_lock(run, command="second"):
                pass
        msg = str(info.value)
        assert f"pid {proc.pid} on {socket.gethostname()}" in msg
        assert "holder test" in msg and "started 20" in msg and "\n" not in msg
        assert info.value.exit_code == 4
    finally:
        proc.kill()
        proc.wait()


def test_lock_of_a_killed_process_is_taken_over_and_logged(tmp_path, caplog):
    run = tmp_path / "run"
    proc = _hold_in_subprocess(run, tmp_path)
    proc.kill()  # SIGKILL: no clean-up, the record stays beside the run directory
    proc.wait()
    dead = read_lock_holder(run)
    assert dead is not None and dead.pid == proc.pid and dead.is_alive() is False
    with caplog.at_level(logging.WARNING, logger="tangentlab.runs"):
        with run_lock(run, command="after the crash") as me:
            record = json.loads(lock_paths(run)[1].read_text())
    assert record["took_over"]["pid"] == proc.pid and me.pid == os.getpid()
    assert any("took over the lock" in r.getMessage() and f"pid {proc.pid}" in r.getMessage()
               and "no longer running" in r.getMessage() for r in caplog.records)


def test_a_forked_child_does_not_share_its_parents_lock(tmp_path):
    import multiprocessing as mp

    run = tmp_path / "run"
    ctx = mp.get_context("fork")
    with run_lock(run, command="parent"):
        with ctx.Pool(1) as pool:
            outcome = pool.apply(_try_lock, (str(run),))
        assert outcome.startswith("RunLockedError") and f"pid {os.getpid()}" in outcome
        assert read_lock_holder(run).pid == os.getpid()  # the child did not release it
        probe = subprocess.run([sys.executable, "-c", _TRY, str(run)], env=subprocess_env(),
                               capture_output=True, text=True)
        assert probe.stdout.startswith("RunLockedError"), probe.stderr


_TRY = (
    "import sys\n"
    "from tangentlab.runs import run_lock\n"
    "try:\n"
    "    with run_lock(sys.argv[1]):\n"
    "        print('acquired')\n"
    "except Exception as e:\n"
    "    print(type(e).__name__, e)\n"
)


def _try_lock(run: str) -> str:
    try:
        with run_lock(run, command="child"):
            return "acquired"
    except RunLockedError as exc:
        return f"RunLockedError {exc}"

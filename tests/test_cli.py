"""The CLI entry point: instant --help, one-line errors, exit codes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tangentlab.cli import EXIT_CODES, main
from tangentlab.crash import CRASH_EXIT_CODE
from tangentlab.errors import OutputPathError


def test_help_imports_no_heavy_module():
    code = (
        "import sys; from tangentlab.cli import build_parser; build_parser().format_help(); "
        "heavy = [m for m in ('torch', 'sympy', 'transformers', 'geomstats', 'matplotlib', "
        "'pandas', 'sklearn', 'scipy') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_unknown_area_is_a_one_line_error_with_exit_2(capsys):
    try:
        rc = main(["no-such-area"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0]


def test_version_flag(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert "tangentlab" in capsys.readouterr().out


# ----------------------------------------------------------------------- internal errors


@pytest.fixture
def crash_env(tmp_path, monkeypatch):
    """Crash logs go to tmp_path/cache; no debug; the current folder is an empty tmp folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TANGENTLAB_CRASH_DIR", raising=False)
    monkeypatch.delenv("TANGENTLAB_DEBUG", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return tmp_path


def _raise_internal(args):
    raise RuntimeError("deliberate internal failure\nsecond line")


def test_internal_error_is_one_line_with_a_crash_log_and_exit_3(crash_env, monkeypatch, capsys):
    import tangentlab.commands.theory as theory

    monkeypatch.setattr(theory, "_list", _raise_internal)
    assert main(["theory", "list"]) == CRASH_EXIT_CODE == 3
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1, captured.err
    line = err[0]
    assert line.startswith("tangentlab: internal error in 'theory list': RuntimeError: "
                           "deliberate internal failure second line; crash log: ")
    assert "Traceback" not in captured.err and "--debug" in line
    path = Path(line.split("crash log: ", 1)[1].split(";", 1)[0])
    assert path.parent == crash_env / "cache" / "tangentlab" / "crashes"
    log = path.read_text()
    assert "command: tangentlab theory list" in log
    assert "Traceback (most recent call last)" in log and "_raise_internal" in log
    assert "RuntimeError: deliberate internal failure" in log
    assert '"numpy":' in log and '"torch":' in log  # package versions
    assert '"area": "theory"' in log  # the parsed arguments
    assert list((crash_env / "cwd").iterdir()) == []  # nothing in the current folder


@pytest.mark.parametrize("how", ["flag-after-command", "flag-before-area", "env"])
def test_debug_shows_the_traceback_instead_of_a_log(crash_env, monkeypatch, capsys, how):
    import tangentlab.commands.theory as theory

    monkeypatch.setattr(theory, "_list", _raise_internal)
    argv = {"flag-after-command": ["theory", "list", "--debug"],
            "flag-before-area": ["--debug", "theory", "list"],
            "env": ["theory", "list"]}[how]
    if how == "env":
        monkeypatch.setenv("TANGENTLAB_DEBUG", "1")
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_raise_internal" in err
    assert not (crash_env / "cache").exists()  # no crash log written


def test_crash_log_goes_to_the_run_directory_being_written(crash_env, monkeypatch, capsys):
    import tangentlab.commands.theory as theory
    from tangentlab.runs import run_lock

    run = crash_env / "run"

    def command(args):
        with run_lock(run, command="test"):
            run.mkdir()
            (run / "train_config.json").write_text("{}")  # a run already (in place)
            raise KeyError("missing internal key")

    monkeypatch.setattr(theory, "_list", command)
    assert main(["theory", "list"]) == 3
    err = capsys.readouterr().err
    logs = list((run / "logs").glob("crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in err
    assert f"run directory: {run}" in logs[0].read_text()
    assert not (crash_env / "cache").exists()


def test_crash_log_falls_back_to_the_temporary_folder_never_the_current_one(
        crash_env, monkeypatch, capsys):
    import tangentlab.commands.theory as theory

    (crash_env / "blocker").write_text("a file where the cache folder should go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(crash_env / "blocker"))
    monkeypatch.setattr(theory, "_list", _raise_internal)
    assert main(["theory", "list"]) == 3
    line = capsys.readouterr().err.strip()
    path = Path(line.split("crash log: ", 1)[1].split(";", 1)[0])
    try:
        assert path.parent == Path(tempfile.gettempdir()) / "tangentlab-crashes"
        assert "deliberate internal failure" in path.read_text()
        assert list((crash_env / "cwd").iterdir()) == []
    finally:
        path.unlink()


def test_exit_codes_are_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code, _ in EXIT_CODES:
        assert re.search(rf"^  {code}\s", out, re.M), f"exit code {code} missing from --help"
    assert [c for c, _ in EXIT_CODES] == [0, 1, 2, 3, 4, 130, 141, 143]


# ----------------------------------------------------------------------- output paths and locks


def test_an_existing_file_as_out_is_a_one_line_error_and_stays_untouched(tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("user data")
    assert main(["synthetic", "run", "visibility", "--quick", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an existing file" in err[0] and "choose another --out" in err[0]
    assert target.read_text() == "user data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.txt"]


def test_a_run_of_another_kind_is_refused(tmp_path, capsys):
    from tangentlab.runs import write_manifest

    other = tmp_path / "vis"
    write_manifest(other, {"kind": "synthetic/visibility"})
    assert main(["synthetic", "run", "river-valley", "--quick", "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert "holds a 'synthetic/visibility' run, not a 'synthetic/river-valley' run" in err
    assert sorted(p.name for p in other.iterdir()) == ["manifest.json"]


def test_a_locked_run_directory_exits_4_naming_the_holder(tmp_path, capsys):
    from tests.test_runs import _hold_in_subprocess

    out = tmp_path / "out"
    holder = _hold_in_subprocess(out, tmp_path)
    try:
        assert main(["synthetic", "run", "visibility", "--quick", "--out", str(out)]) == 4
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"in use by pid {holder.pid}" in err[0]
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_sigterm_exits_143_and_leaves_no_partial_run(tmp_path):
    from tests.killing import kill_at

    out = tmp_path / "out"
    rc = kill_at(["synthetic", "run", "visibility", "--quick", "--out", str(out)],
                 "atomic_directory", tmp_path, sig=signal.SIGTERM)
    assert rc == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run, no .partial, no lock


@pytest.mark.slow
def test_a_killed_attempts_half_built_run_is_cleared_by_the_next(tmp_path, capsys):
    from tangentlab.runs import lock_paths, write_manifest

    out = tmp_path / "out"
    partial = tmp_path / ".out.partial-x1"  # what SIGKILL inside atomic_directory leaves
    write_manifest(partial, {"kind": "synthetic/river-valley"})
    other = tmp_path / ".other.partial-x2"  # another run's: not ours to take
    other.mkdir()
    lock_paths(out)[1].write_text('{"pid": 999999999, "host": "h", "started": "s"}')
    assert main(["synthetic", "run", "river-valley", "--quick", "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.partial-x2", "out"]


def test_a_crash_never_writes_into_an_out_folder_that_is_not_a_run_yet(
        crash_env, monkeypatch, capsys):
    import tangentlab.commands.theory as theory
    from tangentlab.runs import run_lock

    out = crash_env / "out"
    out.mkdir()  # the user made it, empty

    def command(args):
        with run_lock(out, command="test"):
            raise RuntimeError("failed before writing anything")

    monkeypatch.setattr(theory, "_list", command)
    assert main(["theory", "list"]) == 3
    assert list(out.iterdir()) == []  # so a rerun into it is still accepted
    assert len(list((crash_env / "cache" / "tangentlab" / "crashes").iterdir())) == 1


def test_a_closed_output_pipe_is_not_an_internal_error(crash_env, monkeypatch, capsys):
    import tangentlab.commands.theory as theory

    def reader_went_away(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(theory, "_list", reader_went_away)
    assert main(["theory", "list"]) == 141
    assert "internal error" not in capsys.readouterr().err
    assert not (crash_env / "cache").exists()  # no crash log


# ----------------------------------------------------------------------- validate --out


def _fake_run(folder, kind):
    """A run directory of ``kind`` as its writer leaves it (files that must survive)."""
    from tangentlab.runs import TRAIN_CONFIG_NAME, write_manifest

    folder.mkdir(parents=True)
    (folder / "results.csv").write_text("metric,value\nx,1\n")
    if kind == "empirical/train":  # an unfinished training run: its config, no manifest yet
        (folder / TRAIN_CONFIG_NAME).write_text('{"arch": "decoder"}\n')
        (folder / "checkpoints" / "step_000000").mkdir(parents=True)
        (folder / "checkpoints" / "step_000000" / "model.safetensors").write_bytes(b"weights")
    else:
        write_manifest(folder, {"kind": kind, "stages": {}})
    return folder


def _tree_hash(folder):
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["empirical/train", "empirical/measure", "synthetic/visibility",
                                  "reproduce", "unreadable"])
def test_validate_never_replaces_a_run_of_another_kind(tmp_path, capsys, monkeypatch, kind):
    import tangentlab.validate.battery as battery

    def battery_must_not_run(cfg):
        raise AssertionError("the battery ran although --out holds another kind of run")

    monkeypatch.setattr(battery, "run_battery", battery_must_not_run)
    run = _fake_run(tmp_path / "run", kind)
    if kind == "unreadable":
        (run / "manifest.json").write_text("[1, 2]")
    before = _tree_hash(run)
    assert main(["validate", "--quick", "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a 'validate' run" in err[0] and str(run) in err[0], err
    assert _tree_hash(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no lock, no partial left


def test_validate_takes_the_run_lock(tmp_path, capsys, monkeypatch):
    import tangentlab.validate.battery as battery
    from tests.test_runs import _hold_in_subprocess

    monkeypatch.setattr(battery, "run_battery", lambda cfg: pytest.fail("the battery ran"))
    out = tmp_path / "out"
    holder = _hold_in_subprocess(out, tmp_path)
    try:
        assert main(["validate", "--quick", "--out", str(out)]) == 4
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"in use by pid {holder.pid}" in err[0]
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()


def test_write_battery_refuses_another_kind_of_run_from_python_too(tmp_path, monkeypatch):
    import tangentlab.validate.battery as battery

    monkeypatch.setattr(battery, "run_battery", lambda cfg: pytest.fail("the battery ran"))
    run = _fake_run(tmp_path / "run", "empirical/measure")
    before = _tree_hash(run)
    with pytest.raises(OutputPathError, match="not a 'validate' run"):
        battery.write_battery(run, battery.BatteryConfig.quick(), quick=True)
    assert _tree_hash(run) == before


# ----------------------------------------------------------------------- early refusals


def _exit_code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses before any handler runs
        return int(exc.code)


@pytest.mark.parametrize("value", ["0", "-2", "two"])
@pytest.mark.parametrize("command", [["empirical", "train", "--arch", "decoder"],
                                     ["empirical", "measure", "somewhere"]],
                         ids=["train", "measure"])
def test_nproc_below_one_is_refused_by_the_parser(tmp_path, capsys, value, command):
    out = tmp_path / "out"
    assert _exit_code([*command, "--out", str(out), "--nproc", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nproc" in err[0] and "whole number >= 1" in err[0], err
    assert not out.exists()


def test_reproduce_refuses_a_missing_external_measure_before_any_stage(tmp_path, capsys,
                                                                       monkeypatch):
    import tangentlab.pipeline.reproduce as rp

    monkeypatch.setattr(rp, "run_stages", lambda *a, **k: pytest.fail("the stages ran"))
    out = tmp_path / "run"
    missing = tmp_path / "nonexistent"
    rc = main(["reproduce", "--quick", "--out", str(out),
               "--set", f"external_measures=x={missing}"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "external_measures" in err[0] and str(missing) in err[0], err
    assert not out.exists()


def test_a_path_the_file_system_refuses_is_bad_input_not_an_internal_error(tmp_path, capsys):
    """Issue 32: a 4800-character path was an internal error (exit 3)."""
    long = tmp_path / ("x" * 4800)
    assert main(["report", str(long)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err and "4800" not in err[:80]
    assert len(err) < 600  # the path is shortened in the message (it had 4800+ characters)


@pytest.mark.parametrize("extra", [["--setting", "full"], ["--nproc", "2"], ["--mutant", "narrow-intervals"]])
def test_validate_refuses_end_to_end_options_without_end_to_end(tmp_path, capsys, extra):
    """Issue 32: `validate --setting` and `--nproc` without `--end-to-end` did nothing, silently."""
    out = tmp_path / "v"
    assert main(["validate", "--quick", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert extra[0] in err and "--end-to-end" in err and not out.exists()

"""The report renders into a staging folder and swaps it in: a failed render loses nothing."""

from __future__ import annotations

import os

import pytest

from tangentlab.cli import main
from tangentlab.errors import OutputPathError
from tangentlab.report import render as render_mod
from tangentlab.report.render import render_report
from tangentlab.report.swap import staged_report
from tests.report.fixtures import measure_rows, write_run


@pytest.fixture(scope="module")
def _rendered_once(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("rendered") / "run",
                    {"decoder": measure_rows("decoder"), "encoder": measure_rows("encoder")})
    render_report(run)
    return run


@pytest.fixture()
def rendered(_rendered_once, tmp_path):
    """A rendered run at ``tmp_path/run``: a copy of one rendered once per module."""
    import shutil

    run = shutil.copytree(_rendered_once, tmp_path / "run")
    figs = sorted(p.name for p in (run / "figures").iterdir())
    assert len(figs) >= 5
    return run, figs, (run / "report.html").read_bytes()


def _snapshot(run):
    return (sorted(p.name for p in (run / "figures").iterdir()), (run / "report.html").read_bytes(),
            (run / "report.md").read_bytes())


def test_a_failed_render_leaves_the_old_report_and_figures(rendered, monkeypatch):
    run, figs, html = rendered
    before = _snapshot(run)

    calls = []
    real = render_mod.render_png

    def boom(*a, **k):  # the third figure fails: two are drawn, the rest never are
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("render failed half-way")
        return real(*a, **k)

    monkeypatch.setattr(render_mod, "render_png", boom)
    with pytest.raises(RuntimeError, match="half-way"):
        render_report(run)
    assert _snapshot(run) == before  # before: the figures were deleted first, two came back
    assert not [p for p in run.iterdir() if ".partial-" in p.name]  # no staging folder left


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a read-only folder")
def test_a_run_folder_it_cannot_write_is_a_typed_error_and_keeps_the_figures(rendered, capsys):
    run, figs, html = rendered
    before = _snapshot(run)
    os.chmod(run, 0o555)
    try:
        assert main(["report", str(run)]) == 2  # today: 15 figures -> 0, then exit 3
        assert "--out DIR" in capsys.readouterr().err
        assert _snapshot(run) == before
    finally:
        os.chmod(run, 0o755)


def test_unwritable_target_raises_output_path_error(rendered, tmp_path, monkeypatch, capsys):
    import tempfile

    run, figs, _ = rendered
    before = _snapshot(run)

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    with pytest.raises(OutputPathError, match="nothing was changed"):
        with staged_report(tmp_path):
            pass
    assert main(["report", str(run)]) == 2  # what root sees as a read-only folder, simulated
    assert "Permission denied" in capsys.readouterr().err
    assert _snapshot(run) == before


def test_out_writes_elsewhere_and_leaves_the_runs_own_report(rendered, tmp_path, capsys):
    run, figs, html = rendered
    before = _snapshot(run)
    out = tmp_path / "elsewhere"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert _snapshot(run) == before
    assert (out / "report.html").is_file() and sorted(p.name for p in (out / "figures").iterdir()) == figs
    md = (out / "report.md").read_text()
    assert "](../run/measure/decoder/)" in md  # links to the run's stage folders still resolve
    assert main(["report", str(run), "--out", str(out)]) == 0  # an earlier report there: replaced
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["report", str(run), "--out", str(tmp_path / "busy")]) == 2
    assert "holds other files" in capsys.readouterr().err
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_a_rerender_replaces_figures_that_are_no_longer_drawn(rendered):
    run, figs, _ = rendered
    (run / "figures" / "stale.png").write_bytes(b"old")
    render_report(run)
    assert sorted(p.name for p in (run / "figures").iterdir()) == figs


def test_a_staging_folder_left_by_a_killed_render_is_removed_later(tmp_path):
    import time

    stale = tmp_path / ".report.partial-killed"
    fresh = tmp_path / ".report.partial-running"
    for d in (stale, fresh):
        (d / "figures").mkdir(parents=True)
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    with staged_report(tmp_path) as staging:
        (staging / "report.html").write_text("<html></html>")
    assert not stale.exists() and fresh.exists()  # a young one may be a render still running
    assert (tmp_path / "report.html").read_text() == "<html></html>"


def test_a_staging_folder_of_a_render_killed_minutes_ago_is_removed_by_the_next(tmp_path):
    """Issue 32: a kill -9 during `report` left a .report.partial-* folder that the next
    successful report kept (it was younger than an hour); a live render's folder stays."""
    import json
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    killed = tmp_path / ".report.partial-killed"
    live = tmp_path / ".report.partial-live"
    other = tmp_path / ".keep-me"
    for d, pid in ((killed, dead), (live, str(os.getppid()))):
        (d / "figures").mkdir(parents=True)
        (d / ".owner").write_text(json.dumps({"pid": int(pid), "host": socket.gethostname(),
                                              "started": "2026-12-06T00:00:00+0000"}))
    other.mkdir()
    with staged_report(tmp_path) as staging:
        assert json.loads((staging / ".owner").read_text())["pid"] == os.getpid()
        (staging / "report.html").write_text("<html></html>")
    assert not killed.exists() and live.exists() and other.exists()
    assert not list(tmp_path.glob(".report.partial-*"))[1:]  # only the live one is left


def test_report_waits_for_no_one_a_locked_run_exits_4(rendered, tmp_path, capsys):
    from tests.test_runs import _hold_in_subprocess

    run, figs, _ = rendered
    before = _snapshot(run)
    holder = _hold_in_subprocess(run, tmp_path)
    try:
        assert main(["report", str(run)]) == 4  # a reproduce still writing it, say
        assert f"in use by pid {holder.pid}" in capsys.readouterr().err
        assert _snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()

"""Status lines around steps without a progress bar: a pipe or a log is never silent."""

from __future__ import annotations

import re

import pytest

from tangentlab.progress import progress_enabled, status


def test_status_prints_a_start_and_a_done_line_when_stderr_is_not_a_terminal(capsys, monkeypatch):
    monkeypatch.delenv("TANGENTLAB_QUIET", raising=False)
    monkeypatch.delenv("TANGENTLAB_PROGRESS", raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert not progress_enabled()  # pytest captures stderr (not a terminal): no bar, lines instead
    with status("loading and tokenizing the eval text"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "loading and tokenizing the eval text ..."
    assert re.fullmatch(r"loading and tokenizing the eval text: done in \d+\.\d s", err[1])


def test_status_says_nothing_more_when_the_step_fails_and_is_quiet_when_asked(capsys, monkeypatch):
    monkeypatch.delenv("TANGENTLAB_QUIET", raising=False)
    with pytest.raises(RuntimeError):
        with status("loading checkpoint step_000012"):
            raise RuntimeError("boom")
    assert capsys.readouterr().err == "loading checkpoint step_000012 ...\n"
    monkeypatch.setenv("TANGENTLAB_QUIET", "1")
    with status("x"):
        pass
    assert capsys.readouterr().err == ""

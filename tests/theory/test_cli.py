"""`tangentlab theory` (tangentlab/commands/theory.py)."""

from __future__ import annotations

import json

from tangentlab.cli import main


def test_list_show_verify(capsys):
    assert main(["theory", "list"]) == 0
    out = capsys.readouterr().out
    assert "curvature-visibility" in out and "river-valley" in out
    assert main(["theory", "show", "river-valley"]) == 0
    assert "$$" in capsys.readouterr().out
    assert main(["theory", "show", "river-valley", "--format", "latex"]) == 0
    assert "\\begin{enumerate}" in capsys.readouterr().out
    assert main(["theory", "verify", "river-valley", "--json", "--seed", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["seed"] == 2
    assert data["derivations"][0]["derivation"] == "river-valley"
    assert main(["theory", "verify", "river-valley"]) == 0
    assert "checks passed" in capsys.readouterr().out


def test_bad_input_exit_2(capsys):
    assert main(["theory", "verify", "nope"]) == 2
    assert "unknown derivation" in capsys.readouterr().err
    assert main(["theory", "show", "nope"]) == 2
    assert main(["theory", "verify", "--seed", "-1"]) == 2


def test_failing_check_exit_1(capsys, monkeypatch):
    from tangentlab.theory import derivation

    real = derivation.get("river-valley")
    mutated = real.mutated("gd_step", lambda e: e.func(e.lhs, e.rhs * 0.99))
    monkeypatch.setitem(derivation._REGISTRY._made, "river-valley", mutated)  # the cached instance
    assert main(["theory", "verify", "river-valley"]) == 1
    assert "FAIL" in capsys.readouterr().out

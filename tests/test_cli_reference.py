"""docs/cli.md holds every command and option of the CLI, and is up to date."""

from __future__ import annotations

from pathlib import Path

from tangentlab.cli_reference import command_options, iter_parsers, main, render_reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_every_command_and_option_is_documented():
    text = DOC.read_text()
    missing = []
    for prog, parser in iter_parsers():
        if f"## {prog}\n" not in text:
            missing.append(prog)
        section = text.split(f"## {prog}\n", 1)[-1].split("\n## ", 1)[0]
        missing += [f"{prog} {opt}" for opt in command_options(parser) if opt not in section]
    assert not missing, f"docs/cli.md lacks {missing}; run `python -m tangentlab.cli_reference docs/cli.md`"


def test_committed_reference_is_up_to_date():
    assert DOC.read_text() == render_reference(), (
        "docs/cli.md is stale; regenerate it with `python -m tangentlab.cli_reference docs/cli.md`")


def test_check_mode_detects_a_stale_file(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text("# CLI reference\n")
    assert main(["--check", str(stale)]) == 1
    assert main([str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0
    assert "tangentlab reproduce" in stale.read_text() and "--quick" in stale.read_text()

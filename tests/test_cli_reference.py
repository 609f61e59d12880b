"""docs/cli.md holds every command and option of the CLI, and is up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

from tangentlab.cli_reference import command_options, iter_parsers, main, render_reference
from tangentlab.errors import ConfigError

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


def test_a_generated_block_replaces_only_itself_and_needs_its_markers(tmp_path, capsys):
    from tangentlab.cli_reference import splice_block, write_generated_page

    block = "<!-- BEGIN b (generated) -->\nnew\n<!-- END b -->\n"
    page = "# Page\nprose\n<!-- BEGIN b -->\nold\n<!-- END b -->\nmore prose\n"
    once = splice_block(page, block, "b")
    assert once == "# Page\nprose\n" + block + "more prose\n"
    assert splice_block(once, block, "b") == once  # idempotent: the block keeps its markers

    def run(path, *flags):
        return write_generated_page([*flags, str(path)], module="m", default="x.md",
                                    description="d", render=lambda: block, block="b")

    good, bad, twice = tmp_path / "good.md", tmp_path / "bad.md", tmp_path / "twice.md"
    good.write_text(page)
    bad.write_text("# Page\nprose\n")
    twice.write_text(page + page)
    assert run(good, "--check") == 1 and run(good) == 0 and good.read_text() == once
    assert run(good, "--check") == 0
    for path in (bad, twice):
        before = path.read_text()
        assert run(path) == 2 and run(path, "--check") == 2
        assert path.read_text() == before  # a page without one pair of markers is left alone
    assert "needs one of each" in capsys.readouterr().err
    assert run(tmp_path / "missing.md") == 2 and not (tmp_path / "missing.md").exists()
    assert "no such file" in capsys.readouterr().err
    other = "<!-- BEGIN bb -->\nkeep\n<!-- END bb -->\n"  # a block whose name starts alike
    assert splice_block(other + page, block, "b") == other + once
    with pytest.raises(ConfigError, match="lose its markers"):
        splice_block(page, "no markers\n", "b")

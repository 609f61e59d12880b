"""Write the CLI reference (``docs/cli.md``) from every parser's ``--help``.

Regenerate it with one command::

    python -m tangentlab.cli_reference docs/cli.md        # or: make docs

``python -m tangentlab.cli_reference --check docs/cli.md`` exits 1 when the file is out of date.
Help text is formatted at a fixed width (:data:`WIDTH` columns) so the file does not depend on
the terminal it was generated in.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["WIDTH", "iter_parsers", "command_options", "render_reference", "splice_block",
           "write_generated_page", "main"]

from tangentlab.cli import iter_parsers  # noqa: E402  (re-exported: the reference walks them)

#: The terminal width the help text is formatted for.
WIDTH = 100


@contextmanager
def _fixed_width() -> Iterator[None]:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def command_options(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings (``--quick``, ``-h``, ...) and positional names a parser accepts."""
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            out.extend(action.option_strings)
        elif action.metavar:
            out.append(str(action.metavar))
        elif action.choices:  # argparse shows a positional with choices as {a,b}
            out.append("{" + ",".join(str(c) for c in action.choices) + "}")
        elif action.dest:
            out.append(str(action.dest))
    return out


def render_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The Markdown CLI reference: one section per command, holding its ``--help`` verbatim."""
    from tangentlab.cli import EXIT_CODES

    with _fixed_width():
        pairs = [(prog, p.format_help()) for prog, p in iter_parsers(parser)]
    lines = [
        "# CLI reference",
        "",
        "Generated from each command's `--help` by `python -m tangentlab.cli_reference docs/cli.md`",
        "(also `make docs`); do not edit by hand. A test checks that this file is complete and up to",
        "date.",
        "",
        "## Exit codes",
        "",
        "Every command returns one of these (`tangentlab.cli.EXIT_CODES`):",
        "",
        "| code | meaning |",
        "|---:|---|",
        *[f"| {code} | {meaning} |" for code, meaning in EXIT_CODES],
        "",
        "An internal error's crash log goes to `RUN/logs/` of the run directory being written, else",
        "to `$TANGENTLAB_CRASH_DIR`, else `$XDG_CACHE_HOME/tangentlab/crashes/` (by default",
        "`~/.cache/tangentlab/crashes/`); never to the current folder.",
        "",
        "## Commands",
        "",
    ]
    for prog, _ in pairs:
        anchor = prog.replace(" ", "-")
        lines.append(f"- [`{prog}`](#{anchor})")
    lines.append("")
    for prog, text in pairs:
        lines += [f"## {prog}", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def splice_block(page: str, block: str, name: str) -> str:
    """``page`` with its generated block ``name`` replaced by ``block``.

    The block runs from the line that starts with ``<!-- BEGIN name`` (then a space or ``-->``)
    to the line ``<!-- END name -->``, both included; ``block`` must carry both markers itself,
    so splicing is idempotent. ConfigError unless ``page`` holds each marker exactly once, begin
    before end, and ``block`` begins and ends with them.
    """
    import re

    from tangentlab.errors import ConfigError

    begin = re.compile(rf"<!-- BEGIN {re.escape(name)}( |-->)")
    end = f"<!-- END {name} -->"
    lines = page.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if begin.match(line)]
    ends = [i for i, line in enumerate(lines) if line.rstrip() == end]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ConfigError(f"the page holds {len(begins)} '<!-- BEGIN {name} ...' and "
                          f"{len(ends)} '{end}' lines; it needs one of each, begin first, "
                          "around the generated block")
    if not (begin.match(block) and block.rstrip("\n").endswith("\n" + end)):
        raise ConfigError(f"the generated block must begin with '<!-- BEGIN {name} ...' and end "
                          f"with '{end}' (the page would lose its markers)")
    return "".join(lines[:begins[0]]) + block + "".join(lines[ends[0] + 1:])


def write_generated_page(argv: Sequence[str] | None, *, module: str, default: str,
                         description: str, render: Callable[[], str],
                         block: str | None = None) -> int:
    """``python -m MODULE [PATH] [--check]`` for a docs page generated from code.

    Writes ``render()`` to PATH atomically, or with ``--check`` exits 1 when PATH differs from it.
    With ``block``, ``render()`` is one generated block of a hand-written PATH, and replaces that
    block only (:func:`splice_block`); a PATH without the block's markers exits 2 and is left as
    it was.
    """
    ap = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    ap.add_argument("path", nargs="?", default=default,
                    help=f"output Markdown file (default {default})")
    ap.add_argument("--check", action="store_true", help="exit 1 if PATH differs from the generated text")
    args = ap.parse_args(argv)
    path = Path(args.path)
    current = path.read_text(encoding="utf-8") if path.is_file() else ""
    text = render()
    if block is not None:
        from tangentlab.errors import ConfigError

        try:
            if not path.is_file():
                raise ConfigError("no such file; the block goes into an existing page")
            text = splice_block(current, text, block)
        except ConfigError as exc:
            sys.stderr.write(f"{path}: {exc}\n")
            return 2
    if args.check:
        if current != text:
            sys.stderr.write(f"{path} is out of date; regenerate it with "
                             f"`python -m {module} {path}`\n")
            return 1
        return 0
    from tangentlab.runs import atomic_write_text

    atomic_write_text(path, text)
    print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Write the CLI reference to the path in ``argv`` (``python -m tangentlab.cli_reference PATH``)."""
    return write_generated_page(argv, module="tangentlab.cli_reference", default="docs/cli.md",
                                description=__doc__.splitlines()[0], render=render_reference)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

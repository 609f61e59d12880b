"""The single command-line entry point: ``tangentlab <area> <verb> ...``.

Each area's arguments live in :mod:`tangentlab.commands` (one small module per area, importing
only :mod:`argparse` at module level), so ``tangentlab --help`` never imports torch, sympy or
transformers. Heavy modules load inside the command functions.

Errors: any :class:`~tangentlab.errors.TangentlabError` (and any argument error) is printed as
one line ``tangentlab: error: ...`` on stderr with exit code 2. Commands return their own exit
code otherwise (for example ``theory verify`` returns 1 when a check fails).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from tangentlab import __version__
from tangentlab.errors import TangentlabError

__all__ = ["main", "build_parser", "COMMAND_MODULES"]

#: The command modules, in the order ``--help`` lists them. Each defines
#: ``register(subparsers) -> None`` and sets ``func(args) -> int`` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "tangentlab.commands.theory",
    "tangentlab.commands.synthetic",
    "tangentlab.commands.empirical",
    "tangentlab.commands.report",
    "tangentlab.commands.reproduce",
    "tangentlab.commands.validate",
)


class OneLineErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (all areas registered)."""
    parser = OneLineErrorParser(
        prog="tangentlab",
        description=(
            "Test the geometric account of anisotropy in language Transformers: "
            "theory (sympy derivations), synthetic manifolds with known geometry, and real "
            "Transformer gradients, rendered side by side in one report."
        ),
    )
    parser.add_argument("--version", action="version", version=f"tangentlab {__version__}")
    sub = parser.add_subparsers(dest="area", metavar="<area>", parser_class=OneLineErrorParser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 a check failed, 2 bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what --nproc relaunches
    from tangentlab import distributed

    if distributed.launched():  # one rank of torchrun / --nproc: one error line from rank 0
        return distributed.run_rank(func, args)
    try:
        return int(func(args) or 0)
    except TangentlabError as exc:
        message = " ".join(str(exc).split())
        sys.stderr.write(f"tangentlab: error: {message}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("tangentlab: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

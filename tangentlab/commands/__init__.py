"""Argument definitions for each CLI area (argparse only; heavy imports happen in the handlers)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

__all__ = ["add_common_run_args", "require_subcommand", "writing_run"]


def add_common_run_args(parser: argparse.ArgumentParser) -> None:
    """``--config FILE``, ``--set KEY=VALUE`` (repeatable) and ``--seed N``."""
    parser.add_argument("--config", metavar="FILE", help="TOML file overriding the defaults")
    parser.add_argument(
        "--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
        help="override one config value (repeatable), e.g. --set rank=8",
    )


def require_subcommand(parser: argparse.ArgumentParser):
    """A handler that prints the area's help and returns exit code 2 when no verb is given."""
    def _handler(args: argparse.Namespace) -> int:
        import sys

        parser.print_help(sys.stderr)
        return 2

    return _handler


@contextlib.contextmanager
def writing_run(out, *, kind: str, command: str, existing: str = "replace") -> Iterator[None]:
    """Check ``out`` as an output directory of ``kind`` and hold its run lock meanwhile.

    The output-path check (:func:`tangentlab.runs.check_output_dir`) runs before anything is
    written, then again under the lock (:func:`tangentlab.runs.run_lock`), which also clears
    what a killed earlier attempt left half-built beside ``out``.
    """
    from pathlib import Path

    from tangentlab.runs import check_output_dir, remove_partials, run_lock

    check_output_dir(out, kind=kind, existing=existing)
    with run_lock(out, command=command):
        check_output_dir(out, kind=kind, existing=existing)
        out = Path(out)
        remove_partials(out.parent, name=out.name)
        yield

"""Argument definitions for each CLI area (argparse only; heavy imports happen in the handlers)."""

from __future__ import annotations

import argparse

__all__ = ["add_common_run_args", "require_subcommand"]


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

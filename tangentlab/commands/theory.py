"""CLI area `tangentlab theory` (placeholder: filled in by the theory work)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("theory", help="(not yet available)")
    from tangentlab.commands import require_subcommand

    p.set_defaults(func=require_subcommand(p))

"""CLI area ``tangentlab theory``: list, show and verify the sympy derivations.

- ``tangentlab theory list``
- ``tangentlab theory show NAME [--format markdown|latex]``
- ``tangentlab theory verify [NAME ...] [--json] [--seed N]``: exit 0 only if every check passes,
  1 if any fails, 2 on bad input (unknown name, negative seed).
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``theory`` area (list, show, verify) to the CLI's subparsers."""
    p = sub.add_parser("theory", help="sympy derivations: list, show, verify")
    from tangentlab.commands import require_subcommand

    p.set_defaults(func=require_subcommand(p))
    verbs = p.add_subparsers(dest="verb", metavar="<verb>", parser_class=type(p))
    pl = verbs.add_parser("list", help="list the derivations")
    pl.set_defaults(func=_list)
    ps = verbs.add_parser("show", help="print one derivation (Markdown or LaTeX)")
    ps.add_argument("name")
    ps.add_argument("--format", choices=("markdown", "latex"), default="markdown")
    ps.set_defaults(func=_show)
    pv = verbs.add_parser("verify", help="run the checks (exit 1 if any fails)")
    pv.add_argument("names", nargs="*", metavar="NAME", help="derivations (default: all)")
    pv.add_argument("--json", action="store_true", help="print a JSON report")
    pv.add_argument("--seed", type=int, default=0, help="seed of the numeric checks (default 0)")
    pv.set_defaults(func=_verify)


def _list(args: argparse.Namespace) -> int:
    from tangentlab.theory.derivation import derivation_class, names

    for n in names():
        print(f"{n:24s} {derivation_class(n).title}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from tangentlab.theory import get

    d = get(args.name)
    print(d.to_markdown() if args.format == "markdown" else d.to_latex(), end="")
    return 0


def _verify(args: argparse.Namespace) -> int:
    import json

    from tangentlab.errors import ValidationError
    from tangentlab.theory import get, names

    if args.seed < 0:
        raise ValidationError(f"--seed must be >= 0, got {args.seed}")
    selected = list(args.names) or list(names())
    derivations = [get(n) for n in selected]  # unknown names fail before any work
    reports = [d.verify(seed=args.seed) for d in derivations]
    ok = all(r.passed for r in reports)
    if args.json:
        print(json.dumps({"passed": ok, "seed": args.seed,
                          "derivations": [r.to_dict() for r in reports]}, indent=2))
    else:
        print(f"{'derivation':22s} {'kind':11s} {'result':6s} {'residual':>10s}  check")
        for r in reports:
            for c in r.checks:
                print(f"{r.derivation:22s} {c.kind:11s} {'pass' if c.passed else 'FAIL':6s} "
                      f"{c.residual:10.3g}  {c.name}")
        n = sum(len(r.checks) for r in reports)
        bad = sum(len(r.failures) for r in reports)
        print(f"{n - bad}/{n} checks passed" + ("" if ok else f"; {bad} FAILED"))
    return 0 if ok else 1

"""CLI area ``tangentlab synthetic``: ``list`` and ``run NAME``."""

from __future__ import annotations

import argparse

from tangentlab.commands import add_common_run_args, require_subcommand, writing_run

#: Experiment names, listed here so that ``--help`` needs no heavy import (kept in sync with
#: ``tangentlab.synthetic.experiments.names()`` by a test).
EXPERIMENTS = ("visibility", "gradient-ratio", "amplification", "proxy-recovery", "river-valley",
               "estimator-calibration")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``synthetic`` area (list, run) to the CLI's subparsers."""
    p = sub.add_parser("synthetic", help="manifolds with known geometry: run the five experiments",
                       description="Synthetic experiments checked against the theory.")
    p.set_defaults(func=require_subcommand(p))
    verbs = p.add_subparsers(dest="verb", metavar="<verb>", parser_class=type(p))
    ls = verbs.add_parser("list", help="list the experiments")
    ls.set_defaults(func=_list)
    run = verbs.add_parser("run", help="run one experiment and write its run directory")
    run.add_argument("name", metavar="NAME", help=f"one of: {', '.join(EXPERIMENTS)}")
    run.add_argument("--quick", action="store_true", help="the quick config (seconds)")
    add_common_run_args(run)
    run.add_argument("--seed", type=int, default=None, help="override the config's seed")
    run.add_argument("--out", metavar="DIR", default=None,
                     help="run directory to write (default: runs/synthetic/NAME)")
    run.set_defaults(func=_run)


def _list(args: argparse.Namespace) -> int:
    from tangentlab.synthetic.experiments import get, names

    for name in names():
        print(f"{name:16s} {get(name).description}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tangentlab.config import parse_overrides
    from tangentlab.contract import read_checks, synthetic_stage
    from tangentlab.progress import log
    from tangentlab.synthetic.experiments import get, run_experiment

    name = get(args.name).name  # an unknown name fails before any output check
    out = args.out if args.out is not None else Path("runs") / "synthetic" / name  # '' is refused
    with writing_run(out, kind=synthetic_stage(name), command=f"synthetic run {name}"):
        path = run_experiment(name, out, quick=args.quick, config_path=args.config,
                              overrides=parse_overrides(args.overrides), seed=args.seed)
    checks = read_checks(path)  # a failed agreement check is reported, not an error (exit 0)
    passed = sum(bool(c["passed"]) for c in checks)
    for c in checks:
        if not c["passed"]:
            log(f"check failed: {c['name']} (measured {c['measured']}, predicted "
                f"{c['predicted']}, tolerance {c['tolerance']})")
    print(f"{args.name}: {passed}/{len(checks)} checks passed; wrote {path}")
    return 0

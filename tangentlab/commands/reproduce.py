"""CLI area ``tangentlab reproduce``: theory, synthetic, empirical and the report in one job."""

from __future__ import annotations

import argparse


def _reproduce(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from tangentlab.contract import THEORY, VALIDATE, failed_checks
    from tangentlab.errors import DataError
    from tangentlab.pipeline.reproduce import config_toml, reproduce, resolve_config
    from tangentlab.runs import CHECKS_NAME

    overrides = list(args.overrides)
    if args.device is not None:
        overrides.append(f"device={args.device}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    cfg = resolve_config(quick=args.quick, path=args.config, overrides=overrides)
    if args.print_config:
        sys.stdout.write(config_toml(cfg))
        return 0
    out = args.out
    if args.resume:
        if out is not None:
            from tangentlab.errors import ConfigError

            raise ConfigError("--resume continues runs/latest; do not combine it with --out "
                              "(rerunning with the same --out resumes that directory)")
        latest = Path(args.runs_root) / "latest"
        if not latest.exists():
            from tangentlab.errors import ConfigError

            raise ConfigError(f"--resume found no {latest}; run `tangentlab reproduce` first")
        out = latest.resolve()
    summary = reproduce(cfg, out, runs_root=args.runs_root, jobs=args.jobs)
    rc = 0 if summary.ok else 1
    # the one pass/fail reader (tangentlab.contract): the theory and battery stages' checks.json
    for name, what in ((THEORY, "some theory checks failed (see the report's Theory checks)"),
                       (VALIDATE, "validation battery criteria failed: ")):
        if not (summary.run_dir / name / CHECKS_NAME).is_file():
            continue
        try:
            failed = failed_checks(summary.run_dir / name)
        except DataError as exc:  # say what is wrong with the file, whichever stage wrote it
            sys.stderr.write(f"tangentlab: the {name} stage's {CHECKS_NAME} is unreadable: {exc}\n")
            rc = 1
            continue
        if failed:
            detail = ", ".join(failed) if what.endswith(": ") else ""
            sys.stderr.write(f"tangentlab: {what}{detail}\n")
            rc = 1
    for rec in summary.problems():
        detail = rec.error or rec.reason or ""
        sys.stderr.write(f"tangentlab: stage {rec.name} {rec.status}: {detail}\n")
    print(summary.run_dir / "report.html")
    return rc


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``reproduce`` command to the CLI's subparsers."""
    from tangentlab.commands import add_common_run_args, positive_int

    p = sub.add_parser(
        "reproduce",
        help="run everything (theory, synthetic, training, measurement) and write the report",
        description=(
            "Verify every derivation, run every synthetic experiment, train the encoder and the "
            "decoder, measure both trajectories, and render report.html/report.md, all into one run "
            "directory (default runs/<timestamp>, with runs/latest pointing at it). Rerunning on the "
            "same directory reuses the stages that are done and still valid. Independent stages run at once "
            "in separate processes (--jobs), each with its own log under logs/. Exit 0 when every stage "
            "finished, every theory check passed and every validation criterion held, 1 otherwise, 2 on bad input."
        ),
    )
    p.add_argument("--quick", action="store_true",
                   help="tiny models and quick synthetic settings (a smoke run of a few minutes)")
    p.add_argument("--out", metavar="DIR", help="run directory (default: RUNS_ROOT/<timestamp>)")
    p.add_argument("--resume", action="store_true",
                   help="continue RUNS_ROOT/latest instead of starting a new run directory")
    p.add_argument("--runs-root", metavar="RUNS_ROOT", default="runs",
                   help="where timestamped run directories and the 'latest' link go (default: runs)")
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="auto | cpu | cuda | cuda:N | mps, for training and measurement "
                        "(default: the config's, auto)")
    p.add_argument("--seed", type=int, default=None, help="the seed of every stage (default 0)")
    p.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                   help="stages run at once, each in its own process (default: the usable cores); "
                        "the results do not depend on it")
    add_common_run_args(p)
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config as TOML and exit")
    p.set_defaults(func=_reproduce)

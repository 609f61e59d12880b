"""CLI area ``tangentlab validate``: the validation battery on streams whose truth is known.

The battery checks power, null calibration, interval coverage, the frequency-spread null and the
causal null.
"""

from __future__ import annotations

import argparse

from tangentlab.commands import positive_int


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``validate`` command to the CLI's subparsers."""
    p = sub.add_parser(
        "validate", help="validation battery: the protocol's statistics on known-truth streams",
        description=(
            "Feed the protocol's statistics with synthetic streams whose truth is known and "
            "check power, null calibration (false-positive rate <= 0.06), interval coverage "
            "(93-97% for nominal 95%), the frequency-spread null (mean |rho| <= 0.03) and the "
            "causal null. Exit code 0 when every criterion passes, 1 when one fails, 2 on bad "
            "input."),
    )
    p.add_argument("--quick", action="store_true",
                   help="the quick setting (about a minute on one core) instead of the full one")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="run directory to write (default: runs/validate); an existing "
                        "validation run there is replaced, any other run is refused")
    p.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    p.add_argument("--end-to-end", action="store_true", dest="end_to_end",
                   help="the end-to-end battery: planted-truth trajectories through measure and "
                        "the report's rules (default out: runs/validate-end-to-end)")
    p.add_argument("--setting", choices=("quick", "standard", "full"), default=None,
                   help="with --end-to-end: the named setting (default full; --quick is quick; "
                        "standard is what a default reproduce runs)")
    p.add_argument("--nproc", type=positive_int, default=1, metavar="N",
                   help="with --end-to-end: simulations run in N processes (default 1)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tangentlab.commands import writing_run
    from tangentlab.contract import run_passed
    from tangentlab.progress import log
    from tangentlab.validate.battery import VALIDATE_KIND, BatteryConfig, read_checks, write_battery

    if getattr(args, "end_to_end", False):
        return _run_end_to_end(args)
    from tangentlab.errors import ConfigError

    unused = [flag for flag, given in (("--setting", args.setting is not None),
                                       ("--nproc", args.nproc != 1)) if given]
    if unused:
        verb = "applies" if len(unused) == 1 else "apply"
        raise ConfigError(f"{' and '.join(unused)} {verb} only to the end-to-end battery; add "
                          "--end-to-end, or drop them to run the validation battery")
    cfg = BatteryConfig.quick(args.seed) if args.quick else BatteryConfig.full(args.seed)
    cfg.validate()
    out = args.out if args.out is not None else Path("runs") / "validate"
    # the one output-path check and the run lock: never replaces a run of another kind
    with writing_run(out, kind=VALIDATE_KIND, command="validate"):
        path, _ = write_battery(out, cfg, quick=args.quick)
    checks = read_checks(path)
    for c in checks:
        status = "pass" if c["passed"] else "FAIL"
        measured = "n/a" if c.get("measured") is None else f"{c['measured']:.4g}"
        print(f"{status}  {c['name']}: measured {measured}, target {c['target']} (n={c['n']})")
        if not c["passed"]:
            log(f"check failed: {c['name']} ({c.get('detail', '')})")
    n_ok = sum(bool(c["passed"]) for c in checks)
    print(f"validate: {n_ok}/{len(checks)} criteria passed; wrote {path}")
    return 0 if run_passed(path) else 1


def _run_end_to_end(args: argparse.Namespace) -> int:
    """``validate --end-to-end``: one line per check; exit 0 when every check passed, else 1."""
    from pathlib import Path

    from tangentlab.commands import writing_run
    from tangentlab.progress import log
    from tangentlab.runs import CHECKS_NAME, read_json
    from tangentlab.validate.end_to_end import END_TO_END_KIND, EndToEndConfig, write_end_to_end

    setting = getattr(args, "setting", None)
    if args.quick and setting not in (None, "quick"):
        from tangentlab.errors import ConfigError

        raise ConfigError(f"--quick and --setting {setting} contradict each other; give one")
    name = "quick" if args.quick else setting or "full"
    cfg = EndToEndConfig.preset(name, args.seed)
    out = args.out if args.out is not None else Path("runs") / "validate-end-to-end"
    # the one output-path check and the run lock: never replaces a run of another kind
    with writing_run(out, kind=END_TO_END_KIND, command="validate --end-to-end"):
        path, passed = write_end_to_end(
            Path(out), cfg, quick=name == "quick", nproc=int(args.nproc),
            on_result=lambda r: log(f"end-to-end {r.scenario} #{r.sim}: "
                                    + ", ".join(f"{k} {v}" for k, v in r.statuses.items())))
    checks = read_json(path / CHECKS_NAME, expect=list)
    for c in checks:
        print(f"{'pass' if c['passed'] else 'FAIL'}  {c['name']}: {c['measured']:.3g} "
              f"(target {c['target']}; {c['detail']})")
    n_ok = sum(bool(c["passed"]) for c in checks)
    note = "" if cfg.sims >= 45 else " (point rates only: too few simulations for the bounds)"
    print(f"validate --end-to-end: {n_ok}/{len(checks)} checks passed{note}; wrote {path}")
    return 0 if passed else 1

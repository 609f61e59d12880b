"""CLI area ``tangentlab validate``: the validation battery on streams whose truth is known.

The battery checks power, null calibration, interval coverage and the frequency-spread null (the
causal rows are calibrated end to end). ``--end-to-end`` runs the end-to-end battery on planted-truth trajectories
(``--resume`` continues an interrupted run, ``--shard K/N`` runs one slice of it), and
``tangentlab validate merge DIR... --out OUT`` assembles the shards into one run.
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
            "check power (>= 0.8), null calibration (false-positive rate <= 0.06), interval "
            "coverage (93-97% for nominal 95%) and the frequency-spread null (mean |rho| <= "
            "0.03); each criterion fails only beyond its Monte-Carlo error (a one-sided 1% "
            "binomial or t bound at the band's edge, stated in each check). Exit code 0 when "
            "every criterion passes, 1 when one fails, 2 on bad "
            "input. With --end-to-end: the end-to-end battery on planted-truth trajectories. The "
            "verb is optional: `tangentlab validate merge DIR... --out OUT` assembles end-to-end "
            "shards (--shard K/N)."),
    )
    p.add_argument("--quick", action="store_true",
                   help="the quick setting (about a minute on one core) instead of the full one")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="run directory to write (default: runs/validate); an existing "
                        "validation run there is replaced, any other run is refused (with "
                        "--end-to-end: an existing end-to-end run is refused unless --resume)")
    p.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    p.add_argument("--end-to-end", action="store_true", dest="end_to_end",
                   help="the end-to-end battery: planted-truth trajectories through measure and "
                        "the report's rules (default out: runs/validate-end-to-end)")
    p.add_argument("--setting", choices=("quick", "standard", "full"), default=None,
                   help="with --end-to-end: the named setting (default full; --quick is quick; "
                        "standard is what a default reproduce runs)")
    p.add_argument("--nproc", type=positive_int, default=1, metavar="N",
                   help="with --end-to-end: simulations run in N processes (default 1)")
    p.add_argument("--resume", action="store_true",
                   help="with --end-to-end: continue the run in --out, reusing every simulation "
                        "it recorded (refused if it was written with other settings or at "
                        "another git commit; a new or empty --out starts the run); with no "
                        "setting flag (--like, --setting, --quick, --sims, --mutant, --seed) "
                        "it runs under the config stored in --out, so a twin resumes without "
                        "its RUN")
    p.add_argument("--shard", metavar="K/N", default=None,
                   help="with --end-to-end: run only shard K of N (the simulations whose "
                        "position i in scenario-then-index order has i %% N == K-1) and write "
                        "their records, no checks; assemble the N shards with `tangentlab "
                        "validate merge`")
    p.add_argument("--like", metavar="RUN", default=None,
                   help="with --end-to-end: the planted twin of RUN (a reproduce run or a "
                        "measure directory): every scenario at RUN's checkpoint schedule, "
                        "late cut, units per row, eval windows, bootstrap replicates, controls "
                        "and r/d (tangentlab.validate.twin; not --setting or --quick); RUN "
                        "may also be a twin's end-to-end directory: its stored config")
    p.add_argument("--like-effect", default=None, choices=("stated", "run", "smaller"),
                   dest="like_effect",
                   help="with --like: the power scenario's enrichment curve: the stated sizes "
                        "(default), the magnitudes RUN measured (its smallest last enrichment "
                        "and weakest decline), or those halved (k -> 1 + (k - 1)/2)")
    p.add_argument("--extend", metavar="RUN", default=None,
                   help="with --end-to-end: more simulations for the finished end-to-end run "
                        "RUN, under its own config: the scenarios in which a row got any wrong "
                        "status, from RUN's simulations up to --extend-to, into --out (shards "
                        "and --resume work as for a run); assemble RUN and the extension with "
                        "`tangentlab validate merge RUN OUT --out MERGED`")
    p.add_argument("--extend-to", type=positive_int, default=200, metavar="N", dest="extend_to",
                   help="with --extend: simulations per extended scenario in all (default 200)")
    p.add_argument("--sims", type=positive_int, default=None, metavar="N",
                   help="with --end-to-end: simulations per scenario (default: the setting's; "
                        "50 for a twin)")
    p.add_argument("--mutant", default=None,
                   choices=("combine-first-unit", "late-fixed-only", "narrow-intervals",
                            "causal-variance-only"),
                   help="with --end-to-end: break the verdict path on purpose "
                        "(tangentlab.validate.mutants) and show the battery catches it: the "
                        "last line says whether some check failed (caught, exit 1) or not "
                        "(exit 0: the battery has no teeth against it)")
    p.set_defaults(func=_run)
    _register_verbs(p)


def _register_verbs(p: argparse.ArgumentParser) -> None:
    """The verbs after ``validate``: ``merge``, ``certify``, ``status``, ``frequency-null``."""
    verbs = p.add_subparsers(dest="verb", metavar="<verb>", parser_class=type(p))
    pm = verbs.add_parser(
        "merge", help="assemble end-to-end shards (--shard K/N) into one end-to-end run",
        description=(
            "Merge end-to-end run directories (the shards of one run) into OUT: refused when "
            "they differ in settings (config hash) or git commit, when a simulation is missing "
            "or recorded twice, or when one is unfinished. OUT gets every record and the "
            "summary a one-process run writes (results.csv, checks.json and statuses.csv equal "
            "its byte for byte). Exit code 0 when every check passes, 1 when one fails, 2 on "
            "bad input."))
    pm.add_argument("dirs", nargs="+", metavar="DIR", help="the shard directories")
    pm.add_argument("--out", metavar="OUT", required=True,
                    help="the merged run directory to write (new or empty)")
    pm.set_defaults(func=_merge)
    pc = verbs.add_parser(
        "certify", help="write a certificate (checks, setting, commit, module fingerprints) "
                        "from a finished end-to-end run",
        description=(
            "Write FILE: the end-to-end run's checks, setting, commit and every simulation's "
            "statuses, which rows it validates, and a fingerprint of every module on the "
            "verdict path (tangentlab.claims.fingerprints) at the commit the simulations ran "
            "at, read from git, so a changed module shows the certificate stale. Refused for "
            "an unfinished run, a shard, simulations run at a dirty or unknown commit, or a "
            "commit this clone's git lacks; --out is refused when it is a folder, lies "
            "inside a run directory, or is a file other than an earlier certificate (nothing "
            "is written then). Exit code 0 when written, 2 on bad input."))
    pc.add_argument("run", metavar="RUN", help="a finished end-to-end run directory")
    pc.add_argument("--out", metavar="FILE", required=True, help="the certificate to write")
    pc.set_defaults(func=_certify)
    from tangentlab.commands.validate_status import add_status

    add_status(verbs, parent_flags=_parent_flags)
    from tangentlab.commands.validate_nulls import add_frequency_null

    add_frequency_null(verbs, parent_flags=_parent_flags, print_checks=_print_checks)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tangentlab.commands import writing_run
    from tangentlab.contract import run_passed
    from tangentlab.progress import log
    from tangentlab.validate.battery import VALIDATE_KIND, BatteryConfig, read_checks, write_battery

    if getattr(args, "end_to_end", False):
        return _run_end_to_end(args)
    from tangentlab.errors import ConfigError

    unused = [f for f in _parent_flags(args) if f not in ("--end-to-end", "--quick", "--seed")]
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
    """``validate --end-to-end``: one line per check; exit 0 when every check passed, else 1.

    With ``--shard K/N``: one line saying what was recorded; exit 0 once the shard is complete
    (its simulations are judged by ``validate merge``).
    """
    import dataclasses
    from pathlib import Path

    from tangentlab.errors import ConfigError
    from tangentlab.progress import log
    from tangentlab.validate.end_to_end import EndToEndConfig, Shard, write_end_to_end

    setting = getattr(args, "setting", None)
    if args.quick and setting not in (None, "quick"):
        raise ConfigError(f"--quick and --setting {setting} contradict each other; give one")
    like = getattr(args, "like", None)
    if like is not None and (args.quick or setting is not None):
        raise ConfigError("--like RUN sets every setting from the run; drop --quick/--setting")
    if getattr(args, "like_effect", None) is not None and like is None:
        raise ConfigError("--like-effect applies only to a twin; add --like RUN, or drop it")
    shard = Shard.parse(args.shard) if args.shard is not None else None
    name = "quick" if args.quick else setting or "full"
    extension, quick = None, args.quick
    if getattr(args, "extend", None) is not None:
        cfg, extension, quick = _extension(args, like=like, setting=setting)
        name = "extension"
    elif getattr(args, "extend_to", 200) != 200:
        raise ConfigError("--extend-to applies only with --extend RUN; add --extend, or drop it")
    elif like is not None and (stored := _stored_config(Path(like))) is not None:
        if args.like_effect is not None or args.seed != 0:  # another shard of that very twin
            raise ConfigError(f"--like {like} is an end-to-end run whose config (effect, seed) "
                              "is stored there; drop --like-effect and --seed")
        (cfg, quick), name = stored, "twin"
    elif like is not None:
        from tangentlab.validate.twin import twin_setting

        cfg = twin_setting(Path(like), seed=args.seed, effect=args.like_effect or "stated")
        name = "twin"
    elif args.resume and args.out is not None and not any(
            (setting, args.quick, getattr(args, "sims", None), args.mutant, args.seed)) and (
            stored := _stored_config(Path(args.out))) is not None:
        cfg, quick = stored  # a resume that names no setting runs under DIR's stored config
    else:
        cfg = EndToEndConfig.preset(name, args.seed)
    if getattr(args, "sims", None):
        cfg = dataclasses.replace(cfg, sims=int(args.sims))
    if args.mutant:
        cfg = dataclasses.replace(cfg, mutant=args.mutant)
    out = args.out if args.out is not None else Path("runs") / "validate-end-to-end"
    # write_end_to_end checks --out and holds its run lock itself (so API callers get both too)
    path, passed = write_end_to_end(
        Path(out), cfg, quick=quick, nproc=int(args.nproc), resume=args.resume,
        shard=shard, extension=extension,
        on_result=lambda r: log(f"end-to-end {r.scenario} #{r.sim}: "
                                + ", ".join(f"{k} {v}" for k, v in r.statuses.items())))
    if extension is not None:
        print(f"validate --end-to-end --extend: simulations {extension} recorded"
              f"{'' if passed else ' (some raised: see its manifest)'}; wrote {path}; assemble "
              f"it with its run: `tangentlab validate merge {args.extend} {path} --out MERGED`")
        return 0
    if shard is not None:
        print(f"validate --end-to-end --shard {shard}: every simulation of the shard recorded"
              f"{'' if passed else ' (some raised: see its manifest)'}; wrote {path}; assemble "
              "the shards with `tangentlab validate merge DIR... --out OUT`")
        return 0
    from tangentlab.validate.end_to_end_records import write_enrichment_figure

    write_enrichment_figure(path)
    code = _print_checks(path, note="" if cfg.sims >= 45 else
                         " (point rates only: too few simulations for the bounds)",
                         what="validate --end-to-end", passed=passed)
    if cfg.mutant:
        print(f"mutant {cfg.mutant}: " + ("caught (some check failed)" if code else
                                          "NOT caught: every check passed with the verdict path "
                                          "broken"))
    return code


def _stored_config(path):
    """``(config, quick)`` of the end-to-end run stored in ``path``, or None where none is.

    What ``--resume`` runs under when it names no setting, and what ``--like DIR`` twins when
    DIR is a twin's shard: a twin goes on in a later session without the RUN it was read from.
    """
    from tangentlab.config import config_from_mapping
    from tangentlab.validate.end_to_end import EndToEndConfig
    from tangentlab.validate.end_to_end_records import is_end_to_end_dir, read_settings

    if not is_end_to_end_dir(path):
        return None
    settings = read_settings(path)
    return config_from_mapping(EndToEndConfig, settings["config"]), bool(settings.get("quick"))


def _extension(args: argparse.Namespace, *, like, setting):
    """``--extend RUN``: RUN's config, the :class:`Extension` it asks for, RUN's quick flag.

    The extension runs the scenarios in which a row got a wrong status. ConfigError, before any simulation runs: with the settings --extend takes from RUN (--like,
    --quick, --setting, --sims, --mutant, --seed); for a RUN that is itself merged with an
    extension; when this checkout's commit or RUN's config hash (read back by today's code)
    differs from RUN's, since merge would refuse the extension after it ran; or when no
    scenario of RUN needs more simulations (none wrong, or --extend-to not above its
    simulations).
    """
    from pathlib import Path

    from tangentlab.config import config_from_mapping, config_hash
    from tangentlab.errors import ConfigError
    from tangentlab.runs import git_commit
    from tangentlab.validate.end_to_end import EndToEndConfig
    from tangentlab.validate.end_to_end_config import Extension
    from tangentlab.validate.end_to_end_merge import scenarios_to_extend
    from tangentlab.validate.end_to_end_records import read_settings

    given = [f for f, on in (("--like", like is not None), ("--quick", args.quick),
                             ("--setting", setting is not None), ("--sims", args.sims),
                             ("--mutant", args.mutant), ("--seed", args.seed != 0)) if on]
    if given:
        raise ConfigError(f"--extend RUN runs RUN's own config; drop {' and '.join(given)}")
    run = Path(args.extend)
    names = scenarios_to_extend(run)  # DataError for an unfinished or foreign directory
    settings = read_settings(run)
    if settings.get("extensions"):
        raise ConfigError(f"{str(run)!r} is already merged with extensions "
                          f"({', '.join(settings['extensions'])}); extend the base run instead")
    cfg = config_from_mapping(EndToEndConfig, settings["config"])
    theirs, ours = (settings.get("git") or {}).get("commit"), git_commit().get("commit")
    if theirs != ours or config_hash(cfg) != settings["config_hash"]:
        why = (f"its simulations ran at commit {str(theirs)[:12]}, this checkout is at "
               f"{str(ours)[:12]}" if theirs != ours else
               "its config no longer hashes to its config_hash with today's code")
        raise ConfigError(f"cannot extend {str(run)!r}: {why}; merge would refuse the "
                          "extension, so run it from a checkout (a worktree) of the run's commit")
    if not names or args.extend_to <= cfg.sims:
        raise ConfigError(f"nothing to extend in {str(run)!r}: "
                          + ("no row got a wrong status in any scenario" if not names else
                             f"--extend-to {args.extend_to} is not above its {cfg.sims} "
                             "simulations per scenario"))
    return cfg, Extension(cfg.sims, int(args.extend_to), names), bool(settings.get("quick"))


def _print_checks(path, *, note: str, what: str, passed: bool) -> int:
    """One line per end-to-end check of run ``path``, a total line; the exit code."""
    from tangentlab.runs import CHECKS_NAME, read_json

    checks = read_json(path / CHECKS_NAME, expect=list)
    for c in checks:
        print(f"{'pass' if c['passed'] else 'FAIL'}  {c['name']}: {c['measured']:.3g} "
              f"(target {c['target']}; {c['detail']})")
    n_ok = sum(bool(c["passed"]) for c in checks)
    print(f"{what}: {n_ok}/{len(checks)} checks passed{note}; wrote {path}")
    return 0 if passed else 1


def _parent_flags(args: argparse.Namespace) -> list[str]:
    """The ``validate`` flags given before a verb, none of which a verb takes.

    The battery refuses them too, all but ``--end-to-end``, ``--quick`` and ``--seed``.
    """
    return [flag for flag, on in (("--end-to-end", args.end_to_end), ("--quick", args.quick),
                                  ("--setting", args.setting is not None),
                                  ("--nproc", args.nproc != 1), ("--resume", args.resume),
                                  ("--shard", args.shard is not None),
                                  ("--like", args.like is not None),
                                  ("--like-effect", args.like_effect is not None),
                                  ("--extend", args.extend is not None),
                                  ("--sims", args.sims is not None),
                                  ("--mutant", args.mutant is not None),
                                  ("--seed", args.seed != 0)) if on]


def _certify(args: argparse.Namespace) -> int:
    """``validate certify RUN --out FILE``: one line saying what the certificate holds."""
    from tangentlab.claims.certificates import sims_per_null
    from tangentlab.errors import ConfigError
    from tangentlab.validate.certificate import read_certificate, write_certificate

    given = _parent_flags(args)
    if given:
        raise ConfigError(f"certify reads a finished end-to-end run; drop {' and '.join(given)}")
    path = write_certificate(args.run, args.out)
    cert = read_certificate(path)
    ok = sorted(k for k, v in cert["rows"].items() if v)
    print(f"validate certify: {len(cert['checks'])} checks at commit {cert['commit'][:12]}, "
          f"{sims_per_null(cert)} simulations per null; rows validated: "
          f"{', '.join(ok) or 'none'}; {len(cert['fingerprints'])} modules fingerprinted; "
          f"wrote {path}")
    return 0


def _merge(args: argparse.Namespace) -> int:
    """``validate merge DIR... --out OUT``: the merged run's checks, like ``--end-to-end``."""
    from tangentlab.errors import ConfigError
    from tangentlab.validate.end_to_end_merge import merge_end_to_end

    given = _parent_flags(args)
    if given:
        raise ConfigError(f"merge takes the settings of the directories it merges; drop "
                          f"{' and '.join(given)}")
    path, passed = merge_end_to_end(args.dirs, args.out)
    from tangentlab.runs import read_manifest

    sims = read_manifest(path).get("setting", {}).get("sims", 0)
    note = "" if sims >= 45 else " (point rates only: too few simulations for the bounds)"
    return _print_checks(path, note=note, what=f"validate merge of {len(args.dirs)} directories",
                         passed=passed)

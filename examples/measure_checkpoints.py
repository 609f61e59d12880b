"""Measure a local checkpoint folder with the paper's protocol (``tangentlab.empirical``).

``measure_trajectory`` takes a training run, a folder of checkpoint folders (``step_000012/``,
``step100/``, ... each a Hugging Face model directory, ordered by step), or one model folder. This
example first trains a tiny decoder into a temporary folder (seconds at ``--quick``), then
measures its checkpoint folder, and prints the gradient-energy enrichment at each step::

    python examples/measure_checkpoints.py --quick
    python examples/measure_checkpoints.py --checkpoints PATH/TO/CHECKPOINTS --out runs/mine

Load models from local paths only (set ``HF_HUB_OFFLINE=1``). docs/empirical.md explains every
metric; the same run from the command line is ``tangentlab empirical measure PATH --out DIR``,
and ``tangentlab summary DIR`` prints the same headline table as ``tangentlab.load_results``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

#: Small measurement settings: a few batches, few controls and bootstrap draws.
QUICK = {"n_batches": 4, "batch_size": 8, "sample_rows": 512, "n_boot": 50, "n_controls": 20,
         "causal_checkpoints": 2, "causal_batches": 1, "causal_controls": 3, "rank": 4}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", help="your checkpoint folder (default: train a tiny model)")
    ap.add_argument("--out", help="run directory for the measurements (default: a temp one)")
    ap.add_argument("--quick", action="store_true", help="12 training steps, small settings")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import tangentlab
    from tangentlab.empirical import measure_trajectory, train_model

    with tempfile.TemporaryDirectory() as tmp:
        if args.checkpoints:
            checkpoints = Path(args.checkpoints)
        else:
            steps = {"steps": 12, "n_checkpoints": 4, "max_docs": 6} if args.quick else {}
            run = train_model("decoder", Path(tmp) / "train", preset="tiny", device="cpu",
                              seed=args.seed, overrides={**steps, "measure_every": 0})
            checkpoints = run / "checkpoints"
            print(f"trained a tiny decoder: {sorted(p.name for p in checkpoints.iterdir())}")
        out = Path(args.out) if args.out else Path(tmp) / "measure"
        measured = measure_trajectory(checkpoints, out, device="cpu", seed=args.seed,
                                      overrides=QUICK if args.quick else {"rank": 4})
        # the headline table: one row per (site, step), the fixed proxy in the full space (the
        # long table also holds the refit proxy and the constrained subspace, so filtering it
        # by hand on metric, bucket and proxy alone gives every (step, site) twice)
        table = tangentlab.load_results(measured)
        n_long = len(tangentlab.load_results(measured, long=True))
        print(f"{n_long} measured numbers; gradient-energy enrichment of the tangent proxy "
              "(over matched-rank normal controls, 95% interval):")
        for r in table.sort_values(["site", "step"]).itertuples():
            print(f"  step {int(r.step):4d}  {r.site:22s} {r.enrichment:6.2f} "
                  f"[{r.enrichment_ci_low:.2f}, {r.enrichment_ci_high:.2f}]  "
                  f"p {r.p_value:.3f} (floor {r.p_floor:.3f})")
        print(f"run directory: {measured if args.out else '(temporary; pass --out to keep it)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

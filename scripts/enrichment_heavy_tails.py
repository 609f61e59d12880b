#!/usr/bin/env python3
"""The enrichment row under heavy-tailed batches (issue 33): its wrong "not supported" rate.

    python scripts/enrichment_heavy_tails.py [--sims 400] [--tails 1.75] [--batches 32]
        [--boot 1000] [--seed 0]

A null for the "not supported" side: the truth equals the reference the rule compares with
(``step0`` = the true enrichment, so ``max(1, step0)`` is the truth), and the batches carry a
planted signal whose strength varies by batch with a log-normal weight
(:func:`tangentlab.validate.streams.heavy_tail_batches`; ``--tails 1.75`` gives a per-batch ratio
CV of about 2.7 with signal 4, d = 32, r = 2). Each simulation runs the protocol's interval
(:func:`tangentlab.measure.batch_control_test`, studentized, 20 controls from a pool of 200) and
the report's rule (:func:`tangentlab.claims.rules.enrichment_rule`) twice: as the report calls it
(with the unit's ``ratio_cv`` and the validated limit
:data:`tangentlab.measure.tails.VALIDATED_RATIO_CV`) and as it read before issue 33 (no CV, so the
heavy tails are ignored: the broken variant the first must improve on). Prints, for each, the
share of "not supported" (wrong here) with its Wilson interval, the share of truths above the
interval and the median CV.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    import numpy as np

    from tangentlab.claims.rules import NOT_SUPPORTED, enrichment_rule
    from tangentlab.measure import batch_control_test, batch_energies, normal_controls
    from tangentlab.measure.tails import VALIDATED_RATIO_CV, ratio_cv
    from tangentlab.validate.battery import wilson_interval
    from tangentlab.validate.streams import (
        heavy_tail_batches,
        heavy_tail_second_moment,
        make_gradient_model,
        true_enrichment,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--tails", type=float, default=1.75, help="log-sd of the batch weight")
    ap.add_argument("--signal", type=float, default=4.0)
    ap.add_argument("--batches", type=int, default=32, help="test batches per simulation")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    d, r, n_controls = 32, 2, 20
    gm = make_gradient_model(d, r, signal=0.0, context=0.5, scale_sigma=0.3, spectrum_sigma=0.8,
                             seed=[args.seed, 0])
    _, truth = true_enrichment(gm.Q, heavy_tail_second_moment(gm, args.signal))
    counts = {"as the report calls it": 0, "before issue 33 (CV ignored)": 0}
    above, cvs = 0, []
    for s in range(args.sims):
        bs = heavy_tail_batches(gm, args.batches, 32, signal=args.signal, tail_sigma=args.tails,
                                seed=[args.seed, 1, s], windows_per_batch=4)
        ctrl = normal_controls(gm.Q, 200, seed=int(np.random.default_rng([args.seed, 2, s])
                                                   .integers(2**31)))
        be = batch_energies(gm.Q, ctrl, bs)
        res = batch_control_test(be, n_controls=n_controls, n_boot=args.boot, seed=s,
                                 interval="studentized")
        cv = ratio_cv(be)
        cvs.append(cv)
        above += truth > res.enrichment_ci_high
        args_rule = (res.enrichment, res.enrichment_ci_low, res.enrichment_ci_high,
                     res.p_value, n_controls, truth)
        now = enrichment_rule(*args_rule, ratio_cv=cv, cv_limit=VALIDATED_RATIO_CV)
        old = enrichment_rule(*args_rule)
        counts["as the report calls it"] += now.status == NOT_SUPPORTED
        counts["before issue 33 (CV ignored)"] += old.status == NOT_SUPPORTED
    n = args.sims
    out = {"sims": n, "tail_sigma": args.tails, "signal": args.signal, "batches": args.batches,
           "true_enrichment": round(float(truth), 4), "median_ratio_cv": round(float(np.median(cvs)), 3),
           "mean_ratio_cv": round(float(np.mean(cvs)), 3),
           "share_cv_above_limit": round(float(np.mean(np.array(cvs) > VALIDATED_RATIO_CV)), 3),
           "truth_above_interval": round(above / n, 4)}
    for name, k in counts.items():
        lo, hi = wilson_interval(k, n)
        out[f"wrong_not_supported, {name}"] = f"{k}/{n} = {k / n:.3f} [Wilson {lo:.3f}, {hi:.3f}]"
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

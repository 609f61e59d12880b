"""A toy-manifold experiment (``tangentlab.synthetic``): geometry with known truth.

First by hand: sample a 2-sphere placed in R^10, estimate its tangent plane at one point by local
PCA, compare with the true tangent plane, and watch the curvature become visible (normal over
tangent variance) as the neighbourhood grows. Then the packaged ``visibility`` experiment, which
checks the same effect against the theory's prediction and writes a run directory::

    python examples/toy_manifold.py --quick               # seconds; the run goes to a temp folder
    python examples/toy_manifold.py --out runs/toy-vis    # keep the run directory

``tangentlab report`` reads only reproduce runs, but ``results.csv`` and ``checks.json`` in the
run directory are plain files (see docs/synthetic.md).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from tangentlab.measure import empirical_visibility, local_tangent, principal_angles
from tangentlab.synthetic import Sphere, run_experiment


def by_hand(n: int, seed: int) -> None:
    sphere = Sphere(m=2, radius=1.0, ambient_dim=10, rotation_seed=seed)
    X = sphere.sample(n, seed=seed)  # (n, 10), on the sphere
    p = X[:1]
    true_T = sphere.tangent_basis(p)[0]  # (10, 2)
    print(f"sphere S^2 in R^10, {n} points; true Gauss curvature {sphere.gauss_curvature(p)[0]:.3f}")
    for k in (10, 40, 160):
        est_T = local_tangent(X, p[0], k=k, m=2)  # (10, 2)
        worst = np.degrees(principal_angles(true_T, est_T).max())
        vis = empirical_visibility(X, p[0], k=k, m=2)
        print(f"  k={k:4d} neighbours: tangent error {worst:5.2f} deg, "
              f"visibility (normal/tangent variance) {vis:.4f}")


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer points, the quick experiment config")
    ap.add_argument("--out", help="run directory for the visibility experiment (default: a temp one)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    by_hand(2000 if args.quick else 20000, args.seed)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "visibility"
        run = run_experiment("visibility", out, quick=args.quick, seed=args.seed)
        checks = json.loads((run / "checks.json").read_text())
        print(f"visibility experiment: {sum(c['passed'] for c in checks)}/{len(checks)} "
              "checks against the theory passed")
        for c in checks:
            print(f"  {'pass' if c['passed'] else 'FAIL'}  {c['name']}: measured "
                  f"{_num(c['measured'])}, predicted {_num(c['predicted'])} "
                  f"(tolerance {_num(c['tolerance'])})")
        print(f"run directory: {run if args.out else '(temporary; pass --out to keep it)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Measure your own activations and gradients with the shared core (``tangentlab.measure``).

Give it two arrays of the same shape ``(n_samples, d)`` saved with ``numpy.save``: activations
(the representations at one site) and the gradients of the loss with respect to them (one row
per token). Without arguments it makes a small synthetic pair, with the gradients enriched in the
activations' top directions::

    python examples/measure_your_arrays.py                           # synthetic arrays
    python examples/measure_your_arrays.py --acts A.npy --grads G.npy --rank 8

It fits a rank-r tangent proxy (PCA) on the activations, then asks how much of the gradients'
energy falls in it, against matched-rank normal controls, and prints isotropy measures of both.
"""

from __future__ import annotations

import argparse

import numpy as np

from tangentlab.measure import (
    MomentAccumulator,
    control_test,
    effective_rank,
    isoscore,
    make_proxy,
    mean_cosine,
)


def synthetic_arrays(n: int, d: int, r: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Activations with r strong directions, and gradients that share them: shape (n, d) each."""
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((d, d)))
    scales = np.r_[np.full(r, 6.0), np.ones(d - r)]
    acts = (rng.standard_normal((n, d)) * scales) @ basis.T + 2.0  # an offset: anisotropy
    grad_scales = np.r_[np.full(r, 3.0), np.ones(d - r)]
    grads = (rng.standard_normal((n, d)) * grad_scales) @ basis.T
    return acts, grads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--acts", help="activations, a .npy file of shape (n, d)")
    ap.add_argument("--grads", help="gradients at the same site, a .npy file of shape (n, d)")
    ap.add_argument("--rank", type=int, default=4, help="proxy rank r (2r <= d; default 4)")
    ap.add_argument("--controls", type=int, default=20, help="matched-rank normal controls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smaller synthetic arrays")
    args = ap.parse_args(argv)

    if (args.acts is None) != (args.grads is None):
        ap.error("give both --acts and --grads, or neither")
    if args.acts is not None:
        acts, grads = np.load(args.acts), np.load(args.grads)
    else:
        n, d = (300, 16) if args.quick else (2000, 64)
        acts, grads = synthetic_arrays(n, d, args.rank, args.seed)
    print(f"activations {acts.shape}, gradients {grads.shape}")

    proxy = make_proxy("pca", n_components=args.rank, random_state=args.seed).fit(acts)
    Q = proxy.basis()  # (d, r), orthonormal columns
    acc = MomentAccumulator(acts.shape[1])
    acc.update(grads)  # streams in float64; call update() once per batch on real data
    res = control_test(Q, acc.second_moment(), n_controls=args.controls, seed=args.seed,
                       rows=grads)
    print(f"gradient energy in the rank-{args.rank} proxy: {res.energy:.3f} "
          f"(isotropic baseline r/d = {res.baseline:.3f}, oracle {res.oracle:.3f})")
    print(f"enrichment over matched-rank normal controls: {res.enrichment:.2f} "
          f"[{res.enrichment_ci_low:.2f}, {res.enrichment_ci_high:.2f}], p = {res.p_value:.3f}")
    for name, X in (("activations", acts), ("gradients", grads)):
        print(f"{name:11s}: IsoScore {isoscore(X):.3f}, mean cosine {mean_cosine(X, seed=0):.3f}, "
              f"effective rank {effective_rank(X):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

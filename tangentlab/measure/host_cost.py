"""The per-checkpoint host work of ``measure``, timed on synthetic inputs of a run's shape.

:mod:`tangentlab.measure.cost_model` counts what scales with the tokens (the passes and the
per-row statistics, which run on the device of the activations). A measurement also does work
once per checkpoint and site, on the host, in numpy, whatever the device: the refit proxy (an
eigendecomposition of the sample's covariance), the refit proxy's control pools (batched QR),
the energy tests (a bootstrap over test batches that redraws controls, per proxy and bucket,
with the oracle's eigenvalues), ΔIsoScore* and the representation metrics. At a small model
and a few thousand tokens this part is most of the statistics; on an accelerator it does not
shrink at all. It has no useful FLOP count (LAPACK on small matrices and bootstrap indexing are
far from a GEMM's rate), so :func:`host_seconds` times the same library functions ``measure``
calls, on random inputs of the given shape, on this machine.

What it leaves out: the frequency–spread rows (their cost depends on the eval text's tokens and
documents, not on the shape) and the pools drawn once per measurement (the fixed proxy's and
the full-space ones), which a long trajectory amortizes.

Example::

    >>> from tangentlab.measure.cost_model import StatsShape
    >>> from tangentlab.measure.host_cost import host_seconds
    >>> t = host_seconds(StatsShape(d=32, sites=1, pool=20, full=20, test_batches=4,
    ...                             sample_rows=256), n_boot=50)
    >>> sorted(t) == sorted(HOST_PARTS) + ["total"] and t["total"] > 0
    True
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["HOST_PARTS", "host_seconds"]

#: The parts :func:`host_seconds` times, per checkpoint and site.
HOST_PARTS = ("refit proxy (PCA)", "refit pools (2 spaces)", "energy tests (bootstrap + oracle)",
              "isotropy share", "representation metrics")


def host_seconds(s, *, n_controls: int = 20, n_boot: int = 1000, seed: int = 0,
                 repeats: int = 1) -> dict[str, float]:
    """Seconds of each :data:`HOST_PARTS` for one checkpoint, all ``s.sites`` sites, and the total.

    ``s``: a :class:`~tangentlab.measure.cost_model.StatsShape` (d, rank, pool, full, proxies,
    buckets, test_batches, sample_rows, sites). ``n_controls``, ``n_boot``: as in
    ``MeasureConfig`` (the studentized interval, the default). The fastest of ``repeats`` runs
    of each part is kept. Inputs are random, seeded by ``seed``. numpy's BLAS runs on one thread,
    as inside ``measure``.
    """
    from tangentlab.measure import (
        BatchEnergies,
        PCAProxy,
        batch_control_test,
        effective_rank,
        isoscore_star,
        isoscore_star_after_removal,
        mean_cosine,
        normal_controls,
        oracle_energy,
    )

    rng = np.random.default_rng(seed)
    d, r, B = s.d, s.rank, s.test_batches
    X = rng.standard_normal((s.sample_rows, d)) * np.linspace(3.0, 0.3, d)
    C = X.T @ X / len(X)
    Q = np.linalg.qr(rng.standard_normal((d, r)))[0]
    trace = np.full(B, float(np.trace(C)) * 100)
    be = BatchEnergies(tangent=trace * 0.3 + rng.random(B), controls=trace[:, None] * 0.05
                       + rng.random((B, s.pool)), trace=trace, rows=np.full(B, 100), d=d, r=r,
                       full=trace[:, None] * 0.05 + rng.random((B, s.full)) if s.full else None)
    tests = s.proxies * (s.buckets + 1 + 1)  # per proxy: all + each bucket, and the constrained

    parts = {
        "refit proxy (PCA)": lambda: PCAProxy(n_components=r).fit(X),
        "refit pools (2 spaces)": lambda: [normal_controls(Q, s.pool, seed) for _ in range(2)],
        "energy tests (bootstrap + oracle)": lambda: [
            batch_control_test(be, n_controls=n_controls, n_boot=n_boot, seed=seed,
                               interval="studentized", oracle=oracle_energy(C, r))
            for _ in range(tests)],
        "isotropy share": lambda: [
            (isoscore_star(cov=C), isoscore_star_after_removal(
                C, np.concatenate([Q[None], normal_controls(Q, n_controls, seed)])))
            for _ in range(s.proxies)],
        "representation metrics": lambda: (isoscore_star(cov=C), mean_cosine(X, seed=seed),
                                           effective_rank(cov=C, variant="sigma")),
    }
    from threadpoolctl import threadpool_limits

    out = {}
    with threadpool_limits(limits=1, user_api="blas"):  # as measure runs its numpy statistics
        for name, fn in parts.items():
            best = float("inf")
            for _ in range(max(1, repeats)):
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            out[name] = best * s.sites
    out["total"] = sum(out.values())
    return out

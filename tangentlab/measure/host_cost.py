"""The per-checkpoint host work of ``measure``, timed on synthetic inputs of a run's shape.

:mod:`tangentlab.measure.cost_model` counts what scales with the tokens (the passes and the
per-row statistics, which run on the device of the activations). A measurement also does work
once per checkpoint and site, on the host, in numpy, whatever the device: the refit proxy (an
eigendecomposition of the sample's covariance), the refit proxy's control pools (batched QR),
the energy streams' host side (their pools checked and held for the device), the energy tests
(a bootstrap over test batches that redraws controls, per proxy and bucket, with the oracle's
eigenvalues), ΔIsoScore* and the representation metrics. At a small model
and a few thousand tokens this part is most of the statistics; on an accelerator it does not
shrink at all. It has no useful FLOP count (LAPACK on small matrices and bootstrap indexing are
far from a GEMM's rate), so :func:`host_seconds` times the same library functions ``measure``
calls, on random inputs of the given shape, on this machine.

The frequency–spread rows are timed as three token bootstraps over ``tokens`` token types (the
document jackknife of the corrected row is counted as one of them; its real cost depends on the
eval text's documents). What is drawn once per measurement (the fixed proxy, its pools, the
full-space pools; ``once=True``) a long trajectory amortizes.

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

__all__ = ["HOST_PARTS", "ONCE_PARTS", "host_seconds"]

#: The parts :func:`host_seconds` times, per checkpoint and site.
HOST_PARTS = ("refit proxy (PCA)", "refit pools (2 spaces)", "energy streams (build)",
              "energy tests (bootstrap + oracle)", "isotropy share", "representation metrics",
              "frequency correlations")

#: The parts drawn once per measurement and site (``once=True``): the fixed proxy, its pools,
#: and the full-space pools (one per shape: R^d and the complement of 𝟙).
ONCE_PARTS = ("fixed proxy (PCA)", "fixed pools (2 spaces)", "full-space pools (2 shapes)")


def host_seconds(s, *, n_controls: int = 20, n_boot: int = 1000, seed: int = 0,
                 repeats: int = 1, once: bool = False,
                 only: tuple[str, ...] | None = None) -> dict[str, float]:
    """Seconds of each :data:`HOST_PARTS` for one checkpoint, all ``s.sites`` sites, and the total.

    ``s``: a :class:`~tangentlab.measure.cost_model.StatsShape` (d, rank, pool, full, proxies,
    buckets, test_batches, sample_rows, sites; ``tokens``: the token types of the frequency
    correlations, each bootstrapped over tokens three times). ``once``: also the
    :data:`ONCE_PARTS`, which a one-checkpoint measurement pays in full and a trajectory of n
    checkpoints pays once (n times less per checkpoint). ``n_controls``, ``n_boot``: as in
    ``MeasureConfig`` (the studentized interval, the default). The fastest of ``repeats`` runs
    of each part is kept. Inputs are random, seeded by ``seed``. numpy's BLAS runs on one thread,
    as inside ``measure``. ``only``: time just these parts (names of :data:`HOST_PARTS` or
    :data:`ONCE_PARTS`); the total is then theirs.
    """
    from tangentlab.measure import (
        BatchEnergies,
        EnergyStream,
        PCAProxy,
        batch_control_test,
        correlation_with_ci,
        effective_rank,
        full_space_controls,
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
    # each proxy's plain stream (bucketed, in R^d) and its 1-constrained twin (in d - 1 dims,
    # where complement controls of rank r exist there)
    spaces = [(Q, s.buckets)]
    if 2 * r <= d - 1:
        spaces.append((np.linalg.qr(rng.standard_normal((d - 1, r)))[0], 1))
    streams = [(B_, normal_controls(B_, s.pool, seed),
                full_space_controls(B_, s.full, seed) if s.full else None, L)
               for B_, L in spaces]
    logf = np.log1p(rng.zipf(1.5, size=s.tokens).astype(np.float64))
    spread = rng.random(s.tokens) - 0.1 * logf

    parts = {
        "refit proxy (PCA)": lambda: PCAProxy(n_components=r).fit(X),
        "refit pools (2 spaces)": lambda: [normal_controls(Q, s.pool, seed) for _ in range(2)],
        # the host side of each stream (checks, layout); its bases cross to an accelerator in
        # cost_model.transfer_bytes (measured on an H200: this part was missing, docs/scale.md)
        "energy streams (build)": lambda: [
            EnergyStream(B_, P, full_controls=F, n_groups=L)
            for _ in range(s.proxies) for B_, P, F, L in streams],
        "energy tests (bootstrap + oracle)": lambda: (
            [oracle_energy(C, r) for _ in range(s.buckets + 2)],  # one per bucket, shared
            [batch_control_test(be, n_controls=n_controls, n_boot=n_boot, seed=seed,
                                interval="studentized", oracle=0.5) for _ in range(tests)]),
        "isotropy share": lambda: [
            (isoscore_star(cov=C), isoscore_star_after_removal(
                C, np.concatenate([Q[None], normal_controls(Q, n_controls, seed)])))
            for _ in range(s.proxies)],
        "representation metrics": lambda: (isoscore_star(cov=C), mean_cosine(X, seed=seed),
                                           effective_rank(cov=C, variant="sigma")),
        "frequency correlations": lambda: [
            correlation_with_ci(logf, spread, n_boot=n_boot, seed=seed) for _ in range(3)],
    }
    if once:
        parts["fixed proxy (PCA)"] = parts["refit proxy (PCA)"]
        parts["fixed pools (2 spaces)"] = parts["refit pools (2 spaces)"]
        parts["full-space pools (2 shapes)"] = lambda: [
            full_space_controls(np.eye(dd)[:, :r], s.full, seed) for dd in (d, d - 1)]
    if only is not None:
        unknown = sorted(set(only) - set(parts))
        if unknown:
            from tangentlab.errors import ValidationError

            raise ValidationError(f"host_seconds(only=...) names unknown parts {unknown}; "
                                  f"choose from {sorted(parts)}")
        parts = {k: v for k, v in parts.items() if k in only}
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

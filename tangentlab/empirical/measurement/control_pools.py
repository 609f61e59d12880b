"""The subspaces a checkpoint's energy test projects on: each proxy with its control pools.

Per site and proxy (fixed, refit): Q, its matched-rank complement pool (the enrichment's
controls) and a full-space pool (the p-value's), in R^d and again inside the complement of 𝟙
(the constrained test). What does not change between checkpoints is drawn once per
measurement (:func:`energy_test_subspaces`'s ``cache``).
"""

from __future__ import annotations

import math

__all__ = ["ones_space", "energy_test_subspaces"]


def ones_space(d: int):
    """The complement of 𝟙: ComplementSpace with basis U (d, d − 1)."""
    import numpy as np

    from tangentlab.measure import complement_space

    return complement_space(np.ones((d, 1)) / math.sqrt(d))


def energy_test_subspaces(proxies, cfg, ones, cache: dict | None = None
                      ) -> tuple[dict, dict]:
    """{proxy: (Q, pool, full)} and the 𝟙-constrained {proxy: (Qc, poolc, fullc)} of one site.

    ``cache`` (one dict per measurement) keeps what does not change between checkpoints, as
    read-only arrays: the full-space pools, which depend only on (d, r) and the seed (so every
    site and proxy of one shape shares one), and the fixed proxy's complement pools (the fixed
    proxy is the same at every checkpoint). The refit proxy's pools are drawn anew each time.
    The arrays are the ones an uncached call draws, so the results are the same.
    """
    from tangentlab.measure import full_space_controls, normal_controls, restrict_to_complement

    cache = {} if cache is None else cache

    def kept(key, make):
        if key not in cache:
            arr = make()
            arr.flags.writeable = False
            cache[key] = arr
        return cache[key]

    def pools(Q, label, space):  # complement controls (enrichment), full-space ones (p-value)
        full = kept(("full", *Q.shape), lambda: full_space_controls(Q, cfg.control_pool,
                                                                    cfg.seed))
        if label != "fixed":
            return Q, normal_controls(Q, cfg.control_pool, cfg.seed), full
        key = ("normal", space, Q.shape, Q.tobytes())
        return Q, kept(key, lambda: normal_controls(Q, cfg.control_pool, cfg.seed)), full

    named = {"fixed": proxies.fixed}
    if proxies.refit is not None:
        named["refit"] = proxies.refit
    plain = {k: pools(Q, k, "plain") for k, Q in named.items()}
    constrained = {k: pools(restrict_to_complement(Q, ones), k, "constrained")
                   for k, Q in named.items()}
    return plain, constrained

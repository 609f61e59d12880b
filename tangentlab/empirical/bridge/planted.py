"""Planted truth for the bridge: token clouds with known s, beta, m and ‖II‖² (issue 20, item 3).

:func:`planted_site` builds :class:`~tangentlab.empirical.bridge.site_bridge.SiteArrays` whose truth is
known: V tokens on one quadratic chart (``h = Q [u, ½ uᵀ A u] + offset + noise``, ‖II‖² = 1),
token r's chart coordinates ``u ~ N(0, t_r² I_m)`` with ``t_r = t0 r^beta`` (the pinning law),
training counts ``∝ r^(-s)`` and an eval text drawn from the same Zipf law. The closed forms
then give the truth: ``attenuation(s, beta / s, V)`` and the relative visibility of each bucket.

:func:`prediction_coverage` repeats :func:`~tangentlab.empirical.bridge.site_bridge.site_bridge` on fresh
draws and counts how often each interval covers its truth (predicted and measured, attenuation
and relative visibility per bucket)::

    python -c "from tangentlab.empirical.bridge.planted import prediction_coverage as c; print(c(30))"
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["planted_site", "planted_truth", "prediction_coverage"]


def planted_site(V: int = 20, k: int = 200, m: int = 2, d: int = 10, s: float = 1.1,
                 beta: float = 0.4, t0: float = 0.05, noise: float = 1e-4, seed: int = 0,
                 n_buckets: int = 4):
    """:class:`~tangentlab.empirical.bridge.site_bridge.SiteArrays` with a planted law (module docstring).

    ``k`` occurrences per token, each in its own document; shapes ``H (V k, d)``.
    """
    from tangentlab.empirical.bridge.site_bridge import SiteArrays

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d - m, m, m))
    A = (A + A.transpose(0, 2, 1)) / 2
    A /= np.sqrt(np.sum(A ** 2))
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    offset = 3.0 * Q[:, 0] + 2.0 * Q[:, -1]  # away from the origin: direction-only is not degenerate
    H, tok, doc = [], [], []
    for r in range(1, V + 1):
        u = rng.standard_normal((k, m)) * t0 * r ** beta
        v = 0.5 * np.einsum("ki,aij,kj->ka", u, A, u)
        H.append(np.hstack([u, v]) @ Q.T + offset + rng.standard_normal((k, d)) * noise)
        tok += [r - 1] * k
        doc += list(range(k))
    counts = np.round(1e6 * np.arange(1, V + 1.0) ** -s)
    p = np.arange(1, V + 1.0) ** -s
    stream = rng.choice(V, size=40_000, p=p / p.sum())
    H = np.vstack(H)
    edges = np.quantile(np.log1p(counts), np.linspace(0, 1, n_buckets + 1)[1:-1])
    labels = tuple(f"f{i + 1}" for i in range(n_buckets))
    return SiteArrays(H, np.array(tok), np.array(doc), counts, edges, labels, stream,
                      np.repeat(np.arange(400), 100),
                      H[rng.choice(H.shape[0], min(600, H.shape[0]), replace=False)])


def planted_truth(arrays: Any, s: float, beta: float) -> dict[tuple[str, str], float]:
    """The closed forms' values at the planted (s, beta) for every comparison that needs no ‖II‖²."""
    from tangentlab.empirical.bridge.site_bridge import _theory_pool
    from tangentlab.theory.attenuation import attenuation

    V = int(arrays.counts.size)
    r = np.arange(1, V + 1)
    bucket = np.searchsorted(arrays.edges, np.log1p(arrays.counts), side="right")
    out = {("attenuation_raw", "all"): float(attenuation(s, beta / s, V))}
    allm = np.ones(V, dtype=bool)
    for b, lab in enumerate(arrays.labels):
        num, den = _theory_pool(r, s, beta, V, [bucket == b, allm])
        out[("relative_visibility", lab)] = float(num / den)
    return out


def prediction_coverage(n_rep: int = 30, *, n_boot: int = 100, seed: int = 0,
                        **planted: Any) -> dict[str, dict[str, float]]:
    """Coverage of the predicted and measured intervals of the planted truth, over ``n_rep`` draws.

    Returns ``{quantity: {"predicted": share, "measured": share, "n": n}}``.
    """
    from tangentlab.empirical.bridge.site_bridge import BridgeSettings, site_bridge

    s, beta = planted.get("s", 1.1), planted.get("beta", 0.4)
    hits: dict[str, list[tuple[bool, bool]]] = {}
    for i in range(int(n_rep)):
        a = planted_site(seed=seed + i, **planted)
        truth = planted_truth(a, s, beta)
        rows = {(r["quantity"], r["bucket"]): r for r in site_bridge(
            a, BridgeSettings(n_boot=n_boot, max_tokens=a.counts.size, seed=seed + i,
                              intrinsic_dimension=False))}
        for key, t in truth.items():
            r = rows[key]
            name = key[0] if key[1] == "all" else f"{key[0]} [{key[1]}]"
            hits.setdefault(name, []).append((r["predicted_low"] <= t <= r["predicted_high"],
                                              r["measured_low"] <= t <= r["measured_high"]))
    return {q: {"predicted": float(np.mean([h[0] for h in v])),
                "measured": float(np.mean([h[1] for h in v])), "n": len(v)}
            for q, v in hits.items()}

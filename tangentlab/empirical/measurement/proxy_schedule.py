"""The proxy schedule: which checkpoints fit the fixed proxy, the refit per checkpoint, and drift.

A :class:`ProxySchedule` is planned once from the trajectory's steps. Its fixed proxy is fitted in
a pre-pass (forward passes only) on the fit-window checkpoints' activation samples, before any
checkpoint is measured, so that every checkpoint is then measured in one pass with its subspaces
known. :meth:`ProxySchedule.proxies` gives each checkpoint's (fixed, refit) bases and the drift
between them, as a :class:`CheckpointProxies` record.

**The subspaces a checkpoint's energy test projects on** (:func:`energy_test_subspaces`): per
site and proxy (fixed, refit), Q, its matched-rank complement pool (the enrichment's controls)
and a full-space pool (the p-value's), in R^d and again inside the complement of 𝟙
(:func:`ones_space`; the constrained test). What does not change between checkpoints is drawn
once per measurement (the ``cache``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tangentlab.errors import ConfigError

if TYPE_CHECKING:  # annotations only
    import numpy as np

    from tangentlab.measure import SubspaceDrift

__all__ = ["ProxySchedule", "CheckpointProxies", "step_spans", "weighted_median", "ones_space",
           "energy_test_subspaces"]


def step_spans(steps: Sequence[int], lo: float, hi: float) -> list[float]:
    """The span of training steps each checkpoint stands for inside ``[lo, hi]``.

    Checkpoint i stands for the steps nearer to it than to its neighbours: the interval between
    the midpoints to the previous and next checkpoint (the first runs from ``lo``, the last to
    ``hi``), clipped to ``[lo, hi]``. ``steps`` must be ascending. On a log-spaced schedule this
    gives the early, dense checkpoints little weight and the sparse later ones much.
    """
    s = [float(x) for x in steps]
    if any(b < a for a, b in zip(s, s[1:])):
        raise ConfigError(f"checkpoint steps must be ascending, got {list(steps)}")
    out = []
    for i, x in enumerate(s):
        a = lo if i == 0 else (s[i - 1] + x) / 2
        b = hi if i == len(s) - 1 else (x + s[i + 1]) / 2
        out.append(max(0.0, min(b, hi) - max(a, lo)))
    return out


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The smallest value whose cumulative weight reaches half the total (NaN if no weight)."""
    pairs = sorted((float(v), float(w)) for v, w in zip(values, weights))
    total = sum(w for _, w in pairs)
    if total <= 0:
        return float("nan")
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= total / 2:
            return v
    return pairs[-1][0]


@dataclass(frozen=True)
class CheckpointProxies:
    """The subspaces of one (checkpoint, site): bases (d, r) and drift.

    ``refit`` is None when the schedule does not refit. ``drift`` is the
    :class:`~tangentlab.measure.SubspaceDrift` between fixed and refit, ``drift_previous`` between
    the previous checkpoint's refit and this one (None at the first checkpoint).
    """

    fixed: np.ndarray
    refit: np.ndarray | None = None
    drift: SubspaceDrift | None = None
    drift_previous: SubspaceDrift | None = None


@dataclass(frozen=True)
class ProxySchedule:
    """Fit window, fixed proxy, refit per checkpoint and drift between them.

    Attributes:
        method: proxy extractor name (``pca``, ``seminmf``, ``basis:PATH``, ...) of every site
            without its own; ``rank`` r; ``seed``.
        window_steps: steps of the checkpoints whose activations fit the fixed proxy.
        window_weights: each window checkpoint's weight, the span of steps it stands for.
        fraction: the window is the steps ≤ ``fraction`` × ``max_step``.
        refit: also fit a proxy on each checkpoint's own sample.
        site_methods: ``(site, method)`` pairs: the sites whose proxy is their own (a
            dictionary per site); :meth:`method_for` reads them.
    """

    method: str
    rank: int
    seed: int
    window_steps: tuple[int, ...]
    window_weights: tuple[float, ...]
    fraction: float
    max_step: int
    refit: bool = True
    site_methods: tuple[tuple[str, str], ...] = ()

    @classmethod
    def plan(cls, steps: Sequence[int], *, rank: int, seed: int, fraction: float,
             refit: bool = True, method: str = "pca",
             methods: Mapping[str, str] | None = None) -> ProxySchedule:
        """The schedule of a trajectory with checkpoint ``steps`` (ascending).

        Window: the checkpoints with step ≤ ``fraction`` × last step (at least the first). Each
        window checkpoint is weighted by the span of training steps it stands for inside
        ``[0, fraction × last step]`` (:func:`step_spans`), so that the window means "the first
        X% of training" however the checkpoints are spaced. ``methods``: {site: method} for the
        sites whose proxy is not ``method``.
        """
        steps = [int(s) for s in steps]
        max_step = max(steps)
        cut = fraction * max_step
        window = [s for s in steps if s <= cut] or [steps[0]]
        weights = step_spans(window, 0.0, max(cut, float(window[-1])))
        if sum(weights) <= 0:  # a single checkpoint at the cut: it stands for the whole window
            weights = [1.0] * len(window)
        return cls(method=method, rank=rank, seed=seed, window_steps=tuple(window),
                   window_weights=tuple(weights), fraction=fraction, max_step=max_step,
                   refit=refit, site_methods=tuple(sorted((methods or {}).items())))

    def method_for(self, site: str | None) -> str:
        """The proxy method of ``site`` (its own, else :attr:`method`)."""
        return dict(self.site_methods).get(site, self.method) if site is not None else self.method

    @property
    def effective_step(self) -> float:
        """The weighted median step of the window (where its weight is centred)."""
        return weighted_median(self.window_steps, self.window_weights)

    def allocation(self, n_rows: int) -> dict[int, int]:
        """Rows each window checkpoint gives to the fit: ``n_rows`` split by weight.

        Largest-remainder rounding, so the counts sum to ``n_rows``; {step: count}.
        """
        total = sum(self.window_weights)
        quota = [n_rows * w / total for w in self.window_weights]
        base = [int(math.floor(q)) for q in quota]
        rest = n_rows - sum(base)
        order = sorted(range(len(quota)), key=lambda i: (-(quota[i] - base[i]), i))
        for i in order[:rest]:
            base[i] += 1
        return dict(zip(self.window_steps, base, strict=True))

    def in_window(self, step: int) -> bool:
        """True when ``step`` is one of the fit window's checkpoints."""
        return int(step) in self.window_steps

    def fit(self, X, site: str | None = None) -> Any:
        """Fit ``site``'s proxy on rows ``X`` (n, d); returns the (d, r) basis."""
        from tangentlab.measure import make_proxy

        return make_proxy(self.method_for(site), n_components=self.rank,
                          random_state=self.seed).fit(X).basis()

    def pooled(self, samples: Mapping[int, Any]):
        """The fit rows of the fixed proxy from the window checkpoints' samples {step: (n_s, d)}.

        As many rows as one sample holds, drawn without replacement from each checkpoint in
        proportion to its weight (:meth:`allocation`; seed ``[seed, 17, step]``), so the window
        is sampled evenly in training step. Returns (n, d).
        """
        import numpy as np

        missing = [s for s in self.window_steps if s not in samples]
        if missing:
            raise ConfigError(f"the fixed proxy needs the samples of window steps {missing}")
        n_rows = min(len(samples[s]) for s in self.window_steps)
        parts = []
        for step, k in self.allocation(n_rows).items():
            X = samples[step]
            rng = np.random.default_rng([self.seed, 17, int(step)])
            parts.append(X[np.sort(rng.choice(len(X), size=k, replace=False))])
        return np.concatenate(parts)

    def fit_fixed(self, samples: Mapping[int, Any], site: str | None = None) -> Any:
        """``site``'s fixed proxy (d, r) from the window checkpoints' samples {step: (n_s, d)}."""
        return self.fit(self.pooled(samples), site)

    def proxies(self, fixed, sample, previous_refit=None, site: str | None = None
                ) -> CheckpointProxies:
        """This checkpoint's subspaces: ``fixed`` (d, r), refit on ``sample`` (n_s, d), drift."""
        from tangentlab.measure import subspace_drift

        if not self.refit:
            return CheckpointProxies(fixed=fixed)
        Qr = self.fit(sample, site)
        return CheckpointProxies(
            fixed=fixed, refit=Qr, drift=subspace_drift(fixed, Qr),
            drift_previous=None if previous_refit is None else subspace_drift(previous_refit, Qr))

    def manifest(self) -> dict[str, Any]:
        """What the manifest records about the window."""
        return {"fraction": self.fraction, "max_step": self.max_step,
                "cut_step": self.fraction * self.max_step, "steps": list(self.window_steps),
                "weights": [float(w) for w in self.window_weights],
                "weighting": "span of training steps each checkpoint stands for (nearest "
                             "checkpoint), clipped to [0, cut]; rows drawn in proportion",
                "weighted_median_step": self.effective_step}


# -- the proxies' control pools -----------------------------------------------------------

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

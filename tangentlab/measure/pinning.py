"""Per-token spread t_r and the pinning exponent beta = s·alpha, with a norm null (issue 20, item 2).

The pinning law ``t_r = t0 (f_r / f_1)^(-alpha)`` with Zipf ``f_r ∝ r^(-s)`` gives
``t_r = t0 r^beta``, ``beta = s·alpha``: ``log t_r`` is linear in ``log r`` with slope beta.
:func:`pinning_exponent` measures it:

1. one occurrence per (document, token), chosen at random (:func:`~tangentlab.measure.one_per_window`:
   occurrences in one document share its context and would shrink the spread);
2. the spread of every token with at least k such occurrences on a random subsample of exactly k
   (:func:`~tangentlab.measure.equal_size_spread`: mean distance to the subsample's own centroid;
   equal k makes the count bias the same for every token). For Gaussian chart coordinates of
   scale t in m dimensions this spread is ``c(k, m)·t``, one constant for all tokens;
3. ordinary least squares of ``log spread`` on ``log rank``: the slope is beta.

**Interval**: a percentile bootstrap whose replicates redraw the one-per-document choice and the
k-subsample (new seeds) and resample the tokens (the regression's units) with replacement. It
treats tokens as independent: document effects shared across tokens are not resampled (a
document bootstrap would duplicate occurrences inside one token's k-subsample, which shrinks
exactly the spreads being measured).

**Norm null** (``normalise=True``): the same on direction-only vectors ``h / ‖h‖``. A token's mean
squared norm is the squared norm of its mean plus its variance; where norm rises with frequency,
raw vectors show pinning without any geometry, and direction-only beta is ≈ 0.
:func:`pinning_with_norm_null` returns both.

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.pinning import pinning_exponent
    >>> rng = np.random.default_rng(0)
    >>> tok = np.repeat(np.arange(40), 30); doc = np.tile(np.arange(30), 40)
    >>> t = (tok + 1.0) ** 0.5                                   # planted beta = 0.5
    >>> H = rng.standard_normal((tok.size, 5)) * t[:, None]
    >>> fit = pinning_exponent(H, tok, doc, np.arange(1, 41), k=10, n_boot=100, seed=0)
    >>> bool(fit.ci_low < 0.5 < fit.ci_high)
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ShapeError, ValidationError
from tangentlab.measure._validate import as_points, check_positive_int, to_float64
from tangentlab.measure.bootstrap import percentile_interval
from tangentlab.measure.geometry import equal_size_spread, one_per_window
from tangentlab.typing import ArrayLike, Seed

__all__ = ["PinningFit", "pinning_exponent", "pinning_with_norm_null", "token_ranks"]


@dataclass(frozen=True)
class PinningFit:
    """Result of :func:`pinning_exponent`.

    Attributes:
        beta: the slope of log spread on log rank (``beta = s·alpha``).
        ci_low, ci_high: percentile bootstrap interval at ``confidence``.
        log_t0: the intercept (log spread at rank 1, up to the constant ``c(k, m)``).
        normalised: whether rows were normalised to unit norm (the norm null).
        k: occurrences per token; n_tokens: tokens in the regression.
        confidence: the interval's level.
        tokens, ranks, spreads: per token ``(t,)``: id, rank, equal-size spread.
        replicates: bootstrap replicates of beta ``(n_boot,)``.
    """

    beta: float
    ci_low: float
    ci_high: float
    log_t0: float
    normalised: bool
    k: int
    n_tokens: int
    confidence: float
    tokens: np.ndarray = field(repr=False)
    ranks: np.ndarray = field(repr=False)
    spreads: np.ndarray = field(repr=False)
    replicates: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The scalar fields, for a results row or JSON."""
        return {k: getattr(self, k) for k in ("beta", "ci_low", "ci_high", "log_t0",
                                              "normalised", "k", "n_tokens", "confidence")}


def token_ranks(counts: ArrayLike) -> np.ndarray:
    """1-based frequency ranks ``(V,)`` from counts ``(V,)`` (1 = most frequent; ties by id)."""
    c = to_float64(counts, "counts").ravel()
    order = np.lexsort((np.arange(c.size), -c))
    rank = np.empty(c.size, dtype=np.int64)
    rank[order] = np.arange(1, c.size + 1)
    return rank


def _slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xc = x - x.mean()
    den = float(np.sum(xc * xc))
    b = float(np.sum(xc * (y - y.mean())) / den) if den > 0 else float("nan")
    return b, float(y.mean() - b * x.mean())


def _spreads(X, tok, doc, keep, k, seed):
    idx = one_per_window(tok, doc, seed=seed, keep=keep)
    return equal_size_spread(X[idx], tok[idx], k=k, seed=seed)


class _FastDraw:
    """The same draw as :func:`_spreads`, vectorised for bootstrap replicates.

    One random row per (document, token) pair, then k random pairs per token with at least k:
    both by sorting random priorities within groups (no Python loop over tokens).
    """

    def __init__(self, X, tok, doc, keep):
        rows = np.arange(tok.size) if keep is None else np.flatnonzero(np.asarray(keep))
        self.X, self.tok = X, tok
        self.rows = rows
        _, self.pair = np.unique(doc[rows].astype(np.int64) * (int(tok.max()) + 1)
                                 + tok[rows], return_inverse=True)

    def __call__(self, k, rng):
        rows, pair = self.rows, self.pair
        order = np.argsort(pair + rng.random(rows.size))  # random order within each pair
        first = np.ones(order.size, dtype=bool)
        first[1:] = pair[order][1:] != pair[order][:-1]
        chosen = rows[order[first]]  # one row per (document, token)
        t = self.tok[chosen]
        order = np.argsort(t + rng.random(chosen.size))  # random order within each token
        ts = t[order]
        start = np.r_[0, np.flatnonzero(ts[1:] != ts[:-1]) + 1]
        counts = np.diff(np.r_[start, ts.size])
        okg = counts >= k
        picks = chosen[order][start[okg][:, None] + np.arange(k)]  # (t, k)
        P = self.X[picks]
        spread = np.linalg.norm(P - P.mean(axis=1, keepdims=True), axis=2).mean(axis=1)
        return ts[start[okg]], spread


def pinning_exponent(H: ArrayLike, token_ids: ArrayLike, doc_ids: ArrayLike,
                     token_rank: ArrayLike, *, k: int = 8, normalise: bool = False,
                     n_boot: int = 200, confidence: float = 0.95, seed: Seed = 0,
                     keep: ArrayLike | None = None) -> PinningFit:
    """The pinning exponent beta from spread against rank, with a bootstrap interval.

    Args:
        H: activations, shape ``(n, d)``.
        token_ids: shape ``(n,)`` integer token ids.
        doc_ids: shape ``(n,)`` document (or non-overlapping window) of each row.
        token_rank: shape ``(V,)``: the 1-based frequency rank of each token id (from the
            frequency table of the training data; see :func:`token_ranks`).
        k: occurrences (from distinct documents) per token; tokens with fewer are left out.
        normalise: measure direction-only vectors ``h / ‖h‖`` (the norm null).
        n_boot: bootstrap replicates (>= 20).
        confidence: two-sided level in (0, 1).
        seed: seed of the occurrence choice, the subsample and the bootstrap.
        keep: optional boolean mask ``(n,)`` of usable rows (e.g. not masked MLM positions).

    Returns:
        :class:`PinningFit`. Needs at least 3 tokens with k documents each.
    """
    X = as_points(H, name="H")
    from tangentlab.measure.geometry import _labels

    tok = _labels(token_ids, "token_ids", n=X.shape[0])
    doc = _labels(doc_ids, "doc_ids", n=X.shape[0])
    rank = np.asarray(to_float64(token_rank, "token_rank")).ravel()
    if tok.size and tok.max() >= rank.size:
        raise ShapeError(f"token_rank has {rank.size} entries but token id {int(tok.max())} "
                         "occurs; pass one rank per token id (shape (V,))")
    if np.any(rank < 1):
        raise ValidationError("token_rank must hold 1-based ranks (>= 1)")
    k = check_positive_int(k, "k", minimum=2)
    n_boot = check_positive_int(n_boot, "n_boot", minimum=20)
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    if normalise:
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValidationError("a zero row cannot be normalised; drop it (keep=False)")
        X = X / norms
    ss = np.random.SeedSequence(seed if not isinstance(seed, np.random.Generator)
                                else int(seed.integers(2**63)))
    s_main, s_boot = ss.spawn(2)
    tokens, spread = _spreads(X, tok, doc, keep, k, np.random.default_rng(s_main))
    good = spread > 0
    if good.sum() < 3:
        raise InsufficientSamplesError(
            f"only {int(good.sum())} tokens have k={k} occurrences in distinct documents with a "
            "non-zero spread; a slope needs 3: lower k or pass more documents")
    tokens, spread = tokens[good], spread[good]
    x, y = np.log(rank[tokens]), np.log(spread)
    beta, icpt = _slope(x, y)
    rng = np.random.default_rng(s_boot)
    draw = _FastDraw(X, tok, doc, keep)
    reps = []
    for _ in range(n_boot):
        tb, sb = draw(k, rng)
        ok = sb > 0
        tb, sb = tb[ok], sb[ok]
        j = rng.integers(0, tb.size, size=tb.size)
        b, _ = _slope(np.log(rank[tb[j]]), np.log(sb[j]))
        if np.isfinite(b):
            reps.append(b)
    reps_arr, lo, hi = percentile_interval(
        reps, confidence, minimum=n_boot // 2,
        what="most replicates had one distinct rank; pass tokens of more ranks")
    return PinningFit(beta=beta, ci_low=lo, ci_high=hi, log_t0=icpt,
                      normalised=bool(normalise), k=k, n_tokens=int(tokens.size),
                      confidence=float(confidence), tokens=tokens, ranks=rank[tokens],
                      spreads=spread, replicates=reps_arr)


def pinning_with_norm_null(H: ArrayLike, token_ids: ArrayLike, doc_ids: ArrayLike,
                           token_rank: ArrayLike, **kwargs: Any) -> dict[str, PinningFit]:
    """``{"raw": ..., "direction": ...}``: :func:`pinning_exponent` on raw and normalised rows.

    The same seed for both, so they use the same occurrences. A raw beta well above the
    direction-only one says that the norm, not the geometry, carries the pinning.
    """
    kwargs.pop("normalise", None)
    return {"raw": pinning_exponent(H, token_ids, doc_ids, token_rank, normalise=False, **kwargs),
            "direction": pinning_exponent(H, token_ids, doc_ids, token_rank, normalise=True,
                                          **kwargs)}

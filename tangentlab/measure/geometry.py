"""Frequency geometry without the biases of row order and occurrence count (issue 10, item 4).

A token's spread (mean distance of its occurrences to their own centroid) is biased twice:

- by its occurrence count (a centroid of few points sits closer to them): compare tokens on
  *equal-size* random subsamples of k occurrences (:func:`equal_size_spread`,
  :func:`equal_size_centroids`);
- by window-shared context: a frequent token's first k occurrences in row order often come from
  one context window and share its context, which shrinks their spread and fakes a negative
  frequency-spread correlation. :func:`one_per_window` keeps at most one occurrence per
  (window, token), chosen at random, before subsampling; :func:`one_per_group` is the same
  rule for any group key, e.g. the *document* (rare words are bursty within a document, so
  two occurrences from one document share its topic and context).

Tokens that share documents are not independent, so the correlation of frequency and spread
gets a *document-level* (cluster) interval: :func:`document_jackknife_correlation` drops groups
of documents and recomputes the statistic (a document bootstrap would repeat occurrences inside
a token's picks and pull the replicates towards 0; see its docstring).

Masked or replaced MLM positions should be left out too: pass ``keep=False`` for them.

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.geometry import one_per_window, equal_size_spread
    >>> tok = np.array([0, 0, 1, 0, 1, 1]); win = np.array([0, 0, 0, 1, 1, 1])
    >>> idx = one_per_window(tok, win, seed=0)
    >>> sorted(zip(win[idx].tolist(), tok[idx].tolist()))
    [(0, 0), (0, 1), (1, 0), (1, 1)]
    >>> H = np.arange(12.0).reshape(6, 2)
    >>> tokens, spread = equal_size_spread(H[idx], tok[idx], k=2, seed=0)
    >>> tokens.tolist()
    [0, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ShapeError, ValidationError
from tangentlab.measure._validate import as_points, check_positive_int, to_float64
from tangentlab.typing import ArrayLike, Seed

__all__ = [
    "one_per_group",
    "one_per_window",
    "equal_size_picks",
    "document_jackknife_correlation",
    "first_k_indices",
    "equal_size_spread",
    "equal_size_centroids",
    "correlation_with_ci",
]


def _labels(x: Any, name: str, n: int | None = None) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ShapeError(f"{name} must be one label per row, shape (n,); got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and \
                np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        elif arr.size:
            raise ValidationError(f"{name} must hold integer ids, got dtype {arr.dtype}")
        else:
            arr = arr.astype(np.int64)
    if n is not None and arr.shape[0] != n:
        raise ShapeError(f"{name} has {arr.shape[0]} entries but {n} rows are given")
    return arr.astype(np.int64)


def one_per_group(token_ids: ArrayLike, group_ids: ArrayLike, seed: Seed,
                  keep: ArrayLike | None = None) -> np.ndarray:
    """Row indices keeping at most one occurrence per (group, token), chosen at random.

    The group is any integer key: a context window, a document. Same arguments and result as
    :func:`one_per_window` with ``window_ids`` = ``group_ids``.
    """
    return one_per_window(token_ids, group_ids, seed, keep=keep)


def one_per_window(token_ids: ArrayLike, window_ids: ArrayLike, seed: Seed,
                   keep: ArrayLike | None = None) -> np.ndarray:
    """Row indices keeping at most one occurrence per (window, token), chosen at random.

    Args:
        token_ids: shape ``(n,)`` integer token id of each row.
        window_ids: shape ``(n,)`` integer id of each row's context window (or document, or any
            group: see :func:`one_per_group`).
        seed: seed of the random choice.
        keep: optional boolean mask ``(n,)``; rows with ``False`` (e.g. masked or replaced MLM
            positions) are never chosen.

    Returns:
        int64 indices into the rows, ascending, one per distinct (window, token) pair among the
        kept rows.
    """
    tok = _labels(token_ids, "token_ids")
    win = _labels(window_ids, "window_ids", n=tok.shape[0])
    rows = np.arange(tok.shape[0])
    if keep is not None:
        mask = np.asarray(keep.detach().cpu().numpy() if hasattr(keep, "detach") else keep)
        if mask.shape != tok.shape or mask.dtype != bool:
            raise ShapeError(f"keep must be a boolean mask of shape {tok.shape}; got "
                             f"{mask.dtype} {mask.shape}")
        rows = rows[mask]
    if rows.size == 0:
        return rows.astype(np.int64)
    rng = np.random.default_rng(seed)
    order = rows[rng.permutation(rows.size)]  # random order, then the first of each pair
    pairs = np.stack([win[order], tok[order]], axis=1)
    _, first = np.unique(pairs, axis=0, return_index=True)
    return np.sort(order[first]).astype(np.int64)


def first_k_indices(token_ids: ArrayLike, k: int) -> np.ndarray:
    """The *old, biased* rule, kept for the raw statistic: each token's first k rows in row order.

    Returns ascending int64 indices (tokens with fewer than k rows keep all of theirs). Compare
    with :func:`one_per_window` followed by :func:`equal_size_spread`.
    """
    tok = _labels(token_ids, "token_ids")
    k = check_positive_int(k, "k")
    order = np.argsort(tok, kind="stable")
    sorted_tok = tok[order]
    starts = np.searchsorted(sorted_tok, sorted_tok, side="left")
    rank = np.arange(tok.size) - starts
    return np.sort(order[rank < k]).astype(np.int64)


def _subsamples(H: Any, token_ids: Any, k: int, seed: Any):
    X = as_points(H, name="H")
    tok = _labels(token_ids, "token_ids", n=X.shape[0])
    k = check_positive_int(k, "k")
    uniq, counts = np.unique(tok, return_counts=True)
    tokens = uniq[counts >= k]
    if tokens.size == 0:
        raise InsufficientSamplesError(
            f"no token has k={k} occurrences (most: {int(counts.max()) if counts.size else 0}); "
            "lower k or pass more rows"
        )
    rng = np.random.default_rng(seed)
    order = np.argsort(tok, kind="stable")
    starts = np.searchsorted(tok[order], tokens, side="left")
    cnt = counts[counts >= k]
    picks = np.empty((tokens.size, k), dtype=np.int64)
    for i, (s, c) in enumerate(zip(starts, cnt)):
        picks[i] = order[s + rng.choice(c, size=k, replace=False)]
    return X, tokens, picks


def equal_size_picks(H: ArrayLike, token_ids: ArrayLike, k: int,
                     seed: Seed) -> tuple[np.ndarray, np.ndarray]:
    """The k rows :func:`equal_size_spread` draws for each token (the same draw for one seed).

    Returns ``(tokens (t,), picks (t, k))``: token ids ascending and int64 row indices into
    ``H``/``token_ids`` of each token's k sampled occurrences.
    """
    _X, tokens, picks = _subsamples(H, token_ids, k, seed)
    return tokens, picks


def equal_size_spread(H: ArrayLike, token_ids: ArrayLike, k: int,
                      seed: Seed) -> tuple[np.ndarray, np.ndarray]:
    """Spread of every token with at least k occurrences, on a random subsample of exactly k.

    Args:
        H: activations, shape ``(n, d)``.
        token_ids: shape ``(n,)``.
        k: occurrences per token (>= 2 for a non-zero spread); tokens with fewer are left out.
        seed: seed of the subsample.

    Returns:
        ``(tokens, spread)``: token ids ascending, shape ``(t,)``; spread ``(t,)`` float64, the
        mean Euclidean distance of the k sampled occurrences to their own centroid. Equal k makes
        spreads comparable across frequencies (the count bias is the same for every token).
    """
    X, tokens, picks = _subsamples(H, token_ids, k, seed)
    P = X[picks]  # (t, k, d)
    cen = P.mean(axis=1, keepdims=True)
    return tokens, np.linalg.norm(P - cen, axis=2).mean(axis=1)


def equal_size_centroids(H: ArrayLike, token_ids: ArrayLike, k: int,
                         seed: Seed) -> tuple[np.ndarray, np.ndarray]:
    """Centroids of a random k-subsample of every token with at least k occurrences.

    Returns ``(tokens (t,), centroids (t, d))``: equal-size centroids, so their sampling noise
    (variance / k) is the same for every token, e.g. for a centroid-trajectory statistic.
    """
    X, tokens, picks = _subsamples(H, token_ids, k, seed)
    return tokens, X[picks].mean(axis=1)


def _rank(a: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(a, axis=-1)


def _draw_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """``(n, B)`` float64: how many times each row of ``idx`` (B, m) draws each of n items.

    Items along the first axis, so that the per-item sums and cumulative sums below run over
    contiguous rows of B replicates.
    """
    B = idx.shape[0]
    flat = (idx * B + np.arange(B)[:, None]).ravel()
    return np.bincount(flat, minlength=n * B).reshape(n, B).astype(np.float64)


def _group_counts(C: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Draws of each distinct value of ``a`` per resample, and each item's value group.

    ``C``: (n, B) draw counts (:func:`_draw_counts`); ``a``: (n,). Returns ``(Cg (G, B), g
    (n,))``: ``Cg[j, b]`` = draws in resample b of the j-th smallest distinct value, ``g[t]`` =
    the group of item t.
    """
    _, g = np.unique(a, return_inverse=True)
    G = int(g.max()) + 1
    order = np.argsort(g, kind="stable")
    Cs = C[order]
    if G == a.size:  # no ties: each item is its own group
        return Cs, g
    starts = np.flatnonzero(np.r_[True, np.diff(g[order]) != 0])
    return np.add.reduceat(Cs, starts, axis=0), g


def _replicate_correlations(x: np.ndarray, y: np.ndarray,
                            idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pearson and Spearman correlation of every resample ``x[idx[b]], y[idx[b]]``: ``(B,)`` each.

    Computed from how many times each resample draws each pair, without gathering the (B, m)
    resampled values:

    - Pearson: the draw-weighted first and second moments of x and y, centred at their full-sample
      means, by one ``(5, n) @ (n, B)`` product (the replicate's own mean differs from the
      full-sample one by O(std / sqrt(m)), so the centring loses nothing).
    - Spearman: a value drawn c times after c_< draws of smaller values has the average rank
      c_< + (c + 1) / 2 (ties, in the sample and from repeated draws, get average ranks, as
      ``scipy.stats.rankdata``). Twice the ranks' deviations from (m + 1) / 2, and the sums of
      their products, are integers, exact in float64, and the factors 2 cancel exactly, so
      each Spearman replicate is the same number the ranks of the gathered resample give.

    A resample that draws one distinct value of x or of y has no correlation: NaN, as the
    gathered route gives.
    """
    n = x.size
    m = idx.shape[1]
    C = _draw_counts(idx, n)
    Cx, gx = _group_counts(C, x)
    Cy, gy = _group_counts(C, y)
    ok = ((Cx > 0).sum(0) > 1) & ((Cy > 0).sum(0) > 1)
    x0, y0 = x - x.mean(), y - y.mean()
    S = np.stack([x0, y0, x0 * x0, y0 * y0, x0 * y0]) @ C / m  # (5, B)
    sxx = S[2] - S[0] ** 2
    syy = S[3] - S[1] ** 2
    sxy = S[4] - S[0] * S[1]

    def twice_rank_deviation(Cg):  # (G, B): 2 (average rank - (m + 1) / 2), integers
        dev = np.cumsum(Cg, axis=0)
        dev *= 2
        dev -= Cg
        dev -= m  # 2 c_< + c - m = 2 (c_< + (c + 1) / 2 - (m + 1) / 2)
        return dev

    def weighted_square_sum(Cg, dev):
        sq = dev * dev
        sq *= Cg
        return sq.sum(0)

    dev_x, dev_y = twice_rank_deviation(Cx), twice_rank_deviation(Cy)
    rxx, ryy = weighted_square_sum(Cx, dev_x), weighted_square_sum(Cy, dev_y)
    prod = dev_x[gx]  # (n, B), each item's value in each replicate
    prod *= dev_y[gy]
    prod *= C
    rxy = prod.sum(0)  # the factors 2 cancel in the ratio below, exactly (powers of 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        pearson = np.where(ok & (sxx > 0) & (syy > 0), sxy / np.sqrt(sxx * syy), np.nan)
        spearman = np.where(ok, rxy / np.sqrt(rxx * ryy), np.nan)
    return pearson, spearman


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (xc * yc).sum(-1) / den, np.nan)


def correlation_with_ci(x: ArrayLike, y: ArrayLike, *, n_boot: int = 1000, confidence: float = 0.95,
                        seed: Seed = 0) -> dict[str, tuple[float, float, float]]:
    """Pearson and Spearman correlation with percentile bootstrap intervals over pairs (tokens).

    Args:
        x: first variable, shape ``(n,)`` (e.g. log-frequency per token), n >= 3.
        y: second variable, shape ``(n,)``, paired with x row by row (e.g. spread per token).
        n_boot: bootstrap replicates (each resamples the n pairs with replacement).
        confidence: two-sided level in (0, 1).
        seed: seed of the resampling.

    Returns:
        ``{"pearson": (value, low, high), "spearman": (value, low, high)}``. Replicates with a
        constant resample (undefined correlation) are left out of the percentiles; if fewer than
        2 remain the interval is NaN.
    """
    xa = to_float64(x, "x").ravel()
    ya = to_float64(y, "y").ravel()
    if xa.shape != ya.shape:
        raise ShapeError(f"x and y must have the same length, got {xa.size} and {ya.size}")
    if xa.size < 3:
        raise InsufficientSamplesError(f"a correlation needs at least 3 pairs, got {xa.size}")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        from tangentlab.errors import NonFiniteError

        raise NonFiniteError("x or y holds NaN or Inf; drop those tokens first")
    n_boot = check_positive_int(n_boot, "n_boot", minimum=2)
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, xa.size, size=(n_boot, xa.size))
    a = (1 - confidence) / 2
    out = {}
    replicates = dict(zip(("pearson", "spearman"), _replicate_correlations(xa, ya, idx)))
    for name, (xv, yv) in (("pearson", (xa, ya)), ("spearman", (_rank(xa), _rank(ya)))):
        val = float(_pearson_rows(xv, yv))
        reps = replicates[name]
        reps = reps[np.isfinite(reps)]
        if reps.size >= 2:
            lo, hi = np.quantile(reps, [a, 1 - a])
        else:
            lo = hi = float("nan")
        out[name] = (val, float(lo), float(hi))
    return out


def _masked_pearson(x: np.ndarray, y: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row of (B, t) ``x``, ``y`` over the entries where ``m``."""
    n = m.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = np.where(m, x, 0).sum(axis=1) / n
        my = np.where(m, y, 0).sum(axis=1) / n
        xc = np.where(m, x - mx[:, None], 0)
        yc = np.where(m, y - my[:, None], 0)
        den = np.sqrt((xc * xc).sum(1) * (yc * yc).sum(1))
        return np.where((den > 0) & (n >= 3), (xc * yc).sum(1) / den, np.nan)


def document_jackknife_correlation(H: ArrayLike, picks: ArrayLike, x: ArrayLike,
                                   doc_ids: ArrayLike, *, groups: int = 20,
                                   confidence: float = 0.95, seed: Seed = 0) -> dict[str, Any]:
    """Pearson and Spearman correlation of ``x`` with the equal-size spread, a document jackknife.

    Each token's spread is the mean distance of its k picked occurrences (one per document) to
    their centroid, as :func:`equal_size_spread`. The documents are split at random into J =
    min(``groups``, documents) groups of near-equal size; replicate j drops group j's documents
    and recomputes every token's spread on its remaining picks (n of k, rescaled by
    √((k−1)/k ÷ (n−1)/n), the ratio of E‖h − c‖ at k and n points, so that a token that lost a
    pick is not read as a pinned one; tokens left with fewer than 2 picks drop out of that
    replicate). Both correlations are recomputed and Fisher-transformed; the interval is
    tanh(atanh(ρ̂) ± t_{J−1} · se), se² = (J−1)/J · Σ (z_j − z̄)² (the delete-a-group
    jackknife). Tokens that share documents move together between replicates, as they do
    between independent samples of documents, so the interval is a cluster interval.

    Why not a document bootstrap: a resample draws a token's documents with repetition, and a
    centroid of repeated points sits closer to them, so every replicate's spreads carry
    duplication noise that is unrelated to frequency. The replicate correlations are pulled
    towards 0 and a percentile interval is shifted there: on clustered synthetic tokens whose
    spread falls with frequency (mean ρ̂ −0.84) its coverage was 0.47, and on planted
    trajectories it read ρ̂ = −0.35 with the interval [−0.36, +0.03]. At the null it still
    covered (the shift points at the truth), which is why the null battery did not see it.

    Args:
        H: activations, shape ``(n, d)``.
        picks: shape ``(t, k)`` row indices of each token's occurrences (:func:`equal_size_picks`),
            t >= 3, k >= 2.
        x: shape ``(t,)``, the variable paired with each token (e.g. log-frequency).
        doc_ids: shape ``(n,)`` integer document id of each row.
        groups: the most jackknife groups (>= 2).
        confidence: two-sided level in (0, 1).
        seed: seed of the split of documents into groups.

    Returns:
        ``{"pearson": (value, low, high), "spearman": (value, low, high), "spread": (t,)
        float64, "n_documents": distinct documents among the picks, "n_groups": J}``; an
        interval is NaN with fewer than 2 documents, or when a replicate leaves fewer than 3
        tokens or a constant variable.
    """
    from scipy.stats import rankdata
    from scipy.stats import t as student_t

    X = as_points(H, name="H")
    P = _labels(np.asarray(picks).reshape(-1), "picks").reshape(np.shape(picks))
    if P.ndim != 2 or P.shape[1] < 2:
        raise ShapeError(f"picks must be (t, k) row indices with k >= 2; got shape {P.shape}")
    if P.size and (P.min() < 0 or P.max() >= X.shape[0]):
        raise ValidationError(f"picks must index the {X.shape[0]} rows of H")
    xa = to_float64(x, "x").ravel()
    if xa.shape[0] != P.shape[0]:
        raise ShapeError(f"x has {xa.shape[0]} entries but picks has {P.shape[0]} tokens")
    if P.shape[0] < 3:
        raise InsufficientSamplesError(f"a correlation needs at least 3 tokens, got {P.shape[0]}")
    docs = _labels(doc_ids, "doc_ids", n=X.shape[0])
    groups = check_positive_int(groups, "groups", minimum=2)
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    k = P.shape[1]
    pts = X[P]  # (t, k, d)
    ctr = pts - pts.mean(axis=1, keepdims=True)  # shift-free: distances do not change
    spread = np.linalg.norm(ctr, axis=2).mean(axis=1)
    gram = np.einsum("tid,tjd->tij", ctr, ctr)  # (t, k, k)
    sq = np.einsum("tii->ti", gram)  # (t, k) squared norms
    uniq, dk = np.unique(docs[P], return_inverse=True)
    dk = dk.reshape(P.shape)
    G = uniq.size
    J = min(groups, G)
    out: dict[str, Any] = {"spread": spread, "n_documents": int(G), "n_groups": int(J)}
    values = {"pearson": float(_pearson_rows(xa, spread)),
              "spearman": float(_pearson_rows(_rank(xa), _rank(spread)))}
    if J < 2:
        for name, val in values.items():
            out[name] = (val, float("nan"), float("nan"))
        return out
    group = np.empty(G, dtype=np.int64)
    group[np.random.default_rng(seed).permutation(G)] = np.arange(G) % J
    w = (group[dk][None] != np.arange(J)[:, None, None]).astype(np.float64)  # (J, t, k) kept
    n = w.sum(axis=2)
    m = n >= 2
    tot = np.where(m, n, 1.0)
    hc = np.einsum("btj,tij->bti", w, gram) / tot[..., None]  # h_i · c
    cc = np.einsum("bti,bti->bt", w, hc) / tot  # ‖c‖²
    dist = np.sqrt(np.maximum(sq[None] - 2 * hc + cc[..., None], 0.0))
    scale = np.sqrt(((k - 1) / k) / np.where(m, (n - 1) / tot, 1.0))
    s = np.where(m, (w * dist).sum(axis=2) / tot * scale, np.nan)
    xb = np.broadcast_to(xa, s.shape)
    reps = {"pearson": _masked_pearson(xb, s, m),
            "spearman": _masked_pearson(rankdata(np.where(m, xb, np.nan), axis=1,
                                                 nan_policy="omit"),
                                        rankdata(s, axis=1, nan_policy="omit"), m)}
    q = float(student_t.ppf(0.5 + confidence / 2, J - 1))
    for name, val in values.items():
        r = reps[name]
        if not (np.all(np.isfinite(r)) and np.isfinite(val)) or abs(val) >= 1:
            out[name] = (val, float("nan"), float("nan"))
            continue
        z = np.arctanh(np.clip(r, -1 + 1e-12, 1 - 1e-12))
        se = float(np.sqrt((J - 1) / J * np.sum((z - z.mean()) ** 2)))
        z0 = float(np.arctanh(val))
        out[name] = (val, float(np.tanh(z0 - q * se)), float(np.tanh(z0 + q * se)))
    return out

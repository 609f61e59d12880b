"""The Zipf exponent s of a token stream, with a bootstrap interval and a figure (issue 20, item 1).

The closed forms take ``f_r ∝ r^(-s)`` over ranks r = 1..V. :func:`fit_zipf` estimates s two ways:

- ``method="rank-mle"`` (default): a discrete maximum-likelihood fit over a rank range, with the
  ranks and the fit taken from *independent halves* of the data (Piantadosi 2014): ranking and
  counting on the same tokens makes the observed rank-frequency curve a sorted sample, which
  bends it (rare ranks look too frequent). The units (documents when ``doc_ids`` is given, else
  tokens) are split at random into halves A and B; ranks come from A's counts; the likelihood
  ``P(r) = r^(-s) / sum_{q=r_min}^{r_max} q^(-s)`` is maximised on B's tokens whose A-rank lies
  in ``[r_min, r_max]``.

  **Rank-range rule**: ``r_min`` is given (default 1); ``r_max`` is the last rank whose A-count is
  at least ``min_count`` (default 100): below that, ranking noise biases the slope (tokens just
  above the cut-off were lucky in A, so they are rarer in B).
- ``method="csn"``: the Clauset–Shalizi–Newman discrete power-law fit of the *counts* (the
  ``powerlaw`` package, ``pip install 'tangentlab[zipf]'``): the count distribution
  ``P(c) ∝ c^(-gamma)`` for ``c >= c_min``, ``c_min`` chosen by minimising the Kolmogorov–Smirnov
  distance; then ``s = 1 / (gamma - 1)``. The rank range is the ranks whose count is ``>= c_min``.
  This relation holds for an untruncated Zipf law; with few types the rank MLE is less biased (see
  ``docs/bridge.md``).

Interval: a percentile bootstrap over units (documents, since rare words are bursty within one
document; tokens when no documents are given). For ``rank-mle`` each replicate resamples the units
of A and of B separately (the halves stay independent). Every replicate refits, rule included.

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.zipf import fit_zipf
    >>> rng = np.random.default_rng(0)
    >>> p = np.arange(1, 501.0) ** -1.1; p /= p.sum()
    >>> fit = fit_zipf(rng.choice(500, size=50_000, p=p), n_boot=100, seed=1)
    >>> bool(fit.ci_low < 1.1 < fit.ci_high)
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ValidationError
from tangentlab.measure._validate import check_positive_int
from tangentlab.measure.bootstrap import percentile_interval
from tangentlab.typing import ArrayLike, Seed

__all__ = ["ZIPF_METHODS", "ZipfFit", "fit_zipf", "zipf_mle", "plot_zipf_fit"]

#: The estimators of :func:`fit_zipf`.
ZIPF_METHODS = ("rank-mle", "csn")
_S_BOUNDS = (1e-3, 8.0)


@dataclass(frozen=True)
class ZipfFit:
    """Result of :func:`fit_zipf`.

    Attributes:
        s: the Zipf exponent.
        ci_low, ci_high: percentile bootstrap interval at ``confidence``.
        r_min, r_max: the rank range of the fit (1-based, inclusive).
        method: ``"rank-mle"`` or ``"csn"``.
        rule: the rank-range rule in words, with its numbers.
        n_tokens, n_types, n_units: tokens, distinct types and resampling units (documents or
            tokens).
        confidence: the interval's level.
        replicates: the bootstrap replicates of s, shape ``(n_boot,)`` (NaN-free).
        ranks, counts: the rank-frequency curve for the figure: ranks ``(V,)`` from the ranking
            half and the fitting half's counts ``(V,)`` (``csn``: ranks and counts of all data).
        n_fit: tokens inside the rank range in the fitting half (the likelihood's sample size).
    """

    s: float
    ci_low: float
    ci_high: float
    r_min: int
    r_max: int
    method: str
    rule: str
    n_tokens: int
    n_types: int
    n_units: int
    confidence: float
    replicates: np.ndarray = field(repr=False)
    ranks: np.ndarray = field(repr=False)
    counts: np.ndarray = field(repr=False)
    n_fit: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The scalar fields (no arrays), for a results row or JSON."""
        return {k: getattr(self, k) for k in (
            "s", "ci_low", "ci_high", "r_min", "r_max", "method", "rule", "n_tokens",
            "n_types", "n_units", "confidence", "n_fit")}


def zipf_mle(ranks: ArrayLike, counts: ArrayLike, r_min: int, r_max: int) -> float:
    """Discrete MLE of s for counts ``(k,)`` at 1-based ranks ``(k,)``, truncated to [r_min, r_max].

    Maximises ``sum_r c_r log(r^(-s) / sum_{q=r_min}^{r_max} q^(-s))``: the score equation
    ``mean_c(log r) = E_s[log r]`` is solved by bisection (its right side falls with s).
    """
    r = np.asarray(ranks, dtype=np.int64).ravel()
    c = np.asarray(counts, dtype=np.float64).ravel()
    sel = (r >= r_min) & (r <= r_max) & (c > 0)
    if r_max <= r_min or sel.sum() < 2:
        raise InsufficientSamplesError(
            f"a Zipf fit needs at least 2 occupied ranks in [{r_min}, {r_max}]; got "
            f"{int(sel.sum())}: pass more tokens or widen the rank range")
    target = float(np.sum(c[sel] * np.log(r[sel])) / c[sel].sum())
    q = np.log(np.arange(r_min, r_max + 1, dtype=np.float64))

    def mean_log(s: float) -> float:
        w = np.exp(-s * (q - q[0]))
        return float(np.sum(w * q) / w.sum())

    lo, hi = _S_BOUNDS
    if target >= mean_log(lo):
        return lo
    if target <= mean_log(hi):
        return hi
    for _ in range(60):  # bisection to ~1e-18 relative of the bracket
        mid = 0.5 * (lo + hi)
        if mean_log(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _unit_counts(tok: np.ndarray, units: np.ndarray | None, n_types: int):
    """Per-unit count matrix (sparse, (U, V)) or None when every token is its own unit."""
    if units is None:
        return None
    from scipy.sparse import coo_matrix

    _, u = np.unique(units, return_inverse=True)
    return coo_matrix((np.ones(tok.size), (u, tok)), shape=(int(u.max()) + 1, n_types)).tocsr()


def _resample(counts: np.ndarray, mat, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap counts ``(V,)`` of the units ``idx`` (rows of ``mat``; tokens if ``mat`` is None)."""
    if mat is None:
        n = int(counts.sum())
        return rng.multinomial(n, counts / n).astype(np.float64) if n else counts.copy()
    w = np.bincount(rng.choice(idx, size=idx.size, replace=True), minlength=mat.shape[0])
    return np.asarray(mat.T @ w, dtype=np.float64).ravel()


def _rank_fit(cA: np.ndarray, cB: np.ndarray, r_min: int, min_count: int):
    order = np.lexsort((np.arange(cA.size), -cA))  # by A-count descending, ties by id
    rank = np.empty(cA.size, dtype=np.int64)
    rank[order] = np.arange(1, cA.size + 1)
    r_max = int(np.sum(cA >= min_count))
    if r_max < r_min + 2:
        raise InsufficientSamplesError(
            f"only {r_max} types have at least min_count={min_count} tokens in the ranking half; "
            f"a rank range from r_min={r_min} needs 3: pass more tokens or lower min_count")
    return zipf_mle(rank, cB, r_min, r_max), rank, r_max


def _csn_fit(counts: np.ndarray):
    try:
        import powerlaw
    except ImportError:
        from tangentlab.measure.spectrum import OptionalDependencyError

        raise OptionalDependencyError("fit_zipf(method='csn') needs the powerlaw package: pip "
                                      "install 'tangentlab[zipf]' (powerlaw==2.0.0)") from None
    import warnings

    c = counts[counts > 0]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        f = powerlaw.Fit(c, discrete=True, verbose=False)
    gamma, cmin = float(f.power_law.alpha), float(f.power_law.xmin)
    return 1.0 / (gamma - 1.0) if gamma > 1 else float("nan"), cmin


def fit_zipf(token_ids: ArrayLike, doc_ids: ArrayLike | None = None, *, method: str = "rank-mle",
             r_min: int = 1, min_count: int = 100, n_boot: int = 200, confidence: float = 0.95,
             seed: Seed = 0) -> ZipfFit:
    """Zipf exponent s of a token stream with a bootstrap interval over documents.

    Args:
        token_ids: shape ``(n,)`` non-negative integer token ids.
        doc_ids: optional ``(n,)`` document of each token: the resampling (and splitting) unit.
            ``None``: tokens are the units (no burstiness in the interval: say so).
        method: ``"rank-mle"`` (split-half discrete MLE over ranks) or ``"csn"`` (``powerlaw``).
        r_min: first rank of the fit (``rank-mle``).
        min_count: the rank-range rule of ``rank-mle``: ranks whose ranking-half count is at
            least this.
        n_boot: bootstrap replicates (>= 20).
        confidence: two-sided level in (0, 1).
        seed: seed of the split and the bootstrap.

    Returns:
        :class:`ZipfFit`.
    """
    if method not in ZIPF_METHODS:
        raise ValidationError(f"method must be one of {ZIPF_METHODS}, got {method!r}")
    from tangentlab.measure.geometry import _labels  # shared label validation

    tok = _labels(token_ids, "token_ids")
    if tok.size < 10 or tok.min() < 0:
        raise InsufficientSamplesError(f"fit_zipf needs at least 10 non-negative token ids; got "
                                       f"{tok.size} (min {tok.min() if tok.size else None})")
    units = None if doc_ids is None else _labels(doc_ids, "doc_ids", n=tok.size)
    r_min = check_positive_int(r_min, "r_min")
    min_count = check_positive_int(min_count, "min_count")
    n_boot = check_positive_int(n_boot, "n_boot", minimum=20)
    if not 0 < confidence < 1:
        raise ValidationError(f"confidence must lie in (0, 1), got {confidence!r}")
    rng = np.random.default_rng(seed)
    V = int(tok.max()) + 1
    mat = _unit_counts(tok, units, V)
    total = np.bincount(tok, minlength=V).astype(np.float64)
    n_units = tok.size if mat is None else mat.shape[0]
    reps = []
    if method == "rank-mle":
        if mat is None:
            cA = rng.binomial(total.astype(np.int64), 0.5).astype(np.float64)
            cB = total - cA
            idxA = idxB = None
        else:
            perm = rng.permutation(mat.shape[0])
            idxA, idxB = np.sort(perm[: perm.size // 2]), np.sort(perm[perm.size // 2:])
            cA = np.asarray(mat[idxA].sum(axis=0), dtype=np.float64).ravel()
            cB = np.asarray(mat[idxB].sum(axis=0), dtype=np.float64).ravel()
        s, rank, r_max = _rank_fit(cA, cB, r_min, min_count)
        for _ in range(n_boot):
            bA, bB = _resample(cA, mat, idxA, rng), _resample(cB, mat, idxB, rng)
            try:
                reps.append(_rank_fit(bA, bB, r_min, min_count)[0])
            except InsufficientSamplesError:
                continue
        order = np.argsort(rank)
        ranks, counts = rank[order], cB[order]
        n_fit = int(cB[(rank >= r_min) & (rank <= r_max)].sum())
        rule = (f"ranks {r_min}..{r_max}: r_max = last rank with >= {min_count} tokens in the "
                f"ranking half ({'documents' if mat is not None else 'tokens'} split at random)")
    else:
        s, cmin = _csn_fit(total)
        idx_all = None if mat is None else np.arange(mat.shape[0])
        for _ in range(n_boot):
            val = _csn_fit(_resample(total, mat, idx_all, rng))[0]
            if np.isfinite(val):
                reps.append(val)
        srt = np.sort(total)[::-1]
        ranks, counts = np.arange(1, V + 1), srt
        r_min, r_max = 1, int(np.sum(total >= cmin))
        n_fit = int(total[total >= cmin].sum())
        rule = (f"ranks 1..{r_max}: the types with count >= c_min = {cmin:g}, c_min chosen by "
                "the Clauset-Shalizi-Newman KS minimum (powerlaw)")
    reps_arr, lo, hi = percentile_interval(reps, confidence, minimum=max(10, n_boot // 2),
                                           what=f"{n_boot} were drawn; pass more tokens or lower min_count")
    return ZipfFit(s=float(s), ci_low=lo, ci_high=hi, r_min=int(r_min),
                   r_max=int(r_max), method=method, rule=rule, n_tokens=int(tok.size),
                   n_types=int(np.sum(total > 0)), n_units=int(n_units),
                   confidence=float(confidence), replicates=reps_arr, ranks=ranks,
                   counts=counts, n_fit=n_fit)


def plot_zipf_fit(fit: ZipfFit, ax: Any = None, title: str | None = None):
    """Draw the rank-frequency curve, the fitted law over its rank range and the interval.

    Args:
        fit: a :class:`ZipfFit`.
        ax: a matplotlib Axes (a new figure when ``None``; matplotlib is imported lazily).
        title: optional title.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib

    if ax is None:
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4.2, 3.2))
    else:
        fig = ax.figure
    ok = fit.counts > 0
    freq = fit.counts / fit.counts.sum()
    ax.loglog(fit.ranks[ok], freq[ok], ".", ms=2, color="0.5", label="data (fit half)")
    r = np.arange(fit.r_min, fit.r_max + 1, dtype=np.float64)
    inside = (fit.ranks >= fit.r_min) & (fit.ranks <= fit.r_max)
    mass = float(freq[inside].sum())
    for s, style, lab in ((fit.s, "-", f"s = {fit.s:.3f}"),
                          (fit.ci_low, ":", None), (fit.ci_high, ":", None)):
        law = r ** -s
        ax.loglog(r, mass * law / law.sum(), style, color="C3", lw=1,
                  label=lab if lab else None)
    ax.axvspan(fit.r_min, fit.r_max, color="C3", alpha=0.06)
    ax.set_xlabel("rank r")
    ax.set_ylabel("frequency")
    ax.set_title(title or f"Zipf fit ({fit.method}): s = {fit.s:.3f} "
                          f"[{fit.ci_low:.3f}, {fit.ci_high:.3f}]", fontsize=8)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig

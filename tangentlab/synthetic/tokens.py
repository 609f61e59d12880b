"""A frequency-biased token model on a manifold: the synthetic analogue of a corpus at a layer.

:class:`TokenModel` places ``n_types`` token centroids on a manifold, gives them Zipf
frequencies ``f_r ∝ r^(-s)`` (rank r = 1 is the most frequent; token id = rank - 1), and a
*pinning law* for the spread of each token's occurrences,
``t_r = t0 (f_r / f_max)^(-alpha)`` (frequent tokens are pinned close to their centroid). An
occurrence of token r is ``chart(c_r, u)`` with chart coordinates ``u ~ N(0, t_r² I_m)`` in the
orthonormal tangent frame at the centroid (see :meth:`Manifold.chart`), so it lies on the manifold.

Example::

    >>> from tangentlab.synthetic.manifolds import Sphere
    >>> tm = TokenModel(Sphere(2), n_types=50, zipf_s=1.0, pin_alpha=0.5, t0=0.02, seed=0)
    >>> corpus = tm.sample(1000, seed=1)
    >>> corpus.points.shape, corpus.token_ids.shape
    ((1000, 3), (1000,))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tangentlab.errors import ValidationError
from tangentlab.synthetic.manifolds import LocalFrame, Manifold

__all__ = ["TokenModel", "Corpus", "zipf_frequencies", "pinning_spreads"]


def zipf_frequencies(n_types: int, s: float) -> np.ndarray:
    """Zipf probabilities ``f_r ∝ r^(-s)``, r = 1..n_types, shape (n_types,), summing to 1."""
    if int(n_types) < 2:
        raise ValidationError(f"n_types must be >= 2; got {n_types}")
    if not (float(s) >= 0 and math.isfinite(float(s))):
        raise ValidationError(f"Zipf exponent s must be >= 0 and finite; got {s}")
    r = np.arange(1, int(n_types) + 1, dtype=np.float64)
    f = r ** (-float(s))
    return f / f.sum()


def pinning_spreads(freqs: np.ndarray, t0: float, alpha: float) -> np.ndarray:
    """The pinning law ``t = t0 (f / f_max)^(-alpha)``, shape like ``freqs``."""
    if not (float(t0) > 0 and math.isfinite(float(t0))):
        raise ValidationError(f"spread t0 must be a positive finite number; got {t0}")
    if not (float(alpha) >= 0 and math.isfinite(float(alpha))):
        raise ValidationError(f"pinning exponent alpha must be >= 0 and finite; got {alpha}")
    f = np.asarray(freqs, dtype=np.float64)
    return float(t0) * (f / f.max()) ** (-float(alpha))


@dataclass(frozen=True)
class Corpus:
    """N sampled occurrences.

    Attributes:
        points: shape (N, D), on the manifold.
        token_ids: shape (N,), int64, 0 = most frequent type.
        chart_coords: shape (N, m), the chart coordinates u of each occurrence.
    """

    points: np.ndarray
    token_ids: np.ndarray
    chart_coords: np.ndarray


class TokenModel:
    """Zipf-frequency tokens with pinned spreads on a manifold.

    Args:
        manifold: the :class:`Manifold` (in its ambient R^D).
        n_types: number of token types V (>= 2).
        zipf_s: Zipf exponent s (>= 0).
        pin_alpha: pinning exponent alpha (>= 0; 0 = every token has spread t0).
        t0: spread of the most frequent token (> 0).
        seed: seed of the centroid placement.
        max_spread: optional cap on t_r (rare tokens' spreads grow like r^(s·alpha)); ``None``
            means no cap. A capped law is no longer the pure pinning law: say so when comparing.
        patch_radius: ``None`` places centroids by ``manifold.sample`` (global). A number places
            them in one chart patch: ``chart(p, v)``, ``v ~ N(0, patch_radius² I_m)`` around
            ``p = manifold.sample(1, seed)`` (kept as ``patch_center``, shape (D,)).

    Attributes:
        centroids: shape (V, D). frequencies: shape (V,). spreads: shape (V,).
    """

    def __init__(self, manifold: Manifold, n_types: int, zipf_s: float, pin_alpha: float,
                 t0: float, seed: int, max_spread: float | None = None,
                 patch_radius: float | None = None):
        if not isinstance(manifold, Manifold):
            raise ValidationError("TokenModel needs a tangentlab.synthetic Manifold")
        self.manifold = manifold
        self.n_types = int(n_types)
        self.zipf_s = float(zipf_s)
        self.pin_alpha = float(pin_alpha)
        self.t0 = float(t0)
        self.seed = int(seed)
        self.frequencies = zipf_frequencies(self.n_types, self.zipf_s)
        spreads = pinning_spreads(self.frequencies, self.t0, self.pin_alpha)
        if max_spread is not None:
            if not float(max_spread) > 0:
                raise ValidationError(f"max_spread must be > 0; got {max_spread}")
            spreads = np.minimum(spreads, float(max_spread))
        self.max_spread = max_spread
        self.spreads = spreads
        self.patch_radius = patch_radius
        if patch_radius is None:
            self.patch_center = None
            self.centroids = manifold.sample(self.n_types, seed=self.seed)
        else:
            if not float(patch_radius) > 0:
                raise ValidationError(f"patch_radius must be > 0; got {patch_radius}")
            rng = np.random.default_rng([self.seed, 1])
            self.patch_center = manifold.sample(1, seed=self.seed)[0]
            v = rng.standard_normal((self.n_types, self.dim)) * float(patch_radius)
            self.centroids = manifold.chart(self.patch_center, v)
        self._frame: LocalFrame | None = None

    @property
    def dim(self) -> int:
        """The manifold's intrinsic dimension m."""
        return self.manifold.dim

    def centroid_frame(self) -> LocalFrame:
        """Tangent/normal frames and II at the centroids (cached), shapes (V, D, m) etc."""
        if self._frame is None:
            self._frame = self.manifold.frame(self.centroids)
        return self._frame

    def occurrences(self, token_ids, seed: int) -> Corpus:
        """Occurrences of the given token ids (one per entry), shape (N, D)."""
        ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_types):
            raise ValidationError(f"token ids must lie in [0, {self.n_types}); got out-of-range ids")
        rng = np.random.default_rng(seed)
        u = rng.standard_normal((ids.size, self.dim)) * self.spreads[ids, None]
        x = self.manifold.chart(self.centroids[ids], u) if ids.size else np.zeros(
            (0, self.manifold.ambient_dim))
        return Corpus(points=x, token_ids=ids, chart_coords=u)

    def sample(self, n_occurrences: int, seed: int) -> Corpus:
        """A corpus of N occurrences: token ids drawn from the Zipf law, then occurrences."""
        if int(n_occurrences) < 1:
            raise ValidationError(f"n_occurrences must be >= 1; got {n_occurrences}")
        rng = np.random.default_rng(seed)
        ids = rng.choice(self.n_types, size=int(n_occurrences), p=self.frequencies)
        return self.occurrences(np.sort(ids), seed=int(rng.integers(2**31)))

    def sample_per_type(self, per_type: int, seed: int) -> Corpus:
        """``per_type`` occurrences of every token type (the type-weighted pool)."""
        if int(per_type) < 1:
            raise ValidationError(f"per_type must be >= 1; got {per_type}")
        ids = np.repeat(np.arange(self.n_types), int(per_type))
        return self.occurrences(ids, seed=seed)

    def __repr__(self) -> str:
        return (f"TokenModel({self.manifold!r}, n_types={self.n_types}, zipf_s={self.zipf_s}, "
                f"pin_alpha={self.pin_alpha}, t0={self.t0}, seed={self.seed})")

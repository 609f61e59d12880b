"""Streams whose truth is known, in checkpoint-like batches with window-shared context.

Each batch stands for one context window (or one eval batch of a checkpoint): every row of the
batch shares a context offset drawn once per batch, and the batch as a whole has its own gradient
scale. Rows inside a batch are therefore *not* independent, which is exactly what makes row-level
intervals too narrow and first-k-in-row-order frequency statistics biased.

- :class:`GradientModel`: Gaussian gradient rows ``g = s_b (c_b + e_i)`` with a window context
  ``c_b ~ N(0, Sigma_c)``, a row term ``e_i ~ N(0, Sigma_e)`` and a batch scale
  ``log s_b ~ N(0, scale_sigma^2)``. Its true second moment is ``E[s^2] (Sigma_c + Sigma_e)``,
  so the true energy and enrichment of any subspace are known exactly.
- :func:`token_windows`: activations from :class:`tangentlab.synthetic.TokenModel` (Zipf tokens on
  a manifold patch, pinned spreads) in windows, each window adding its own context offset.

All randomness comes from explicit seeds (``numpy.random.default_rng``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tangentlab.errors import ValidationError
from tangentlab.measure import check_positive_int

__all__ = ["GradientModel", "make_gradient_model", "TokenWindows", "token_windows",
           "true_enrichment", "heavy_tail_batches", "heavy_tail_second_moment"]


def _random_rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


@dataclass(frozen=True)
class GradientModel:
    """Gaussian gradient rows with window-shared context (see the module docstring).

    Attributes:
        sqrt_row: ``(d, d)`` factor L_e with ``Sigma_e = L_e L_e^T``.
        sqrt_ctx: ``(d, d)`` factor L_c with ``Sigma_c = L_c L_c^T``.
        scale_sigma: standard deviation of the log batch scale.
        Q: ``(d, r)`` orthonormal planted subspace (the "tangent" of this stream).
    """

    sqrt_row: np.ndarray
    sqrt_ctx: np.ndarray
    scale_sigma: float
    Q: np.ndarray

    @property
    def d(self) -> int:
        """Ambient dimension d."""
        return int(self.Q.shape[0])

    @property
    def r(self) -> int:
        """Rank r of the planted subspace Q."""
        return int(self.Q.shape[1])

    def second_moment(self) -> np.ndarray:
        """True ``E[g g^T]`` up to the factor ``E[s^2]`` (which no energy depends on): (d, d)."""
        return self.sqrt_row @ self.sqrt_row.T + self.sqrt_ctx @ self.sqrt_ctx.T

    def batches(self, n_batches: int, rows_per_window: int, seed,
                windows_per_batch: int = 1) -> list[np.ndarray]:
        """``n_batches`` arrays of shape ``(windows_per_batch * rows_per_window, d)``.

        Each batch has one scale ``s_b``; each of its windows one context offset ``c_w`` shared by
        the window's ``rows_per_window`` rows.
        """
        rng = np.random.default_rng(seed)
        w, L = int(windows_per_batch), int(rows_per_window)
        out = []
        for _ in range(int(n_batches)):
            s = float(np.exp(self.scale_sigma * rng.standard_normal()))
            ctx = rng.standard_normal((w, self.d)) @ self.sqrt_ctx.T
            rows = rng.standard_normal((w * L, self.d)) @ self.sqrt_row.T
            out.append(s * (rows + np.repeat(ctx, L, axis=0)))
        return out


def make_gradient_model(d: int, r: int, *, signal: float, context: float, scale_sigma: float,
                        spectrum_sigma: float, seed, Q: np.ndarray | None = None) -> GradientModel:
    """A :class:`GradientModel` with an anisotropic spectrum and a planted subspace.

    Args:
        d: ambient dimension, ``d >= 2``.
        r: rank of the planted subspace Q (a Haar-random ``(d, r)`` basis unless Q is given),
            ``1 <= r < d``.
        signal: extra variance per direction of Q in the row term (0 = no planted signal: Q is
            then an ordinary random subspace of an anisotropic field, the null).
        context: the window context's share of variance (``Sigma_c`` is ``context`` times an
            independent anisotropic matrix of trace d).
        scale_sigma: standard deviation of the log batch scale.
        spectrum_sigma: eigenvalues of both anisotropic matrices are ``exp(N(0, sigma^2))``,
            normalised to mean 1, in a random rotation.
        Q: optional ``(d, r)`` orthonormal subspace to plant (e.g. a manifold's true tangent);
            default a Haar-random one.
        seed: seed of the spectra, the rotations and the random Q (anything
            ``numpy.random.default_rng`` takes).
    """
    d = check_positive_int(d, "d", minimum=2)
    r = check_positive_int(r, "r")
    if r >= d:
        raise ValidationError(f"r={r} must be below d={d}")
    if signal < 0 or context < 0 or scale_sigma < 0 or spectrum_sigma < 0:
        raise ValidationError("signal, context, scale_sigma and spectrum_sigma must be >= 0")
    rng = np.random.default_rng(seed)

    def aniso() -> np.ndarray:
        lam = np.exp(spectrum_sigma * rng.standard_normal(d))
        lam = lam / lam.mean()
        U = _random_rotation(d, rng)
        return U @ np.diag(lam) @ U.T

    Qr = _random_rotation(d, rng)[:, :r]
    if Q is not None:
        Q = np.asarray(Q, dtype=np.float64)
        if Q.shape != (d, r):
            raise ValidationError(f"Q must have shape ({d}, {r}); got {Q.shape}")
    else:
        Q = Qr
    Sigma_e = aniso() + signal * (Q @ Q.T)
    Sigma_c = context * aniso()
    return GradientModel(sqrt_row=np.linalg.cholesky(Sigma_e),
                         sqrt_ctx=np.linalg.cholesky(Sigma_c + 1e-12 * np.eye(d)),
                         scale_sigma=float(scale_sigma), Q=Q)


def true_enrichment(Q: np.ndarray, C: np.ndarray) -> tuple[float, float]:
    """(true energy E_T, true enrichment against Haar controls of the complement of Q).

    The expected energy of a Haar rank-r subspace of the (d - r)-dimensional complement is
    ``r / (d - r)`` times the complement's energy ``1 - E_T``.
    """
    d, r = Q.shape
    e = float(np.trace(Q.T @ C @ Q) / np.trace(C))
    return e, e * (d - r) / (r * (1.0 - e))


@dataclass(frozen=True)
class TokenWindows:
    """Token occurrences in windows: activations, token ids and window ids.

    Attributes:
        H: activations ``(N, d)`` (manifold point + window context + isotropic noise).
        token_ids: ``(N,)`` int, 0 = most frequent type.
        window_ids: ``(N,)`` int, the window of each row (rows of one window are contiguous).
        tangent: ``(d, m)`` orthonormal tangent basis at the patch centre (the true tangent).
        frequencies: ``(V,)`` Zipf frequencies.
        spreads: ``(V,)`` per-token chart spread t_r (pinning law; all equal when alpha = 0).
    """

    H: np.ndarray
    token_ids: np.ndarray
    window_ids: np.ndarray
    tangent: np.ndarray
    frequencies: np.ndarray
    spreads: np.ndarray


def token_windows(*, d: int, m: int, n_types: int, zipf_s: float, pin_alpha: float, t0: float,
                  n_windows: int, window: int, context: float, noise: float,
                  patch_radius: float, seed) -> TokenWindows:
    """Zipf tokens of a :class:`~tangentlab.synthetic.TokenModel` on a sphere patch, in windows.

    The manifold is an m-sphere placed isometrically in R^d; token centroids lie in one chart
    patch (radius ``patch_radius``) and each occurrence lies on the manifold at chart spread
    ``t_r = t0 (f_r/f_1)^(-pin_alpha)``. Each window of ``window`` consecutive rows draws its
    tokens from the Zipf law and adds one shared context offset ``N(0, context^2 I_d)``; every row
    adds isotropic noise ``N(0, noise^2 I_d)``.
    """
    from tangentlab.synthetic.manifolds import Sphere
    from tangentlab.synthetic.tokens import TokenModel

    rng = np.random.default_rng(seed)
    man = Sphere(m, ambient_dim=d, rotation_seed=int(rng.integers(2**31)))
    tm = TokenModel(man, n_types=n_types, zipf_s=zipf_s, pin_alpha=pin_alpha, t0=t0,
                    seed=int(rng.integers(2**31)), patch_radius=patch_radius)
    N = int(n_windows) * int(window)
    ids = rng.choice(tm.n_types, size=N, p=tm.frequencies)
    occ = tm.occurrences(ids, seed=int(rng.integers(2**31)))
    win = np.repeat(np.arange(int(n_windows)), int(window))
    ctx = context * rng.standard_normal((int(n_windows), d))
    H = occ.points + ctx[win] + noise * rng.standard_normal((N, d))
    tangent = man.tangent_basis(tm.patch_center[None])[0]
    return TokenWindows(H=H, token_ids=ids.astype(np.int64), window_ids=win, tangent=tangent,
                        frequencies=tm.frequencies, spreads=tm.spreads)


def heavy_tail_batches(gm: GradientModel, n_batches: int, rows_per_window: int, *,
                       signal: float, tail_sigma: float, seed,
                       windows_per_batch: int = 4) -> list[np.ndarray]:
    """Batches of ``gm`` plus a planted signal in ``gm.Q`` whose strength varies by batch.

    Batch b adds ``sqrt(signal w_b) Q z_i`` (``z_i ~ N(0, I_r)``) to each of its rows, with a
    log-normal weight ``w_b = exp(tail_sigma u_b - tail_sigma^2 / 2)`` of mean 1, so the true
    second moment is :func:`heavy_tail_second_moment` while the per-batch enrichment has a
    heavy right tail: its
    coefficient of variation over batches (:func:`tangentlab.measure.ratio_cv`) grows with
    ``tail_sigma`` (about 1.25 at tail_sigma = 1.2 and 2.7 at 1.75 with signal 4, d = 32, r = 2).
    """
    rng = np.random.default_rng(seed)
    base = gm.batches(n_batches, rows_per_window, seed=[*np.atleast_1d(seed).tolist(), 1],
                      windows_per_batch=windows_per_batch)
    out = []
    for b in base:
        w = float(np.exp(tail_sigma * rng.standard_normal() - tail_sigma**2 / 2))
        z = rng.standard_normal((b.shape[0], gm.r))
        out.append(b + np.sqrt(signal * w) * z @ gm.Q.T)
    return out


def heavy_tail_second_moment(gm: GradientModel, signal: float) -> np.ndarray:
    """True ``E[g g^T]`` ``(d, d)`` of :func:`heavy_tail_batches`.

    It is ``E[s^2] gm.second_moment() + signal Q Q^T`` with ``E[s^2] = exp(2 scale_sigma^2)``
    (the signal is added after the batch scale).
    """
    return float(np.exp(2 * gm.scale_sigma**2)) * gm.second_moment() + signal * gm.Q @ gm.Q.T

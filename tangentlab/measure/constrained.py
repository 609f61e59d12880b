"""Gradients that live in a constrained space (issue 10, item 6).

Normalization layers force structure into the gradients of the residual stream that feeds them:

- wherever the stream reaches the loss only through LayerNorms, every gradient row is orthogonal
  to the all-ones vector 1 (a *fixed* forced direction);
- at the last block (the stream's only consumer is the final LayerNorm) it is also orthogonal to
  the row's *feature-centred* activation ``h_i - mean_features(h_i) 1`` (a *per-row* direction);
- before an RMSNorm that is the only consumer, ``g_i`` is orthogonal to ``h_i`` itself.

A subspace fitted on activations that contains such a direction loses gradient energy for a
reason unrelated to tangents. Check the constraint numerically
(:func:`forced_direction_cosines`), then compare inside the space the gradients can reach:

- fixed forced subspace N ``(d, k)``: :func:`complement_space` gives an orthonormal basis U
  ``(d, d - k)`` of its complement; rows ``G U`` and the restricted basis
  :func:`restrict_to_complement` (span of ``U^T Q``, rank ``r' <= r``: directions of Q inside
  span(N) are dropped) go through the usual energy, control and oracle code unchanged, and the
  baseline becomes ``r' / (d - k)``;
- per-row forced directions: :func:`reachable_baseline` replaces r/d by
  ``sum_i w_i tr(Q^T (I - P_i) Q) / ((d - k) sum_i w_i)`` (P_i the projector onto row i's
  forced directions, w_i = ||g_i||^2), the exact expected energy fraction when each g_i is
  isotropic inside its reachable space, and :func:`normalised_enrichment` compares subspaces
  each against its own reachable baseline.

Example::

    >>> import numpy as np
    >>> from tangentlab.measure.constrained import complement_space, restrict_to_complement
    >>> ones = np.ones((6, 1)) / np.sqrt(6)
    >>> Q = np.hstack([ones, np.eye(6)[:, :1] - ones / np.sqrt(6)])
    >>> Q = np.linalg.qr(Q)[0]                       # a rank-2 subspace that contains 1
    >>> restrict_to_complement(Q, ones).shape        # 1 is unreachable: rank 1 remains, in R^5
    (5, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tangentlab.errors import RankError, ShapeError
from tangentlab.measure._validate import as_basis, as_points, to_float64
from tangentlab.typing import ArrayLike

__all__ = [
    "forced_direction_cosines",
    "ComplementSpace",
    "complement_space",
    "restrict_to_complement",
    "reachable_baseline",
    "normalised_enrichment",
]


FORCED_NAMES = ("ones", "centred", "raw")


def _unit_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nrm = np.linalg.norm(X, axis=1)
    ok = nrm > 0
    out = np.zeros_like(X)
    out[ok] = X[ok] / nrm[ok, None]
    return out, ok


def _unit_rows_torch(X):
    """Rows of a torch tensor scaled to unit norm (zero rows stay zero), and which are nonzero."""
    import torch

    nrm = torch.linalg.vector_norm(X, dim=1)
    ok = nrm > 0
    return X / torch.where(ok, nrm, torch.ones_like(nrm))[:, None], ok


def forced_cosine_parts(G, H) -> dict:
    """The torch core of :func:`forced_direction_cosines`, on the rows' device, no host reads.

    ``G``, ``H``: ``(n, d)`` tensors (same device and dtype). Returns 0-d tensors: ``{name}_max``
    (-inf for no usable row) and ``{name}_sum`` of |cos| over the usable rows for each name of
    :data:`FORCED_NAMES`, ``n`` (usable rows) and ``n_zero`` (the others).
    """
    import torch

    d = G.shape[1]
    gu, gok = _unit_rows_torch(G)
    hc, cok = _unit_rows_torch(H - H.mean(dim=1, keepdim=True))
    hr, rok = _unit_rows_torch(H)
    ok = gok & cok & rok
    out = {}
    ninf = torch.tensor(float("-inf"), dtype=G.dtype, device=G.device)
    for name, vals in (("ones", gu.sum(1) / d ** 0.5), ("centred", (gu * hc).sum(1)),
                       ("raw", (gu * hr).sum(1))):
        a = torch.where(ok, vals.abs(), ninf)
        out[f"{name}_max"] = a.max() if a.numel() else ninf
        out[f"{name}_sum"] = torch.where(ok, vals.abs(), torch.zeros_like(vals)).sum()
    out["n"] = ok.sum()
    out["n_zero"] = (~ok).sum()
    return out


def forced_direction_cosines(G: ArrayLike, H: ArrayLike) -> dict[str, float]:
    """Per-row |cosine| of gradient rows with the directions normalization layers force.

    Args:
        G: gradient rows, shape ``(n, d)``.
        H: the activations at the same site, shape ``(n, d)`` (same rows as G).

    Returns a dict of floats: ``ones_max``/``ones_mean`` (|cos(g_i, 1)|), ``centred_max``/
    ``centred_mean`` (|cos(g_i, h_i - mean_features(h_i) 1)|), ``raw_max``/``raw_mean``
    (|cos(g_i, h_i)|), ``n`` (rows used) and ``n_zero`` (rows left out because g_i or the
    direction is zero, e.g. a causal LM's last position). A cosine near machine precision means
    the constraint holds at that site; compare with ``1 / sqrt(d)``, the typical |cos| of
    unconstrained rows. Computed by :func:`forced_cosine_parts` (float64 torch).
    """
    import torch

    Gm = as_points(G, name="G")
    Hm = as_points(H, name="H", dim=Gm.shape[1])
    if Hm.shape[0] != Gm.shape[0]:
        raise ShapeError(f"G and H need the same rows, got {Gm.shape[0]} and {Hm.shape[0]}")
    parts = forced_cosine_parts(torch.from_numpy(Gm), torch.from_numpy(Hm))
    n = int(parts["n"])
    out: dict[str, float] = {}
    for name in FORCED_NAMES:
        out[f"{name}_max"] = float(parts[f"{name}_max"]) if n else float("nan")
        out[f"{name}_mean"] = float(parts[f"{name}_sum"]) / n if n else float("nan")
    out["n"] = n
    out["n_zero"] = int(parts["n_zero"])
    out["unconstrained_typical"] = float(1 / np.sqrt(Gm.shape[1]))
    return out


@dataclass(frozen=True)
class ComplementSpace:
    """The orthogonal complement of a fixed forced subspace N.

    Attributes:
        basis: U ``(d, d - k)`` orthonormal, spanning the complement of span(N).
        forced: N ``(d, k)`` orthonormal.
    """

    basis: np.ndarray
    forced: np.ndarray

    @property
    def dim(self) -> int:
        """Dimension of the complement, ``d - k``."""
        return int(self.basis.shape[1])

    def coordinates(self, X: ArrayLike) -> np.ndarray:
        """Rows ``(n, d)`` in complement coordinates: ``X U``, shape ``(n, d - k)``."""
        Xm = to_float64(X, "X")
        if Xm.ndim != 2 or Xm.shape[1] != self.basis.shape[0]:
            raise ShapeError(f"X must have shape (n, {self.basis.shape[0]}); got {Xm.shape}")
        return Xm @ self.basis


def complement_space(N: ArrayLike) -> ComplementSpace:
    """:class:`ComplementSpace` of span(N); N ``(d, k)`` orthonormal (e.g. ``ones(d)/sqrt(d)``)."""
    Nb = as_basis(N, name="N")
    d, k = Nb.shape
    if k >= d:
        raise RankError(f"N spans all of R^{d}; nothing remains to measure in")
    full, _ = np.linalg.qr(Nb, mode="complete")
    return ComplementSpace(basis=np.ascontiguousarray(full[:, k:]), forced=Nb)


def restrict_to_complement(Q: ArrayLike, N: ArrayLike | ComplementSpace,
                           tol: float = 1e-8) -> np.ndarray:
    """Orthonormal basis ``(d - k, r')`` of span(U^T Q) in the complement coordinates of N.

    ``r' = r`` minus the number of directions of span(Q) that lie (to ``tol`` in singular value)
    inside span(N): those directions can hold no gradient energy there, so they are not part of
    the subspace's reachable part. Raises RankError if nothing of Q remains.
    """
    space = N if isinstance(N, ComplementSpace) else complement_space(N)
    Qb = as_basis(Q, d=space.basis.shape[0])
    A = space.basis.T @ Qb  # (d - k, r)
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    keep = s > tol
    if not keep.any():
        raise RankError("span(Q) lies inside the forced subspace: no reachable part remains")
    return np.ascontiguousarray(U[:, keep])


def reachable_baseline(Q: ArrayLike, H: ArrayLike, *, forced: str = "raw",
                       weights: ArrayLike | None = None) -> float | np.ndarray:
    """Isotropic baseline of Q inside the per-row reachable space (replaces r/d).

    Args:
        Q: ``(d, r)`` orthonormal, or a stack ``(n, d, r)`` (e.g. controls).
        H: activations ``(n_rows, d)``.
        forced: ``"raw"`` (RMSNorm: g_i ⟂ h_i, k_i = 1), ``"centred"`` (last LayerNorm:
            g_i ⟂ 1 and ⟂ the feature-centred h_i, k_i = 2).
        weights: ``(n_rows,)`` non-negative row weights, the squared gradient norms
            ``||g_i||^2`` of the same rows; None weighs rows equally (exact only when every
            gradient row has the same norm).

    Returns ``sum_i w_i tr(Q^T (I - P_i) Q) / ((d - k) sum_i w_i)`` (float, or ``(n,)`` for a
    stack). The energy fraction ``sum_i ||Q^T g_i||^2 / sum_i ||g_i||^2`` of gradients that are
    isotropic within each row's reachable space has exactly this expectation when w_i =
    ||g_i||^2: a row's share of the total is its squared norm, so an unweighted mean misstates
    the null wherever the norm of g_i depends on the direction of h_i.
    """
    Hm = as_points(H, name="H")
    d = Hm.shape[1]
    if weights is None:
        w = np.full(Hm.shape[0], 1.0 / Hm.shape[0])
    else:
        w = to_float64(weights, "weights").ravel()
        if w.shape != (Hm.shape[0],):
            raise ShapeError(f"weights must hold one value per row of H, shape ({Hm.shape[0]},); "
                             f"got {w.shape}")
        if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
            from tangentlab.errors import ValidationError

            raise ValidationError("weights must be finite, non-negative and not all zero (the "
                                  "squared gradient norms of the rows of H)")
        w = w / w.sum()
    arr = to_float64(Q, "Q")
    single = arr.ndim == 2
    if single:
        arr = as_basis(arr, d=d)[None]
    if arr.ndim != 3 or arr.shape[1] != d:
        raise ShapeError(f"Q must be (d, r) or (n, d, r) with d={d}; got {arr.shape}")
    r = arr.shape[2]
    if forced == "raw":
        dirs = [_unit_rows(Hm)[0]]
    elif forced == "centred":
        dirs = [np.tile(np.ones(d) / np.sqrt(d), (Hm.shape[0], 1)),
                _unit_rows(Hm - Hm.mean(axis=1, keepdims=True))[0]]
    else:
        raise ShapeError(f"forced must be 'raw' or 'centred', got {forced!r}")
    k = len(dirs)
    lost = np.zeros(arr.shape[0])
    for D in dirs:  # (n_rows, d): sum_i w_i ||Q^T u_i||^2 = tr(Q^T (sum_i w_i u_i u_i^T) Q)
        M = (D * w[:, None]).T @ D
        lost += np.einsum("ndr,de,ner->n", arr, M, arr)
    out = (r - lost) / (d - k)
    return float(out[0]) if single else out


def normalised_enrichment(energy: float, baseline: float, control_energies: ArrayLike,
                          control_baselines: ArrayLike) -> float:
    """``(E_T / b_T) / mean_j (E_Nj / b_Nj)``: each subspace against its own reachable baseline."""
    ce = to_float64(control_energies, "control_energies").ravel()
    cb = to_float64(control_baselines, "control_baselines").ravel()
    if ce.shape != cb.shape:
        raise ShapeError("control_energies and control_baselines need the same length")
    den = float(np.mean(ce / cb))
    return float(energy / baseline / den) if den > 0 else float("inf")

"""Per-batch energies: the scalars every batch contributes to the batch control test.

For each test batch, the energy of Q_T, of every control of a pool (complement controls for the
enrichment, full-space controls for the p-value) and the trace, overall and per bucket, as
:class:`BatchEnergies` (a few scalars per batch, never a (d, d) matrix per batch).
:func:`tangentlab.measure.batch_test.batch_control_test` resamples them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tangentlab.errors import InsufficientSamplesError, ShapeError, ValidationError
from tangentlab.measure._validate import (
    as_basis,
    as_points,
    to_float64,
)
from tangentlab.typing import ArrayLike

__all__ = ["BatchEnergies", "batch_energies", "grouped_batch_energies"]


@dataclass(frozen=True)
class BatchEnergies:
    """Per-batch projected energies of one tested subspace and a pool of controls.

    Everything a control test and its interval need, as scalars per batch (float64), so memory is
    ``O(B K)`` whatever ``d`` is (never ``B d^2``):

    - ``tangent`` shape ``(B,)``: ``sum_i ||Q^T g_i||^2`` over the rows of each batch;
    - ``controls`` shape ``(B, K)``: the same for each of the K pool controls;
    - ``trace`` shape ``(B,)``: ``sum_i ||g_i||^2``;
    - ``rows`` shape ``(B,)``: rows per batch;
    - ``d``, ``r``: ambient dimension and rank;
    - ``full`` shape ``(B, K_f)`` or None: the same for K_f *full-space* controls (Haar rank-r
      subspaces of all of R^d, :func:`~tangentlab.measure.random_subspaces`). Under the null
      "span(Q) is no different from a random rank-r subspace" they are exchangeable with Q, so
      :func:`batch_control_test` takes its p-value from them when they are present (the
      enrichment still divides by the matched-rank complement controls of ``controls``).

    Energies are linear in the moment matrix, so ``tangent.sum() / trace.sum()`` is exactly
    ``energy_fraction(Q, G^T G / N)`` over all rows. :meth:`concat` appends batches (for example
    from another data-parallel rank that used the *same* Q and control pool).
    """

    tangent: np.ndarray
    controls: np.ndarray
    trace: np.ndarray
    rows: np.ndarray
    d: int
    r: int
    full: np.ndarray | None = None

    @property
    def n_batches(self) -> int:
        """Number of batches B."""
        return int(self.tangent.shape[0])

    @property
    def pool_size(self) -> int:
        """Number of controls K in the pool."""
        return int(self.controls.shape[1])

    @property
    def full_size(self) -> int:
        """Number of full-space controls K_f (0 when none were projected)."""
        return 0 if self.full is None else int(self.full.shape[1])

    @classmethod
    def zeros(cls, n_batches: int, d: int, r: int, pool_size: int,
              full_size: int = 0) -> BatchEnergies:
        """A record of ``n_batches`` empty batches (for a group absent from some batches)."""
        return cls(tangent=np.zeros(n_batches), controls=np.zeros((n_batches, pool_size)),
                   trace=np.zeros(n_batches), rows=np.zeros(n_batches, dtype=np.int64), d=d, r=r,
                   full=np.zeros((n_batches, full_size)) if full_size else None)

    def plus(self, other: BatchEnergies) -> BatchEnergies:
        """Batch-by-batch sum with ``other`` (the same batches, e.g. two groups of rows)."""
        if (other.n_batches, other.pool_size, other.full_size, other.d, other.r) != \
                (self.n_batches, self.pool_size, self.full_size, self.d, self.r):
            raise ShapeError("plus needs two BatchEnergies of the same batches, pools, d and r")
        return BatchEnergies(
            tangent=self.tangent + other.tangent, controls=self.controls + other.controls,
            trace=self.trace + other.trace, rows=self.rows + other.rows, d=self.d, r=self.r,
            full=None if self.full is None else self.full + other.full)

    def concat(self, other: BatchEnergies) -> BatchEnergies:
        """These batches followed by ``other``'s (same d, r and control pool size)."""
        if not isinstance(other, BatchEnergies):
            raise ValidationError(f"can only concat BatchEnergies, not {type(other).__name__}")
        mine = (self.d, self.r, self.pool_size, self.full_size)
        theirs = (other.d, other.r, other.pool_size, other.full_size)
        if theirs != mine:
            raise ShapeError(
                f"cannot concat BatchEnergies with (d, r, K, K_full) = {theirs} to {mine}; both "
                "must come from the same Q and pools"
            )
        return BatchEnergies(
            tangent=np.concatenate([self.tangent, other.tangent]),
            controls=np.concatenate([self.controls, other.controls], axis=0),
            trace=np.concatenate([self.trace, other.trace]),
            rows=np.concatenate([self.rows, other.rows]),
            d=self.d, r=self.r,
            full=None if self.full is None else np.concatenate([self.full, other.full], axis=0),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python dict (arrays as lists) for JSON."""
        return {"tangent": self.tangent.tolist(), "controls": self.controls.tolist(),
                "trace": self.trace.tolist(), "rows": self.rows.tolist(), "d": self.d,
                "r": self.r, "full": None if self.full is None else self.full.tolist()}


def _as_pool(controls: Any, d: int, r: int) -> np.ndarray:
    P = to_float64(controls, "controls")
    if P.ndim == 2:
        P = P[None]
    if P.ndim != 3 or P.shape[1:] != (d, r):
        raise ShapeError(
            f"controls must be a pool of bases of shape (K, {d}, {r}) matching Q (d, r) = "
            f"({d}, {r}); got {P.shape}"
        )
    if not np.all(np.isfinite(P)):
        from tangentlab.errors import NonFiniteError

        raise NonFiniteError("controls hold NaN or Inf; pass orthonormal control bases")
    gram = np.einsum("kdr,kds->krs", P, P) - np.eye(r)
    bad = np.flatnonzero(np.max(np.abs(gram), axis=(1, 2)) > 1e-6)
    if bad.size:
        from tangentlab.errors import NotOrthonormalError

        raise NotOrthonormalError(
            f"controls[{int(bad[0])}] (and {bad.size - 1} more) do not have orthonormal columns; "
            "build them with normal_controls / random_subspaces"
        )
    return P


def _with_full(P: np.ndarray, full_controls: ArrayLike | None, d: int, r: int
               ) -> tuple[np.ndarray, int]:
    """The pool with the full-space controls appended, and how many of those there are."""
    if full_controls is None:
        return P, 0
    F = _as_pool(full_controls, d, r)
    return np.concatenate([P, F], axis=0), int(F.shape[0])


def batch_energies(Q: ArrayLike, controls: ArrayLike, grad_batches: Iterable[ArrayLike], *,
                   full_controls: ArrayLike | None = None,
                   dtype: str = "float64") -> BatchEnergies:
    """Per-batch energies of Q and of a control pool: see :class:`BatchEnergies`.

    Args:
        Q: tested basis, shape ``(d, r)``, orthonormal.
        controls: control pool, shape ``(K, d, r)``, each orthonormal (e.g.
            ``normal_controls(Q, 200, seed)``); K should be at least the ``n_controls`` of
            :func:`batch_control_test`, and larger (e.g. 200) so that replicates can redraw.
        grad_batches: an iterable of gradient batches, each shape ``(n_b, d)`` (numpy or torch,
            any real dtype; computed in float64), or one ``(B, n_b, d)`` array.
        full_controls: optional ``(K_f, d, r)`` full-space controls (e.g.
            ``random_subspaces(d, r, 200, seed)``), projected in the same pass; their energies go
            to ``BatchEnergies.full`` and give :func:`batch_control_test` its p-value.
        dtype: precision of the projection ``g @ [Q, controls]``: ``"float64"`` (default) or
            ``"float32"`` (about twice as fast on CPU; squares and sums are still accumulated in
            float64, relative error about 1e-7 per batch).

    Cost per batch: ``n_b d (K + 1) r`` multiply-adds (or ``n_b d^2 + d^2 (K + 1) r`` when that
    is smaller); measured 5.2 s for 64 batches of 128 rows at d = 2048, r = 8, K = 200 on one
    loaded core (float64). Memory ``O(B K)`` for the result (100 KB there) plus the pool and one
    batch (about 90 MB peak there), against 2 GB for 64 per-batch ``(d, d)`` float64 sums.
    """
    import torch

    if dtype not in ("float64", "float32"):
        raise ValidationError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    tdtype = torch.float64 if dtype == "float64" else torch.float32
    Q = as_basis(Q)
    d, r = Q.shape
    P = _as_pool(controls, d, r)
    K = P.shape[0]
    P, Kf = _with_full(P, full_controls, d, r)
    bases = torch.from_numpy(np.concatenate([Q[None], P], axis=0).transpose(1, 0, 2).reshape(d, -1))
    bases_c = bases.to(tdtype)
    via_outer = (K + Kf + 1) * r > d
    tang, ctrl, tr, nrows = [], [], [], []
    for i, batch in enumerate(grad_batches):
        if isinstance(batch, torch.Tensor):
            if batch.is_complex() or batch.dtype == torch.bool:
                from tangentlab.errors import DTypeError

                raise DTypeError(f"grad_batches[{i}] has dtype {batch.dtype}; pass real rows")
            g = batch.detach().to(device="cpu", dtype=torch.float64)
            if g.ndim != 2 or g.shape[1] != d:
                raise ShapeError(
                    f"grad_batches[{i}] must have shape (n_b, {d}); got {tuple(g.shape)}"
                )
            if not bool(torch.isfinite(g).all()):
                from tangentlab.errors import NonFiniteError

                raise NonFiniteError(f"grad_batches[{i}] holds NaN or Inf; repair that batch")
        else:
            g = torch.from_numpy(as_points(batch, name=f"grad_batches[{i}]", min_rows=0, dim=d))
        gc = g.to(tdtype)
        if via_outer:
            S = (gc.T @ gc).double()
            e = ((S @ bases) * bases).sum(0)
        else:
            e = ((gc @ bases_c).double() ** 2).sum(0)
        e = e.reshape(K + Kf + 1, r).sum(1).numpy()
        tang.append(float(e[0]))
        ctrl.append(e[1:])
        tr.append(float((g * g).sum()))
        nrows.append(int(g.shape[0]))
    if not tang:
        raise InsufficientSamplesError("grad_batches is empty; pass at least one batch of rows")
    allc = np.stack(ctrl).astype(np.float64)
    return BatchEnergies(
        tangent=np.asarray(tang, dtype=np.float64),
        controls=np.ascontiguousarray(allc[:, :K]),
        trace=np.asarray(tr, dtype=np.float64),
        rows=np.asarray(nrows, dtype=np.int64),
        d=d, r=r, full=np.ascontiguousarray(allc[:, K:]) if Kf else None,
    )


def _grouped_energy_sums(g, bases, inv: np.ndarray, n_groups: int) -> np.ndarray:
    """Σ over the rows of each group of the squared projections on every basis column.

    ``g``: (n, d) float64 tensor; ``bases``: (d, M) float64 tensor; ``inv``: (n,) group index
    of each row. Returns (n_groups, M) numpy. Takes the cheaper of two routes, by multiply-adds:
    project every row (n·d·M) or project each group's Gram matrix GⱼᵀGⱼ (n·d² + L·d²·M for
    L = ``n_groups``); they agree up to float rounding.
    """
    import torch

    n, d = g.shape
    M = bases.shape[1]
    if n * d * d + n_groups * d * d * M >= n * d * M:
        e = (g @ bases) ** 2  # (n, M)
        sums = np.zeros((n_groups, M))
        np.add.at(sums, inv, e.numpy())
        return sums
    idx = torch.from_numpy(np.asarray(inv, dtype=np.int64))
    parts = [g[idx == j] for j in range(n_groups)]
    grams = torch.stack([p.T @ p for p in parts])  # (L, d, d)
    proj = (grams.reshape(n_groups * d, d) @ bases).reshape(n_groups, d, M)
    return (proj * bases[None]).sum(1).numpy()


def grouped_batch_energies(Q: ArrayLike, controls: ArrayLike,
                           grad_batches: Iterable[ArrayLike],
                           group_batches: Any, *,
                           full_controls: ArrayLike | None = None) -> dict[Any, BatchEnergies]:
    """Per-batch energies split by a label per row (e.g. a frequency bucket): one projection pass.

    Args:
        Q: tested basis, shape ``(d, r)``, orthonormal (as in :func:`batch_energies`).
        controls: control pool, shape ``(K, d, r)``, each orthonormal (as in
            :func:`batch_energies`).
        grad_batches: iterable of gradient batches ``(n_b, d)``.
        group_batches: iterable of label arrays ``(n_b,)``, one per batch (integers or strings).
        full_controls: optional ``(K_f, d, r)`` full-space controls (as in
            :func:`batch_energies`).

    Returns ``{label: BatchEnergies}`` with labels in sorted order; every record has one entry per
    batch (0 where the batch holds no row of that label, so batches stay aligned across labels
    and remain the resampling unit).
    """
    import torch

    Q = as_basis(Q)
    d, r = Q.shape
    P = _as_pool(controls, d, r)
    K0 = P.shape[0]
    P, Kf = _with_full(P, full_controls, d, r)
    K = K0 + Kf
    bases = torch.from_numpy(np.concatenate([Q[None], P], axis=0).transpose(1, 0, 2).reshape(d, -1))
    per_batch = []
    labels: set = set()
    for i, (batch, grp) in enumerate(zip(grad_batches, group_batches, strict=True)):
        g = torch.from_numpy(as_points(batch, name=f"grad_batches[{i}]", min_rows=0, dim=d))
        lab = np.asarray(grp.detach().cpu().numpy() if hasattr(grp, "detach") else grp)
        if lab.shape != (g.shape[0],):
            raise ShapeError(
                f"group_batches[{i}] must hold one label per row, shape ({g.shape[0]},); got "
                f"{lab.shape}"
            )
        tr = (g * g).sum(1).numpy()
        uniq, inv = np.unique(lab, return_inverse=True)
        sums = _grouped_energy_sums(g, bases, inv, uniq.size).reshape(uniq.size, K + 1, r).sum(2)
        trs = np.bincount(inv, weights=tr, minlength=uniq.size)
        cnt = np.bincount(inv, minlength=uniq.size)
        per_batch.append({u.item() if hasattr(u, "item") else u: (sums[j], trs[j], cnt[j])
                          for j, u in enumerate(uniq)})
        labels.update(per_batch[-1])
    if not per_batch:
        raise InsufficientSamplesError("grad_batches is empty; pass at least one batch of rows")
    zero = (np.zeros(K + 1), 0.0, 0)
    out = {}
    for lab in sorted(labels):
        rec = [pb.get(lab, zero) for pb in per_batch]
        allc = np.stack([x[0][1:] for x in rec])
        out[lab] = BatchEnergies(
            tangent=np.array([x[0][0] for x in rec]), controls=np.ascontiguousarray(allc[:, :K0]),
            trace=np.array([x[1] for x in rec], dtype=np.float64),
            rows=np.array([x[2] for x in rec], dtype=np.int64), d=d, r=r,
            full=np.ascontiguousarray(allc[:, K0:]) if Kf else None,
        )
    return out

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

__all__ = ["BatchEnergies", "EnergyStream", "EnergyStreamGroup", "batch_energies",
           "grouped_batch_energies"]


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
    gram = np.swapaxes(P, 1, 2) @ P - np.eye(r)  # (K, r, r)
    bad = np.flatnonzero(np.max(np.abs(gram), axis=(1, 2)) > 1e-6)
    if bad.size:
        from tangentlab.errors import NotOrthonormalError

        raise NotOrthonormalError(
            f"controls[{int(bad[0])}] (and {bad.size - 1} more) do not have orthonormal columns; "
            "build them with normal_controls / random_subspaces"
        )
    return P


def _full_pool(full_controls: ArrayLike | None, d: int, r: int) -> tuple[np.ndarray, ...]:
    """The full-space controls as a 1-tuple of a checked pool, or () without them."""
    return () if full_controls is None else (_as_pool(full_controls, d, r),)


class EnergyStream:
    """Per-batch energies accumulated in torch on the device of the gradient rows.

    The production path of :func:`batch_energies`, :func:`grouped_batch_energies` and of
    ``measure``'s test half: the bases ``[Q, controls, full]`` live on the device in the
    statistics' dtype (:mod:`tangentlab.measure.precision`); each :meth:`add` keeps a batch's
    ``(L, K + K_f + 1)`` projected energies, ``(L,)`` traces and row counts there (L groups), and
    :meth:`finish` moves all batches to the host once, as float64 :class:`BatchEnergies`.

    Args:
        Q: tested basis ``(d, r)``, orthonormal.
        controls: pool ``(K, d, r)``, each orthonormal.
        full_controls: optional ``(K_f, d, r)`` full-space controls.
        n_groups: L, the number of row groups (e.g. frequency buckets); 1 = no grouping.
        proj_dtype: ``None`` (the statistics' dtype) or ``"float32"`` (projection in float32,
            squares and sums in the statistics' dtype).
        stats_dtype: a :data:`~tangentlab.measure.precision.STATS_DTYPES` name, None = the
            current :func:`~tangentlab.measure.precision.precision_scope`'s.

    Memory on the device: the bases ``d (K + K_f + 1) r`` plus ``B L (K + K_f + 3)`` scalars.
    """

    def __init__(self, Q: ArrayLike, controls: ArrayLike, *,
                 full_controls: ArrayLike | None = None, n_groups: int = 1,
                 proj_dtype: str | None = None, stats_dtype: str | None = None):
        Q = as_basis(Q)
        self.d, self.r = Q.shape
        P = _as_pool(controls, self.d, self.r)
        self.K = int(P.shape[0])
        F = _full_pool(full_controls, self.d, self.r)
        self.Kf = int(F[0].shape[0]) if F else 0
        # identity of the full-space pool: streams given the same array share its projection
        # when added together (EnergyStreamGroup)
        self._full_id = None if full_controls is None else id(full_controls)
        # Q, the pool and the full pool, (n, d, r) each, as given: _setup concatenates them and
        # lays the (1 + K + K_f) bases out as (d, M) columns on the device. Done on the host,
        # the concatenation and the transposing gather were most of a checkpoint's statistics
        # on an H200 (docs/scale.md).
        self._parts_np = (Q[None], P, *F)
        self.n_groups = int(n_groups)
        self._proj32 = proj_dtype == "float32"
        self._request = stats_dtype
        self.precision = None
        self._bases = self._bases_c = None
        self._sums: list = []
        self._traces: list = []
        self._rows: list = []

    def _setup(self, device) -> None:
        import torch

        from tangentlab.measure.precision import resolve_precision

        self.precision = resolve_precision(self._request, device)
        parts = [torch.from_numpy(p).to(device=device, dtype=self.precision.dtype)
                 for p in self._parts_np]
        self._bases = torch.cat(parts).permute(1, 0, 2).reshape(self.d, -1)
        self._bases_c = self._bases.to(torch.float32) if self._proj32 else self._bases

    def _batch(self, i: int, batch: Any):
        import torch

        if isinstance(batch, torch.Tensor):
            if batch.is_complex() or batch.dtype == torch.bool:
                from tangentlab.errors import DTypeError

                raise DTypeError(f"grad_batches[{i}] has dtype {batch.dtype}; pass real rows")
            if batch.ndim != 2 or batch.shape[1] != self.d:
                raise ShapeError(
                    f"grad_batches[{i}] must have shape (n_b, {self.d}); got {tuple(batch.shape)}")
            g = batch.detach()
        else:
            g = torch.from_numpy(as_points(batch, name=f"grad_batches[{i}]", min_rows=0,
                                           dim=self.d))
        if self._bases is None:
            self._setup(g.device)
        return g.to(device=self._bases.device, dtype=self.precision.dtype)

    def add(self, batch: Any, index: Any = None) -> None:
        """Add one batch of rows ``(n_b, d)``; ``index`` ``(n_b,)``: each row's group in 0..L-1."""
        import torch

        i = len(self._sums)
        g = self._batch(i, batch)
        n = int(g.shape[0])
        L = self.n_groups
        if index is None:
            if L != 1:
                raise ValidationError(f"this stream has {L} groups; pass each row's group index")
            self._sums.append(self._ungrouped(g).reshape(-1, self.r).sum(1))
            self._traces.append((g * g).sum())
            self._rows.append(n)
            return
        idx = torch.as_tensor(index, device=g.device)
        if idx.shape != (n,):
            raise ShapeError(f"group_batches[{i}] must hold one label per row, shape ({n},); "
                             f"got {tuple(idx.shape)}")
        idx = idx.to(torch.int64)
        sums, counts = _grouped_energy_sums(g, self._bases, idx, L, with_counts=True)
        self._sums.append(sums.reshape(L, -1, self.r).sum(2))
        self._traces.append(_group_row_sums((g * g).sum(1), idx, L))
        self._rows.append(counts)

    def _ungrouped(self, g):
        """Projected energies of every basis column over all rows: ``(M,)``."""
        M = self._bases.shape[1]
        n, d = g.shape
        gc = g.to(self._bases_c.dtype)
        if n * d * d + d * d * M < n * d * M:  # via the batch's Gram matrix, when cheaper
            S = (gc.T @ gc).to(self._bases.dtype)
            return ((S @ self._bases) * self._bases).sum(0)
        return ((gc @ self._bases_c).to(self._bases.dtype) ** 2).sum(0)

    @property
    def n_batches(self) -> int:
        """Batches added so far."""
        return len(self._sums)

    def finish(self) -> list[BatchEnergies]:
        """One float64 host :class:`BatchEnergies` per group (one transfer for all batches)."""
        import torch

        if not self._sums:
            raise InsufficientSamplesError(
                "grad_batches is empty; pass at least one batch of rows")
        B, L = len(self._sums), self.n_groups
        # (B, L, 1 + K + Kf), (B, L), (B, L): one transfer each
        sums = torch.stack(self._sums).to("cpu", torch.float64).numpy().reshape(B, L, -1)
        traces = torch.stack(self._traces).to("cpu", torch.float64).numpy().reshape(B, L)
        rows = np.asarray(self._rows, dtype=np.int64).reshape(B, L)  # host ints already
        bad = np.flatnonzero(~np.isfinite(traces).all(axis=1))
        if bad.size:
            from tangentlab.errors import NonFiniteError

            raise NonFiniteError(f"grad_batches[{int(bad[0])}] holds NaN or Inf (or rows whose "
                                 "squares overflow); repair that batch")
        K = self.K
        return [BatchEnergies(
            tangent=np.ascontiguousarray(sums[:, j, 0]),
            controls=np.ascontiguousarray(sums[:, j, 1:1 + K]),
            trace=np.ascontiguousarray(traces[:, j]), rows=np.ascontiguousarray(rows[:, j]),
            d=self.d, r=self.r,
            full=np.ascontiguousarray(sums[:, j, 1 + K:]) if self.Kf else None)
            for j in range(self.n_groups)]


class EnergyStreamGroup:
    """Several :class:`EnergyStream` over the same rows, with one projection per batch.

    ``measure`` tests two proxies (fixed and refit) on the same gradient rows, each with its own
    complement pool and the *same* full-space pool (it depends only on (d, r) and the seed).
    Added one by one, each stream would form the batch's group Gram matrices again and project
    the shared pool twice. :meth:`add` forms them once and projects every stream's ``[Q,
    controls]`` and each distinct full-space pool (the same array object) once, then hands each
    stream its own columns: every stream ends exactly as if it had been added alone, up to the
    rounding of one matrix product (its :meth:`EnergyStream.finish` is unchanged).

    ``streams``: a non-empty sequence of fresh streams with equal ``d``, ``r`` and ``n_groups``.
    """

    def __init__(self, streams):
        self.streams = list(streams)
        if not self.streams:
            raise ValidationError("EnergyStreamGroup needs at least one stream")
        first = self.streams[0]
        shape = (first.d, first.r, first.n_groups)
        for s in self.streams:
            if (s.d, s.r, s.n_groups) != shape:
                raise ShapeError("every stream of a group needs the same d, r and n_groups")
            if s._proj32:
                raise ValidationError("a group projects in the statistics' dtype; build its "
                                      "streams without proj_dtype='float32'")
        self._bases = None
        self._columns: list = []

    def _setup(self, device) -> None:
        import torch

        blocks, columns, shared, n = [], [], {}, 0
        for s in self.streams:
            if s._bases is None:
                s._setup(device)
            r, own = s.r, (1 + s.K) * s.r
            blocks.append(s._bases[:, :own])
            idx = list(range(n // r, (n + own) // r))
            n += own
            if s.Kf:
                if s._full_id not in shared:
                    shared[s._full_id] = n // r
                    blocks.append(s._bases[:, own:])
                    n += s.Kf * r
                start = shared[s._full_id]
                idx += list(range(start, start + s.Kf))
            columns.append(torch.as_tensor(idx, device=device))
        self._bases = torch.cat(blocks, dim=1)
        self._columns = columns

    def add(self, batch: Any, index: Any = None) -> None:
        """Add one batch ``(n_b, d)`` to every stream (``index`` as in :meth:`EnergyStream.add`)."""
        import torch

        first = self.streams[0]
        g = first._batch(first.n_batches, batch)
        if self._bases is None:
            self._setup(g.device)
        r, L, n = first.r, first.n_groups, int(g.shape[0])
        if index is None:
            if L != 1:
                raise ValidationError(f"this stream has {L} groups; pass each row's group index")
            idx = torch.zeros(n, dtype=torch.int64, device=g.device)
        else:
            idx = torch.as_tensor(index, device=g.device).to(torch.int64)
            if idx.shape != (n,):
                raise ShapeError(f"group_batches[{first.n_batches}] must hold one label per "
                                 f"row, shape ({n},); got {tuple(idx.shape)}")
        sums, counts = _grouped_energy_sums(g, self._bases, idx, L, with_counts=True)
        sums = sums.reshape(L, -1, r).sum(2)  # (L, distinct subspaces)
        # the traces as EnergyStream.add sums them (bucketed, or one sum over all rows)
        traces = (_group_row_sums((g * g).sum(1), idx, L) if index is not None
                  else (g * g).sum())
        for s, cols in zip(self.streams, self._columns, strict=True):
            s._sums.append(sums.index_select(1, cols) if index is not None
                           else sums[0].index_select(0, cols))
            s._traces.append(traces)
            s._rows.append(counts if index is not None else n)


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
            any real dtype, any device: computed there, :class:`EnergyStream`), or one
            ``(B, n_b, d)`` array.
        full_controls: optional ``(K_f, d, r)`` full-space controls (e.g.
            ``random_subspaces(d, r, 200, seed)``), projected in the same pass; their energies go
            to ``BatchEnergies.full`` and give :func:`batch_control_test` its p-value.
        dtype: precision of the projection ``g @ [Q, controls]``: ``"float64"`` (default: the
            statistics' dtype, :mod:`tangentlab.measure.precision`) or ``"float32"`` (about
            twice as fast on CPU; squares and sums are still accumulated in the statistics'
            dtype, relative error about 1e-7 per batch).

    Cost per batch: ``n_b d (K + 1) r`` multiply-adds (or ``n_b d^2 + d^2 (K + 1) r`` when that
    is smaller; ``benchmarks/cost_model.py`` counts both); measured 5.2 s for 64 batches of 128 rows at d = 2048, r = 8, K = 200 on one
    loaded core (float64). Memory ``O(B K)`` for the result (100 KB there) plus the pool and one
    batch (about 90 MB peak there), against 2 GB for 64 per-batch ``(d, d)`` float64 sums.
    """
    if dtype not in ("float64", "float32"):
        raise ValidationError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    stream = EnergyStream(Q, controls, full_controls=full_controls,
                          proj_dtype="float32" if dtype == "float32" else None)
    for batch in grad_batches:
        stream.add(batch)
    return stream.finish()[0]


def _group_row_sums(x, idx, n_groups: int):
    """Per-group row sums: index_add_ in float64, a tree reduction in float32 (docs/scale.md)."""
    import torch

    if x.dtype == torch.float64:
        return x.new_zeros((n_groups, *x.shape[1:])).index_add_(0, idx, x)
    counts = torch.bincount(idx, minlength=n_groups).tolist()
    xs = x.index_select(0, torch.argsort(idx, stable=True))
    return torch.stack([part.sum(0) for part in torch.split(xs, counts)])


def _grouped_energy_sums(g, bases, inv, n_groups: int, *, with_counts: bool = False):
    """Σ over the rows of each group of the squared projections on every basis column.

    ``g``: (n, d) tensor; ``bases``: (d, M) tensor (same device and dtype); ``inv``: (n,) int64
    tensor (or array) of the group index of each row. Returns an (n_groups, M) tensor on g's
    device. Takes the cheaper of two routes, by multiply-adds: project every row (n·d·M) or
    project each group's Gram matrix GⱼᵀGⱼ (n·d² + L·d²·M for the L groups present; the
    groups' rows come from a stable sort); they agree up to float rounding. One small host read
    per batch: the ``n_groups`` group sizes (returned too, as a list, with ``with_counts``).
    """
    import torch

    n, d = g.shape
    M = bases.shape[1]
    idx = torch.as_tensor(inv, device=g.device).to(torch.int64)
    counts = torch.bincount(idx, minlength=n_groups).tolist()
    n_present = sum(1 for c in counts if c)
    if n * d * d + n_present * d * d * M >= n * d * M:
        e = (g @ bases) ** 2  # (n, M)
        out = _group_row_sums(e, idx, n_groups)
        return (out, counts) if with_counts else out
    order = torch.argsort(idx, stable=True)
    present, grams, start = [], [], 0
    for j, c in enumerate(counts):
        if c:
            part = g.index_select(0, order[start:start + c])
            grams.append(part.T @ part)
            present.append(j)
        start += c
    out = g.new_zeros((n_groups, M))
    if present:
        L = len(present)
        G = torch.stack(grams)  # (L, d, d)
        proj = (G.reshape(L * d, d) @ bases).reshape(L, d, M)
        out[torch.as_tensor(present, device=g.device)] = (proj * bases[None]).sum(1)
    return (out, counts) if with_counts else out


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
    and remain the resampling unit). A label no batch holds does not appear. (``measure`` feeds
    an :class:`EnergyStream` with bucket indices directly, on the device of the rows.)
    """
    batches = list(grad_batches)
    labs = []
    for i, (batch, grp) in enumerate(zip(batches, group_batches, strict=True)):
        lab = np.asarray(grp.detach().cpu().numpy() if hasattr(grp, "detach") else grp)
        n = int(batch.shape[0]) if hasattr(batch, "shape") else len(batch)
        if lab.shape != (n,):
            raise ShapeError(
                f"group_batches[{i}] must hold one label per row, shape ({n},); got {lab.shape}"
            )
        labs.append(lab)
    if not batches:
        raise InsufficientSamplesError("grad_batches is empty; pass at least one batch of rows")
    uniq = np.unique(np.concatenate(labs)) if labs else np.zeros(0)
    stream = EnergyStream(Q, controls, full_controls=full_controls, n_groups=max(len(uniq), 1))
    for batch, lab in zip(batches, labs, strict=True):
        stream.add(batch, np.searchsorted(uniq, lab))
    got = stream.finish()
    return {u.item() if hasattr(u, "item") else u: got[j] for j, u in enumerate(uniq)}

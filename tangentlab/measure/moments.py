"""Streaming float64 moment accumulators, optionally keyed by a group label per row.

:class:`MomentAccumulator` keeps, for all rows and for each group: the count N, the mean and the
*centred* co-moment M2 = sum (x - mean)(x - mean)^T, merged batch by batch with the pairwise
formula of Chan, Golub & LeVeque (1979). Every batch is centred on its own mean before its
product is formed, so there is no cancellation of ``sum x x^T - N mean mean^T``: the error in a
direction is relative to that direction's own variance, not to the trace or the mean. From it:

- ``second_moment()`` = sum x x^T / N (uncentred; the C of the energy tests);
- ``covariance(ddof=1)`` = M2 / (N - ddof);
- ``outer_sum()`` = sum x x^T (unnormalised; stack these per batch for the batch bootstrap of
  :func:`tangentlab.measure.control_test`).

Outer products run in torch on the device of the rows (a torch batch stays where it is), in
float64, or in float32 with compensated merges on a device without float64
(:mod:`tangentlab.measure.precision`); numpy input works too. Queries return float64 numpy.

Example::

    >>> import numpy as np
    >>> from tangentlab.measure import MomentAccumulator
    >>> acc = MomentAccumulator(3)
    >>> acc.update(np.ones((4, 3)), groups=[0, 0, 1, 1])
    >>> acc.count, acc.group_count(1), acc.second_moment().shape
    (4, 2, (3, 3))
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from tangentlab.errors import (
    EmptyGroupError,
    InsufficientSamplesError,
    ShapeError,
    UnknownNameError,
    ValidationError,
)
from tangentlab.measure._validate import check_positive_int
from tangentlab.measure.precision import to_host64
from tangentlab.typing import ArrayLike

__all__ = ["MomentAccumulator", "outer_product_sum"]


def _as_rows_tensor(rows: Any, dim: int, dtype=None, device=None):
    """(n, dim) torch tensor from numpy/torch/list input; shape and dtype checked.

    A torch tensor stays on its device (or moves to ``device`` when given) and is cast to
    ``dtype`` (default float64); numpy input becomes a float64 CPU tensor first. Finiteness is
    checked afterwards on the batch statistics (O(d^2), see :func:`_check_finite`), which is
    much cheaper than an elementwise pass over a large batch.
    """
    import torch

    from tangentlab.measure._validate import as_points

    dtype = torch.float64 if dtype is None else dtype
    if isinstance(rows, torch.Tensor):
        if rows.is_complex() or rows.dtype == torch.bool:
            from tangentlab.errors import DTypeError

            raise DTypeError(f"rows have dtype {rows.dtype}; pass real floating-point rows")
        t = rows.detach().to(device=rows.device if device is None else device, dtype=dtype)
        if t.ndim != 2 or t.shape[1] != dim:
            raise ShapeError(f"rows must have shape (n, {dim}); got {tuple(t.shape)}")
        return t
    arr = as_points(rows, name="rows", min_rows=0, dim=dim, check_finite=False)
    return torch.from_numpy(arr).to(device="cpu" if device is None else device, dtype=dtype)


def _batch_stats(t):
    """(count, mean (d,), centred co-moment (d, d)) of a batch, or None for an empty batch."""
    nb = int(t.shape[0])
    if nb == 0:
        return None
    mb = t.mean(dim=0)
    # Always centre the batch first. The uncentred shortcut S - n m m^T (used before) has a
    # rounding error of about eps * n |m|^2 in *every* direction: bounded relative to the trace,
    # but a direction whose variance is tiny next to |m|^2 loses all its digits (a test with a
    # 1e-12 variance under a mean of norm 50 saw 27% error). Centring costs one subtraction
    # beside the same (d, d) product, and its error is relative to each direction's own spread.
    xc = t - mb
    return nb, mb, xc.T @ xc


def _check_finite(stats, t) -> None:
    """Raise NonFiniteError (nothing accumulated yet) if a batch held NaN/Inf or overflowed."""
    import torch

    if stats is None:
        return
    _, mb, m2b = stats
    if bool(torch.isfinite(mb).all()) and bool(torch.isfinite(m2b.diagonal()).all()):
        return
    from tangentlab.errors import NonFiniteError

    bad = (~torch.isfinite(t)).any(dim=1).nonzero().flatten()
    if bad.numel():
        raise NonFiniteError(
            f"rows hold NaN or Inf in {bad.numel()} row(s), first row {int(bad[0])}; drop or "
            "repair them before accumulating"
        )
    raise NonFiniteError(
        f"rows are so large that their squares overflow {str(t.dtype).replace('torch.', '')}; "
        "rescale them before accumulating"
    )


def outer_product_sum(rows: ArrayLike) -> np.ndarray:
    """Unnormalised ``sum_i x_i x_i^T`` of rows ``(n, d)`` in float64: shape ``(d, d)``.

    One such matrix per batch, stacked to ``(B, d, d)``, is the ``batches`` input of
    :func:`tangentlab.measure.control_test`.
    """
    import torch

    from tangentlab.measure._validate import as_points

    t = torch.from_numpy(as_points(rows, name="rows", min_rows=0))
    return (t.T @ t).numpy()


class _Stats:
    """Count, mean (d,) and centred co-moment M2 (d, d) as torch tensors on one device.

    float64 (``cm``/``cm2`` None), or float32 with a Neumaier compensation term for the mean and
    M2 (``cm``, ``cm2``), so that merging B batches keeps about one float32 rounding of error
    instead of B of them. Zero rows: the tensors are None until the first batch.
    """

    __slots__ = ("n", "mean", "m2", "cm", "cm2", "compensated")

    def __init__(self, compensated: bool = False):
        self.n = 0
        self.mean = self.m2 = self.cm = self.cm2 = None
        self.compensated = compensated

    def add(self, stats) -> None:
        if stats is not None:
            self._combine(*stats)

    def _combine(self, nb: int, mb, m2b) -> None:
        na = self.n
        if na == 0:
            self.n, self.mean, self.m2 = nb, mb.clone(), m2b.clone()
            if self.compensated:
                self.cm, self.cm2 = mb.new_zeros(mb.shape), m2b.new_zeros(m2b.shape)
            return
        n = na + nb
        if not self.compensated:
            delta = mb - self.mean
            self.mean = self.mean + delta * (nb / n)
            self.m2 = self.m2 + m2b + (na * nb / n) * delta[:, None] * delta[None, :]
            self.n = n
            return
        delta = (mb - self.mean) - self.cm
        self.mean, self.cm = _neumaier(self.mean, self.cm, delta * (nb / n))
        self.m2, self.cm2 = _neumaier(self.m2, self.cm2, m2b)
        self.m2, self.cm2 = _neumaier(self.m2, self.cm2,
                                      (na * nb / n) * delta[:, None] * delta[None, :])
        self.n = n

    def host_values(self):
        """(n, mean, m2) as new float64 CPU tensors (the compensation folded in)."""
        if self.n == 0:
            return 0, None, None
        mean, m2 = to_host64(self.mean), to_host64(self.m2)
        if self.compensated:
            mean = mean + to_host64(self.cm)
            m2 = m2 + to_host64(self.cm2)
        return self.n, mean, m2

    def merge(self, other: _Stats) -> None:
        if not other.n:
            return
        if self.n == 0 and other.compensated == self.compensated:
            self.n, self.mean, self.m2 = other.n, other.mean.clone(), other.m2.clone()
            if self.compensated:
                self.cm, self.cm2 = other.cm.clone(), other.cm2.clone()
            return
        n, mean, m2 = other.host_values() if other.compensated else (other.n, other.mean,
                                                                    other.m2)
        if self.n:
            mean, m2 = mean.to(self.mean), m2.to(self.m2)
        self._combine(n, mean, m2)

    def copy(self) -> _Stats:
        new = _Stats.__new__(_Stats)
        new.n, new.compensated = self.n, self.compensated
        new.mean, new.m2, new.cm, new.cm2 = (None if x is None else x.clone()
                                             for x in (self.mean, self.m2, self.cm, self.cm2))
        return new

    def to_host(self) -> _Stats:
        new = _Stats(False)
        new.n, new.mean, new.m2 = self.host_values()
        return new

    @property
    def on_host64(self) -> bool:
        import torch

        return not self.compensated and (self.mean is None or (
            self.mean.device.type == "cpu" and self.mean.dtype == torch.float64))


def _neumaier(s, c, x):
    """One Neumaier-compensated step ``s + x``: returns the new (sum, compensation)."""
    import torch

    t = s + x
    return t, c + torch.where(s.abs() >= x.abs(), (s - t) + x, (x - t) + s)


class MomentAccumulator:
    """Streaming count, mean, second moment and covariance of rows of dimension ``dim``.

    Args:
        dim: the row dimension d.
        groups: optional iterable of allowed group labels (hashable: ints, strings, ...). If given,
            rows labelled with anything else raise UnknownNameError, and the declared labels are
            reported by :attr:`group_labels` in that order even before they receive rows. If None,
            any label is accepted and groups appear in first-seen order.

    Rows given to :meth:`update` without labels count towards the total only; labelled rows count
    towards the total and their group. Every statistic is float64 and returned as numpy.
    Queries for a group that has no rows raise EmptyGroupError; queries on an accumulator with no
    rows at all raise InsufficientSamplesError.
    """

    def __init__(self, dim: int, groups: Iterable[Hashable] | None = None, *,
                 stats_dtype: str | None = None):
        self.dim = check_positive_int(dim, "dim")
        self._declared: tuple | None = None
        self._request = stats_dtype
        self._precision = None  # resolved on the first batch, from its device
        self._device = None
        self._total = _Stats()
        self._groups: dict[Hashable, _Stats] = {}
        if groups is not None:
            labels = [self._key(g) for g in groups]
            if len(set(labels)) != len(labels):
                raise ValidationError(f"groups has duplicate labels: {labels!r}; pass each once")
            self._declared = tuple(labels)
            for g in labels:
                self._groups[g] = _Stats()

    @staticmethod
    def _key(label: Any) -> Hashable:
        if isinstance(label, np.generic):
            label = label.item()
        try:
            hash(label)
        except TypeError as exc:
            raise ValidationError(f"group label {label!r} is not hashable") from exc
        return label

    # -- feeding -------------------------------------------------------------------------------
    def _new_stats(self) -> _Stats:
        return _Stats(self._precision is not None and self._precision.compensated)

    def _rows(self, rows: Any):
        """The batch as a tensor in the statistics' dtype on the accumulator's device."""
        if self._precision is None:
            import torch

            from tangentlab.measure.precision import resolve_precision

            device = rows.device if isinstance(rows, torch.Tensor) else "cpu"
            self._precision = resolve_precision(self._request, device)
            self._device = device
            for st in (self._total, *self._groups.values()):
                if st.n == 0:
                    st.compensated = self._precision.compensated
        return _as_rows_tensor(rows, self.dim, self._precision.dtype, self._device)

    @property
    def precision(self):
        """The :class:`~tangentlab.measure.precision.StatsPrecision` in use (None before rows)."""
        return self._precision

    def update(self, rows: ArrayLike, groups: Any = None) -> None:
        """Add rows ``(n, dim)`` (numpy or torch, any real dtype), with optional labels ``(n,)``.

        A torch batch is accumulated on its own device (the first batch fixes the device and the
        precision: :func:`~tangentlab.measure.precision.resolve_precision`).
        """
        t = self._rows(rows)
        n = int(t.shape[0])
        if groups is None:
            stats = _batch_stats(t)
            _check_finite(stats, t)
            self._total.add(stats)
            return
        if hasattr(groups, "detach"):
            groups = groups.detach().cpu().numpy()
        labels = np.asarray(groups)
        if labels.ndim != 1 or labels.shape[0] != n:
            raise ShapeError(
                f"groups must hold one label per row, shape ({n},); got shape {labels.shape}"
            )
        if labels.dtype.kind in "fc" and labels.size and not np.all(np.isfinite(labels)):
            raise ValidationError("groups holds NaN/Inf labels; pass integer or string labels")
        uniq, inverse = np.unique(labels, return_inverse=True)
        keys = [self._key(lab) for lab in uniq]
        if self._declared is not None:
            unknown = [k for k in keys if k not in self._groups]
            if unknown:
                raise UnknownNameError(
                    f"group label(s) {unknown!r} are not among the declared groups "
                    f"{self._declared!r}"
                )
        import torch

        stats = _batch_stats(t)
        _check_finite(stats, t)
        self._total.add(stats)
        for j, key in enumerate(keys):
            if key not in self._groups:
                self._groups[key] = self._new_stats()
            idx = torch.from_numpy(np.flatnonzero(inverse == j)).to(t.device)
            self._groups[key].add(_batch_stats(t.index_select(0, idx)))

    def update_indexed(self, rows: Any, index: Any) -> None:
        """Add rows ``(n, dim)`` whose group is given by position: ``index`` ``(n,)`` integers.

        ``index[i]`` is the position of row i's label in :attr:`group_labels` (declared groups
        only). The grouping runs in torch on the rows' device: a stable sort of the index and one
        slice per group (one small host read of the L group counts per batch), the same rows in
        the same order as :meth:`update` with the labels themselves.
        """
        import torch

        if self._declared is None:
            raise ValidationError("update_indexed needs declared groups (MomentAccumulator(d, "
                                  "groups=[...])); use update() with labels otherwise")
        t = self._rows(rows)
        n = int(t.shape[0])
        idx = torch.as_tensor(index, device=t.device)
        if idx.shape != (n,) or idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise ShapeError(f"index must hold one integer group position per row, shape ({n},); "
                             f"got {idx.dtype} {tuple(idx.shape)}")
        L = len(self._declared)
        stats = _batch_stats(t)
        _check_finite(stats, t)
        if n == 0:
            return
        try:
            counts = torch.bincount(idx, minlength=L).tolist()
        except RuntimeError:  # a negative position
            counts = []
        if len(counts) != L:
            raise UnknownNameError(f"index holds group positions outside 0..{L - 1}")
        self._total.add(stats)
        order = torch.argsort(idx, stable=True)
        start = 0
        for j, c in enumerate(counts):
            if c:
                self._groups[self._declared[j]].add(
                    _batch_stats(t.index_select(0, order[start:start + c])))
            start += c

    def merge(self, other: MomentAccumulator) -> MomentAccumulator:
        """Fold ``other`` into this accumulator (in place) and return ``self``.

        The result equals one accumulator fed the rows of both (up to float rounding).
        """
        if not isinstance(other, MomentAccumulator):
            raise ValidationError(f"can only merge a MomentAccumulator, not {type(other).__name__}")
        if other.dim != self.dim:
            raise ShapeError(f"cannot merge dim {other.dim} into dim {self.dim}")
        if self._declared is not None:
            unknown = [g for g in other._groups if g not in self._groups]
            if unknown:
                raise UnknownNameError(
                    f"groups {unknown!r} of the other accumulator are not declared here "
                    f"({self._declared!r})"
                )
        if self._precision is None and other._precision is not None:
            self._precision, self._device = other._precision, other._device
            for st in (self._total, *self._groups.values()):
                if st.n == 0:
                    st.compensated = other._precision.compensated
        self._total.merge(other._total)
        for g, st in other._groups.items():
            if g not in self._groups:
                self._groups[g] = self._new_stats()
            self._groups[g].merge(st)
        return self

    def copy(self) -> MomentAccumulator:
        """Independent deep copy."""
        new = MomentAccumulator.__new__(MomentAccumulator)
        new.dim = self.dim
        new._declared = self._declared
        new._request, new._precision, new._device = self._request, self._precision, self._device
        new._total = self._total.copy()
        new._groups = {g: st.copy() for g, st in self._groups.items()}
        return new

    def to_host(self) -> MomentAccumulator:
        """This accumulator as float64 on the CPU (itself when it already is; else a new one).

        A float32-compensated accumulator has its compensation folded in, in float64. The
        measurement calls it once per checkpoint: everything downstream reads host float64.
        """
        if all(st.on_host64 for st in (self._total, *self._groups.values())):
            return self
        new = self.copy()
        new._total = self._total.to_host()
        new._groups = {g: st.to_host() for g, st in self._groups.items()}
        new._device = "cpu"
        return new

    # -- queries -------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Total number of rows seen."""
        return self._total.n

    @property
    def group_labels(self) -> tuple:
        """Declared labels (declaration order), else the labels seen so far (first-seen order)."""
        return self._declared if self._declared is not None else tuple(self._groups)

    def group_count(self, g: Hashable) -> int:
        """Rows seen in group ``g`` (0 for a declared group with no rows yet)."""
        key = self._key(g)
        if key in self._groups:
            return self._groups[key].n
        if self._declared is not None:
            raise UnknownNameError(f"group {key!r} is not declared; declared: {self._declared!r}")
        return 0

    def _stats(self, group: Hashable | None, need: int = 1) -> _Stats:
        if group is None:
            st = self._total
            if st.n < need:
                raise InsufficientSamplesError(
                    f"the accumulator has {st.n} row(s) but this statistic needs at least {need}; "
                    "call update() with more rows first"
                )
            return st
        key = self._key(group)
        if key not in self._groups:
            if self._declared is not None:
                raise UnknownNameError(
                    f"group {key!r} is not declared; declared: {self._declared!r}"
                )
            raise EmptyGroupError(
                f"group {key!r} has no rows; groups with rows: {tuple(self._groups)!r}"
            )
        st = self._groups[key]
        if st.n == 0:
            raise EmptyGroupError(f"group {key!r} has no rows yet; feed it rows before asking")
        if st.n < need:
            raise InsufficientSamplesError(
                f"group {key!r} has {st.n} row(s) but this statistic needs at least {need}"
            )
        return st

    def mean(self, group: Hashable | None = None) -> np.ndarray:
        """Mean row, shape ``(dim,)``."""
        _, mean, _ = self._stats(group).host_values()
        return mean.numpy().copy()

    def outer_sum(self, group: Hashable | None = None) -> np.ndarray:
        """Unnormalised ``sum x x^T``, shape ``(dim, dim)``."""
        n, mean, m2 = self._stats(group).host_values()
        s = m2 + n * mean[:, None] * mean[None, :]
        return (0.5 * (s + s.T)).numpy().copy()

    def second_moment(self, group: Hashable | None = None) -> np.ndarray:
        """Uncentred second moment ``sum x x^T / N``, shape ``(dim, dim)``."""
        n, mean, m2 = self._stats(group).host_values()
        s = m2 / n + mean[:, None] * mean[None, :]
        return (0.5 * (s + s.T)).numpy().copy()

    def covariance(self, group: Hashable | None = None, ddof: int = 1) -> np.ndarray:
        """Covariance ``sum (x - mean)(x - mean)^T / (N - ddof)``; ``ddof=1`` (unbiased) by default.

        Needs ``N > ddof`` rows, else InsufficientSamplesError.
        """
        if ddof not in (0, 1):
            raise ValidationError(f"ddof must be 0 or 1, got {ddof!r}")
        n, _, m2 = self._stats(group, need=ddof + 1).host_values()
        return (m2 / (n - ddof)).numpy().copy()

    def __repr__(self) -> str:
        return (
            f"MomentAccumulator(dim={self.dim}, count={self.count}, "
            f"groups={len(self.group_labels)})"
        )

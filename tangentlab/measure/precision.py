"""The statistics' precision: float64 where the device has it, compensated float32 where not.

The measurement's statistics (moment accumulators, per-batch energies, per-token sums) run in
torch on the device of the activations. :func:`resolve_precision` chooses their dtype:

- ``"auto"`` (the default): float64 on a device that supports it (CPU, CUDA), float32 with
  compensated summation on one that does not (Apple MPS);
- ``"float64"``: float64 (refused on MPS, which has no float64);
- ``"float32-compensated"``: float32 products, and every running sum across batches kept as a
  (sum, compensation) pair (Neumaier's variant of Kahan summation, :class:`CompensatedSum`), so
  the error of a sum of B terms stays about one float32 rounding instead of growing with B.
  Forceable on the CPU, which is how the tests check it against float64.

Per-batch scalars (the energies of a batch) are formed in the statistics' dtype and sent to the
host as float64 once per checkpoint; everything downstream (bootstrap, intervals) is float64.

:func:`precision_scope` sets the precision for the code inside it (the ``measure`` protocol
wraps a measurement in it with the config's ``stats_dtype``); :func:`current_request` reads it.

Example::

    >>> from tangentlab.measure.precision import resolve_precision
    >>> resolve_precision("auto", "cpu").name, resolve_precision("auto", "mps").name
    ('float64', 'float32-compensated')
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tangentlab.errors import ConfigError

__all__ = ["STATS_DTYPES", "StatsPrecision", "resolve_precision", "supports_float64",
           "precision_scope", "current_request", "CompensatedSum", "to_host64"]

#: The accepted values of the ``stats_dtype`` measure key.
STATS_DTYPES = ("auto", "float64", "float32-compensated")

_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("stats_dtype", default="auto")


def _device_type(device: Any) -> str:
    return str(getattr(device, "type", device)).split(":")[0]


def supports_float64(device: Any) -> bool:
    """Whether a torch device (or its string, e.g. ``"cuda:1"``) computes in float64.

    Every device but Apple's MPS does.
    """
    return _device_type(device) != "mps"


@dataclass(frozen=True)
class StatsPrecision:
    """The resolved precision of the statistics on one device.

    Attributes:
        name: ``"float64"`` or ``"float32-compensated"``.
        requested: what was asked for (one of :data:`STATS_DTYPES`).
        device: the device type (``"cpu"``, ``"cuda"``, ``"mps"``).
    """

    name: str
    requested: str
    device: str

    @property
    def compensated(self) -> bool:
        """Whether running sums keep a compensation term (float32-compensated)."""
        return self.name == "float32-compensated"

    @property
    def dtype(self):
        """The torch dtype of the statistics (float64 or float32)."""
        import torch

        return torch.float32 if self.compensated else torch.float64

    def manifest(self) -> dict[str, str]:
        """The record written to a measurement's manifest."""
        return {"dtype": self.name, "requested": self.requested, "device": self.device,
                "summation": ("Neumaier-compensated float32 running sums; per-batch scalars "
                              "float64 on the host" if self.compensated else
                              "float64 throughout")}


def resolve_precision(requested: str | None, device: Any) -> StatsPrecision:
    """The precision for ``requested`` (one of :data:`STATS_DTYPES`, None = the scope's) on a device.

    Raises ConfigError for an unknown name, or for float64 on a device without it.
    """
    req = current_request() if requested is None else str(requested)
    if req not in STATS_DTYPES:
        raise ConfigError(f"stats_dtype must be one of {', '.join(STATS_DTYPES)}; got {req!r}")
    dev = _device_type(device)
    has64 = supports_float64(dev)
    if req == "float64" and not has64:
        raise ConfigError(f"stats_dtype = 'float64' but device {dev!r} has no float64; use "
                          "'auto' or 'float32-compensated'")
    name = "float64" if (req == "float64" or (req == "auto" and has64)) else "float32-compensated"
    return StatsPrecision(name=name, requested=req, device=dev)


def current_request() -> str:
    """The ``stats_dtype`` requested by the innermost :func:`precision_scope` (else ``"auto"``)."""
    return _REQUEST.get()


@contextlib.contextmanager
def precision_scope(requested: str, device: Any = None) -> Iterator[None]:
    """Run the code inside with ``stats_dtype = requested``.

    ConfigError at once if the name is unknown, or (with ``device``) if the device cannot run it.
    """
    if requested not in STATS_DTYPES:
        raise ConfigError(
            f"stats_dtype must be one of {', '.join(STATS_DTYPES)}; got {requested!r}")
    if device is not None:
        resolve_precision(requested, device)
    token = _REQUEST.set(requested)
    try:
        yield
    finally:
        _REQUEST.reset(token)


def to_host64(t):
    """A tensor as a new float64 CPU tensor, copied off a CUDA device through page-locked memory.

    On an H200 host a plain ``.to("cpu")`` of a 128 MiB tensor into fresh pageable memory ran at
    1.1 GB/s, the same copy into a freshly allocated page-locked buffer at 52 GB/s
    (``docs/scale.md``); at d = 4096 the (d, d) moments' trip to the host was most of a
    checkpoint's statistics. Only the ``pin_memory`` flag depends on the device: on the CPU (and
    MPS) the buffer is ordinary memory and the copy a plain one. A float64 CUDA tensor comes back
    *as* the page-locked buffer, so page-locked host memory of the moments' size (about 3 GiB for
    4 sites at d = 4096) is held while the host reads them; torch's host caching allocator reuses
    it at the next checkpoint.
    """
    import torch

    buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.device.type == "cuda")
    buf.copy_(t.detach())
    return buf.to(torch.float64)


class CompensatedSum:
    """A running sum of tensors of one shape, optionally with a Neumaier compensation term.

    :meth:`host` gives the sum as a float64 CPU tensor, the compensation folded in there (a device
    without float64 never forms a float64 tensor). Uncompensated (float64) it is a plain sum.

    Args:
        like: a tensor whose shape, dtype and device the sum takes (its values are ignored).
        compensated: keep the compensation term.
    """

    __slots__ = ("s", "c")

    def __init__(self, like, compensated: bool):
        import torch

        self.s = torch.zeros_like(like)
        self.c = torch.zeros_like(like) if compensated else None

    def add(self, x) -> None:
        """Add ``x`` (same shape) to the sum, in place."""
        if self.c is None:
            self.s = self.s + x
            return
        import torch

        t = self.s + x
        big = self.s.abs() >= x.abs()
        self.c = self.c + torch.where(big, (self.s - t) + x, (x - t) + self.s)
        self.s = t

    def index_add(self, index, x) -> None:
        """Add rows ``x`` ``(n, ...)`` into rows ``index`` ``(n,)`` of the sum (in row order)."""
        if self.c is None:
            self.s = self.s.index_add(0, index, x)
            return
        import torch

        # one compensated step per batch: gather this batch's per-row totals, then add them
        part = torch.zeros_like(self.s).index_add(0, index, x)
        self.add(part)

    def host(self):
        """The sum as a float64 CPU tensor (compensation folded in)."""
        s = to_host64(self.s)
        return s if self.c is None else s + to_host64(self.c)

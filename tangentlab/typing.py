"""Type aliases for the public signatures.

The measurement core accepts numpy arrays, torch tensors and nested sequences of numbers at its
public functions (validated at the boundary, see :mod:`tangentlab.measure._validate`) and returns
numpy arrays or floats. These aliases say so in signatures instead of ``Any``.

Example::

    >>> from tangentlab.typing import ArrayLike
    >>> def rows(x: ArrayLike) -> int: ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

__all__ = ["ArrayLike", "Seed"]

if TYPE_CHECKING:  # pragma: no cover - typing only; torch stays a lazy import at run time
    import numpy as np
    import torch

    #: A numpy array, a torch tensor, or a (nested) sequence of numbers.
    ArrayLike = np.ndarray | torch.Tensor | Sequence[float] | Sequence[Sequence[float]]
    #: A seed: an int, a sequence of ints (numpy SeedSequence entropy) or a numpy Generator.
    Seed = int | Sequence[int] | np.random.Generator
else:
    ArrayLike = "numpy.ndarray | torch.Tensor | Sequence[float]"
    Seed = "int | Sequence[int] | numpy.random.Generator"

"""tangentlab: test the geometric account of anisotropy in language Transformers.

Three pillars share one measurement core:

- :mod:`tangentlab.theory`: sympy derivations that verify themselves and hand out predictions;
- :mod:`tangentlab.synthetic`: manifolds and token models with known tangent spaces;
- :mod:`tangentlab.empirical`: real masked-LM and causal-LM Transformers, their true gradients;
- :mod:`tangentlab.measure`: the core both of the latter use (energy tests, isotropy, proxies);
- :mod:`tangentlab.report`: theory against measurement in one page.

Subpackages are imported on first use, so ``import tangentlab`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tangentlab.errors import TangentlabError

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "TangentlabError",
    "measure",
    "theory",
    "synthetic",
    "empirical",
    "report",
]

_SUBPACKAGES = {"measure", "theory", "synthetic", "empirical", "report"}

if TYPE_CHECKING:  # pragma: no cover
    from tangentlab import empirical, measure, report, synthetic, theory  # noqa: F401


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"tangentlab.{name}")
    raise AttributeError(f"module 'tangentlab' has no attribute {name!r}")

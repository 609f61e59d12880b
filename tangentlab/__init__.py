"""tangentlab: test the geometric account of anisotropy in language Transformers.

Three pillars share one measurement core:

- :mod:`tangentlab.theory`: sympy derivations that verify themselves and hand out predictions;
- :mod:`tangentlab.synthetic`: manifolds and token models with known tangent spaces;
- :mod:`tangentlab.empirical`: real masked-LM and causal-LM Transformers, their true gradients;
- :mod:`tangentlab.measure`: the core both of the latter use (energy tests, isotropy, proxies);
- :mod:`tangentlab.report`: theory against measurement in one page, read from run directories;
- :mod:`tangentlab.pipeline`: the reproduce job that runs all of them (stages in parallel).

:func:`load_results` reads a measurement's headline numbers (one row per model, site and step)
as a pandas DataFrame, the table ``tangentlab summary RUN`` prints.

Subpackages are imported on first use, so ``import tangentlab`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tangentlab._lazy import lazy_exports
from tangentlab._version import __version__
from tangentlab.errors import TangentlabError

_PILLARS = ("measure", "theory", "synthetic", "empirical", "report", "pipeline")
_exports, __getattr__, __dir__ = lazy_exports(
    __name__, {"": _PILLARS, "tangentlab.report.summary": ("load_results",)})
__all__ = ["__version__", "TangentlabError", *_exports]

if TYPE_CHECKING:  # pragma: no cover
    from tangentlab import empirical, measure, pipeline, report, synthetic, theory  # noqa: F401
    from tangentlab.report.summary import load_results  # noqa: F401

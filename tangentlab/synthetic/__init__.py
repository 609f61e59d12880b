"""tangentlab.synthetic: manifolds with known geometry, a frequency-biased token model, toy
models, and five experiments checked against :mod:`tangentlab.theory`.

Public API (loaded lazily, so ``import tangentlab.synthetic`` stays cheap):

- manifolds (:mod:`tangentlab.synthetic.manifolds`): :class:`Manifold`, :class:`Circle`,
  :class:`Helix`, :class:`Sphere`, :class:`FlatTorus`, :class:`TorusOfRevolution`,
  :class:`HyperbolicPlane`, :class:`ProductManifold`, :class:`RandomImmersion`,
  :func:`make_manifold`;
- the token model (:mod:`tangentlab.synthetic.tokens`): :class:`TokenModel`;
- experiments (:mod:`tangentlab.synthetic.experiments`): :func:`names`, :func:`get`,
  :func:`run_experiment`, :class:`ExperimentResult`, :class:`Check`.

Example::

    >>> from tangentlab.synthetic import names
    >>> names()
    ['visibility', 'gradient-ratio', 'amplification', 'proxy-recovery', 'river-valley']
"""

from __future__ import annotations

import importlib

__all__ = [
    "Manifold", "Circle", "Helix", "Sphere", "FlatTorus", "TorusOfRevolution", "HyperbolicPlane",
    "ProductManifold", "RandomImmersion", "make_manifold", "TokenModel",
    "names", "get", "run_experiment", "ExperimentResult", "Check",
]

_LAZY = {
    **{name: "tangentlab.synthetic.manifolds" for name in __all__[:10]},
    "TokenModel": "tangentlab.synthetic.tokens",
    **{name: "tangentlab.synthetic.experiments" for name in __all__[11:]},
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tangentlab.synthetic' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)

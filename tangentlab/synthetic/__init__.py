"""tangentlab.synthetic: manifolds with known geometry, a frequency-biased token model, toy
models, and five experiments checked against :mod:`tangentlab.theory`.

Submodules load lazily (``import tangentlab.synthetic`` stays cheap):

- :mod:`tangentlab.synthetic.manifolds`: :class:`Manifold` and the spaces with ground truth;
- :mod:`tangentlab.synthetic.tokens`: :class:`TokenModel`;
"""

from __future__ import annotations

import importlib

__all__ = [
    "Manifold", "Circle", "Helix", "Sphere", "FlatTorus", "TorusOfRevolution", "HyperbolicPlane",
    "ProductManifold", "RandomImmersion", "make_manifold", "TokenModel",
]

_LAZY = {
    **{name: "tangentlab.synthetic.manifolds" for name in __all__[:10]},
    "TokenModel": "tangentlab.synthetic.tokens",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tangentlab.synthetic' has no attribute {name!r}")

"""tangentlab.synthetic: manifolds with known geometry, a frequency-biased token model, toy
models, and five experiments checked against :mod:`tangentlab.theory`.

Public API (loaded lazily, so ``import tangentlab.synthetic`` stays cheap):

- manifolds (:mod:`tangentlab.synthetic.manifolds`): :class:`Manifold`, :class:`Circle`,
  :class:`Helix`, :class:`Sphere`, :class:`FlatTorus`, :class:`TorusOfRevolution`,
  :class:`HyperbolicPlane`, :class:`ProductManifold`, :class:`RandomImmersion`,
  :func:`make_manifold`;
- the token model (:mod:`tangentlab.synthetic.tokens`): :class:`TokenModel`;
- experiments (:mod:`tangentlab.synthetic.experiments`): :func:`names`, :func:`get`,
  :func:`run_experiment`, :class:`ExperimentResult`, :class:`AgreementCheck`.

Example::

    >>> from tangentlab.synthetic import names
    >>> names()  # doctest: +NORMALIZE_WHITESPACE
    ['visibility', 'gradient-ratio', 'amplification', 'proxy-recovery', 'river-valley',
     'estimator-calibration']
"""

from __future__ import annotations

from tangentlab._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "manifolds": ("Manifold", "Circle", "Helix", "Sphere", "FlatTorus", "TorusOfRevolution",
                  "HyperbolicPlane", "ProductManifold", "RandomImmersion", "make_manifold"),
    "tokens": ("TokenModel",),
    "experiments": ("names", "get", "run_experiment", "ExperimentResult", "AgreementCheck"),
})

"""tangentlab.theory: executable sympy derivations of the geometric account of anisotropy.

Each derivation is registered by name (:func:`names`, :func:`get`); it carries assumptions, steps
derived by sympy, a statement, ``verify(seed)`` (symbolic, numeric and Monte-Carlo checks) and
``predict(quantity, **params)`` (numpy-vectorised). :func:`predict` is the shortcut
``predict(name, quantity, **params)``. See ``docs/theory/index.md`` for every signature.

Importing this package imports sympy and numpy (never torch).
"""

from __future__ import annotations

from tangentlab.theory.derivation import (
    Derivation,
    DerivationCheck,
    Step,
    VerifyReport,
    get,
    names,
    predict,
)

__all__ = ["DerivationCheck", "Derivation", "Step", "VerifyReport", "get", "names", "predict"]

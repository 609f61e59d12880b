"""The one registry style (tangentlab.registry), and the three registries that use it."""

from __future__ import annotations

import pytest

from tangentlab.errors import UnknownNameError
from tangentlab.registry import Registry


def test_a_registry_loads_on_first_use_caches_and_names_the_known_entries():
    made = []
    r = Registry("thing", {"b": "pathlib:PurePosixPath", "a": "pathlib:PureWindowsPath"},
                 make=lambda cls: made.append(cls) or cls("x"), known="choose one of", hint=", or z")
    assert r.names() == ("b", "a") and "a" in r and 3 not in r
    assert r.get("b") is r.get("b") and len(made) == 1
    with pytest.raises(UnknownNameError, match=r"unknown thing 'c'; choose one of: b, a, or z"):
        r.get("c")


def test_theory_synthetic_and_proxies_share_the_style():
    from tangentlab.measure import proxies
    from tangentlab.synthetic import experiments
    from tangentlab.synthetic.experiments import _base
    from tangentlab.theory import derivation

    for reg in (derivation._REGISTRY, _base._REGISTRY, proxies._PROXIES):
        assert isinstance(reg, Registry)
    assert all(experiments.get(n).name == n for n in experiments.names())
    assert experiments.get("visibility") is experiments.get("visibility")
    assert proxies.make_proxy("PCA", n_components=2).__class__ is proxies.PCAProxy
    with pytest.raises(UnknownNameError, match="unknown synthetic experiment 'nope'; known: visibility"):
        experiments.get("nope")

"""The Derivation type, registry, reports, parameter validation (tangentlab/theory/derivation.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tangentlab.errors import UnknownNameError, ValidationError
from tangentlab.theory import Derivation, DerivationCheck, VerifyReport, get, names, predict

EXPECTED = ("curvature-visibility", "frequency-attenuation", "gradient-components",
            "tangent-amplification", "river-valley")


def test_registry_names_and_get():
    assert names() == EXPECTED
    for n in names():
        d = get(n)
        assert isinstance(d, Derivation) and d.name == n
        assert get(n) is d
        assert d.steps and d.statement in d.steps
        assert d.assumptions["model"] and d.assumptions["symbols"]


def test_unknown_name_quantity_and_step():
    with pytest.raises(UnknownNameError, match="known derivations"):
        get("no-such")
    with pytest.raises(UnknownNameError, match="known quantities"):
        predict("river-valley", "nonsense", x0=1.0)
    with pytest.raises(UnknownNameError, match="has no step"):
        get("river-valley").step("nope")
    with pytest.raises(UnknownNameError, match="has no step"):
        get("river-valley").mutated("nope", lambda e: e)


@pytest.mark.parametrize("name", EXPECTED)
def test_every_derivation_verifies(name):
    rep = get(name).verify(seed=0)
    assert isinstance(rep, VerifyReport)
    assert rep.passed, [c for c in rep.checks if not c.passed]
    kinds = {c.kind for c in rep.checks}
    assert "symbolic" in kinds and ("monte-carlo" in kinds)
    d = rep.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert all(isinstance(c, DerivationCheck) for c in rep.checks)


def test_verify_is_deterministic_per_seed():
    d = get("tangent-amplification")
    a, b = d.verify(seed=3), d.verify(seed=3)
    assert [c.residual for c in a.checks] == [c.residual for c in b.checks]
    with pytest.raises(ValidationError):
        d.verify(seed=-1)


def test_bad_parameters_raise_typed_errors():
    with pytest.raises(ValidationError, match="t must be > 0"):
        predict("curvature-visibility", "visibility", t=0.0, ii_norm_sq=1.0, m=2)
    with pytest.raises(ValidationError, match="t must be > 0"):
        predict("curvature-visibility", "visibility", t=np.array([0.1, -1.0]), ii_norm_sq=1.0, m=2)
    with pytest.raises(ValidationError, match="m must be a whole number >= 1"):
        predict("curvature-visibility", "visibility", t=0.1, ii_norm_sq=1.0, m=0)
    with pytest.raises(ValidationError, match="m must be a whole number >= 1"):
        predict("curvature-visibility", "visibility", t=0.1, ii_norm_sq=1.0, m=1.5)
    with pytest.raises(ValidationError, match="n_types must be a whole number >= 2"):
        predict("frequency-attenuation", "attenuation", s=1.0, alpha=0.5, n_types=1)
    with pytest.raises(ValidationError, match="unknown parameter"):
        predict("frequency-attenuation", "attenuation", s=1.0, alpha=0.5, n_types=5, bogus=1)
    with pytest.raises(ValidationError, match="missing parameter"):
        predict("frequency-attenuation", "attenuation", s=1.0, n_types=5)
    with pytest.raises(ValidationError, match="one of"):
        predict("curvature-visibility", "visibility", t=0.1, ii_norm_sq=1.0, m=2, sampling="cube")
    with pytest.raises(ValidationError, match="finite"):
        predict("curvature-visibility", "visibility", t=0.1, ii_norm_sq=float("nan"), m=2)


def test_mutation_propagates_and_leaves_registry_alone():
    d = get("river-valley")
    mut = d.mutated("gd_step", lambda e: e.func(e.lhs, e.rhs * 1.01))
    assert mut.step("gd_step").mutated and not d.step("gd_step").mutated
    assert mut.expr("gd_solution") != d.expr("gd_solution")
    assert mut.predict("hitting_time", method="gd", x0=1.0, lam=0.1, eta=0.5, eps=0.01) != \
        d.predict("hitting_time", method="gd", x0=1.0, lam=0.1, eta=0.5, eps=0.01)
    assert get("river-valley") is d


def test_markdown_and_latex_render():
    d = get("gradient-components")
    md = d.to_markdown()
    assert md.startswith("# ") and "$$" in md and "ratio_bound" in md and "Gaps" in md
    tex = d.to_latex()
    assert "\\begin{enumerate}" in tex and "\\item" in tex


def test_import_is_light():
    import subprocess
    import sys

    code = ("import sys, tangentlab.theory, tangentlab.commands.theory; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

"""The public surface of tangentlab.measure: names others rely on, and a light import."""

from __future__ import annotations

import subprocess
import sys

import tangentlab.measure as measure

REQUIRED = [
    "orthonormalize", "projector", "complement_basis", "principal_angles", "random_subspace",
    "normal_controls", "subspace_drift", "MomentAccumulator", "energy_fraction", "control_test",
    "ControlTestResult", "oracle_energy", "bootstrap_ci", "isoscore", "isoscore_star",
    "mean_cosine", "effective_rank", "participation_ratio", "top_variance_share", "PCAProxy",
    "SemiNMFProxy", "ICAProxy", "TopKSAEProxy", "make_proxy", "PROXY_NAMES", "local_tangent",
    "fit_second_fundamental_form", "empirical_visibility", "visibility_in_frame",
]


def test_required_names_exported():
    missing = [n for n in REQUIRED if n not in measure.__all__ or not hasattr(measure, n)]
    assert not missing
    assert all(hasattr(measure, n) for n in measure.__all__)
    assert set(measure.PROXY_NAMES) == {"pca", "seminmf", "ica", "sae"}


def test_import_is_light():
    code = (
        "import sys, tangentlab.measure; "
        "print(sorted(m for m in ('torch', 'sklearn', 'scipy', 'matplotlib', 'pandas') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_docstring_examples_run():
    import doctest
    import importlib

    for name in ["__init__", "subspace", "moments", "energy", "isotropy", "proxies", "curvature",
                 "geometry", "controls", "constrained"]:
        mod = importlib.import_module(
            "tangentlab.measure" if name == "__init__" else f"tangentlab.measure.{name}"
        )
        res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert res.attempted > 0 and res.failed == 0, (name, res)

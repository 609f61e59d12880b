"""Every docstring example in the package runs (``>>>`` lines are tests, not decoration)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import tangentlab

ROOT = Path(tangentlab.__file__).parent


def _modules_with_examples() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if ">>>" not in path.read_text():
            continue
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


MODULES = _modules_with_examples()


def test_the_package_has_examples():
    assert len(MODULES) >= 10


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             verbose=False, report=False)
    assert result.attempted > 0, f"{name}: '>>>' in the source but no example was collected"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_experiment_names_keep_their_order_whatever_was_imported_first():
    """Regression: importing one experiment module first made ``names()`` list only that one
    (found by the doctest of ``tangentlab.synthetic``). A fresh interpreter, so nothing else
    was imported before."""
    import subprocess
    import sys

    code = ("import tangentlab.synthetic.experiments.river_valley\n"
            "from tangentlab.synthetic.experiments import names\nprint(names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(["visibility", "gradient-ratio", "amplification",
                                      "proxy-recovery", "river-valley", "estimator-calibration"])

"""``scripts/test_tiers.py`` (what ``make test`` runs): both tiers run, and a failure in either
one, the unit tier's included, is the script's exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test_tiers.py"
#: The stand-in suites need no plugin: loading the installed ones (hypothesis, xdist, anyio)
#: took about 2 s of each of the script's two pytest processes, 1 s without.
ENV = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")

INI = """[pytest]
markers =
    model: a model test
    standalone: a model test that reads no session fixture
addopts = -p no:cacheprovider --strict-markers
"""


def _suite(tmp_path: Path, *, unit_passes: bool, model_passes: bool) -> Path:
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_suite.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.model\n"
        f"def test_a_model_test():\n    assert {model_passes}\n\n"
        f"def test_a_unit_test():\n    assert {unit_passes}\n")
    return tmp_path


@pytest.mark.parametrize(("unit_passes", "model_passes", "status"), [
    (True, True, 0), (False, True, 1), (True, False, 1)])
def test_both_tiers_run_and_either_failure_is_the_exit_status(tmp_path, unit_passes,
                                                              model_passes, status):
    root = _suite(tmp_path, unit_passes=unit_passes, model_passes=model_passes)
    done = subprocess.run([sys.executable, str(SCRIPT), "-q"], cwd=root, capture_output=True,
                          text=True, timeout=120, env=ENV)
    out = done.stdout
    assert done.returncode == status, out + done.stderr
    model_part, unit_part = out.split("unit tier (-m 'not model or standalone') ====")
    # each tier ran exactly its own test: the model tier prints first, the unit tier after it
    assert ("1 passed" if model_passes else "1 failed") in model_part
    assert ("1 passed" if unit_passes else "1 failed") in unit_part
    assert "1 deselected" in model_part and "1 deselected" in unit_part
    assert f"tiers: model exit {0 if model_passes else 1}, unit exit {0 if unit_passes else 1}" \
        in out


def test_a_standalone_model_test_runs_in_the_unit_tier_and_its_failure_counts(tmp_path):
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_suite.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.model\n"
        "def test_a_shared_model_test():\n    assert True\n\n"
        "@pytest.mark.model\n@pytest.mark.standalone\n"
        "def test_a_standalone_model_test():\n    assert False\n\n"
        "def test_a_unit_test():\n    assert True\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "-q", "-rA"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=ENV)
    model_part, unit_part = done.stdout.split("unit tier (-m 'not model or standalone') ====")
    assert "test_a_shared_model_test" in model_part and "2 deselected" in model_part
    assert "FAILED test_suite.py::test_a_standalone_model_test" in unit_part
    assert "1 passed" in unit_part and "1 deselected" in unit_part
    assert "tiers: model exit 0, unit exit 1" in done.stdout
    assert done.returncode == 1, done.stdout


def test_a_tier_that_collects_nothing_does_not_fail_the_run(tmp_path):
    (tmp_path / "pytest.ini").write_text(INI)
    (tmp_path / "test_suite.py").write_text("def test_a_unit_test():\n    assert True\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=ENV)
    assert "tiers: model exit 5, unit exit 0" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0
    (tmp_path / "test_suite.py").unlink()  # nothing at all: 5, as pytest says it
    done = subprocess.run([sys.executable, str(SCRIPT), "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=ENV)
    assert done.returncode == 5, done.stdout

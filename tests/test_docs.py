"""The documentation site, with its API reference from the docstrings, builds offline with
warnings treated as errors (what ``make docs`` runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.killing import subprocess_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # builds the whole site with mkdocstrings (the docs build is the slow tier)
def test_mkdocs_builds_strictly_offline_with_the_api_reference(tmp_path):
    site = tmp_path / "site"
    # any attempt to reach the network goes to a closed local port and fails
    env = subprocess_env({"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
                          "NO_PROXY": ""})
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    api = site / "api"
    # rendered from the docstrings: signatures and their documentation
    assert "control_test" in (api / "measure.html").read_text()
    runs = (api / "runs.html").read_text()
    assert "run_lock" in runs and "check_output_dir" in runs and "write_crash_log" in runs
    assert "train_model" in (api / "empirical.html").read_text()
    assert "RunLockedError" in (api / "errors.html").read_text()
    assert (site / "cli.html").is_file() and (site / "theory" / "index.html").is_file()
    # issue 17: the hub, trajectories, dictionary loading, load_model, capture_batch, render_report
    emp = (api / "empirical.html").read_text()
    for name in ("tangentlab.empirical.loading.hub", "tangentlab.empirical.loading.trajectory", "load_model", "capture_batch"):
        assert f'id="{name}' in emp or f'id="tangentlab.empirical.loading.models.{name}"' in emp \
            or f'id="tangentlab.empirical.loading.capture.{name}"' in emp, name
    assert 'id="tangentlab.measure.dictionaries' in (api / "measure.html").read_text()
    rep = (api / "report.html").read_text()
    assert 'id="tangentlab.report.render.render_report"' in rep
    assert 'id="tangentlab.report.summary.load_results"' in rep
    # Sphinx roles are rendered as cross-references, never printed literally
    import re

    for page in api.glob("*.html"):
        text = page.read_text()
        if page.name == "index.html":  # it names the roles, in code, to explain them
            text = text.replace("<code>:func:</code>, <code>:class:</code>", "")
        assert not re.search(r":(func|class|mod|meth|attr|data|exc):", text), page.name
    assert 'href="#tangentlab.report.render.render_report"' in rep  # a rendered cross-reference


def test_every_public_module_has_an_api_page():
    documented = set()
    for page in (ROOT / "docs" / "api").glob("*.md"):
        documented |= {line.split(":::", 1)[1].strip() for line in page.read_text().splitlines()
                       if line.startswith(":::")}
    public = set()
    for path in (ROOT / "tangentlab").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts) or parts[1:2] in (("commands",),) \
                or parts[-1] in ("cli", "cli_reference"):
            continue  # private modules, and the CLI (documented on the CLI page)
        public.add(".".join(parts))
    assert public - documented == set()


def test_make_docs_regenerates_the_pages_then_builds_the_site_strictly():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    steps = [line.strip() for line in recipe.splitlines()[1:]]
    assert steps == [
        "$(BIN)/python -m tangentlab.theory.pages docs/theory",
        "$(BIN)/python -m tangentlab.cli_reference docs/cli.md",
        "$(BIN)/python -m tangentlab.claims_reference docs/claims.md",
        "$(BIN)/python -m tangentlab.validate.certificate docs/validation.md",
        "$(BIN)/python -m mkdocs build --strict --site-dir site",
    ]
    # make setup installs what the build needs (make test runs this file, and installs nothing else)
    extras = next(line for line in makefile.splitlines() if line.startswith("EXTRAS ?="))
    assert "docs" in extras.split("=", 1)[1].split(",")

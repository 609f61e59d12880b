"""What a lab checks before adopting the package: licence, citation, changelog agree."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tangentlab

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_file_matches_pyproject():
    assert _pyproject()["project"]["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    assert re.search(r"Copyright \(c\) 20\d\d ", text)


def test_citation_cites_the_toolkit_and_the_paper():
    import yaml

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["version"] == tangentlab.__version__ == _pyproject()["project"]["version"]
    assert cff["license"] == "MIT"
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    (paper,) = cff["references"]
    assert paper["title"] == ("Revisiting Anisotropy in Language Transformers: "
                              "The Geometry of Learning Dynamics")
    assert [a["family-names"] for a in paper["authors"]] == ["Bernas", "Jourdan", "Poché", "Hudelot"]
    assert paper["year"] == 2026
    assert any(i["value"] == "arXiv:2604.08764" for i in paper["identifiers"])


def test_changelog_has_unreleased_and_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert versions[0] == "Unreleased"
    assert tangentlab.__version__ in versions
    assert re.search(rf"^## \[{re.escape(tangentlab.__version__)}\] - \d{{4}}-\d\d-\d\d$", text, re.M)

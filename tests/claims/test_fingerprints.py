"""Fingerprints of the verdict path's modules: every module covered, a change is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import tangentlab
from tangentlab.claims.fingerprints import (
    VERDICT_PATH,
    module_files,
    stale_modules,
    verdict_path_fingerprints,
)

ROOT = Path(tangentlab.__file__).parent


def test_every_module_on_the_verdict_path_is_fingerprinted():
    files = module_files()
    assert "tangentlab.claims.rules" in files and "tangentlab.report.gating" in files
    assert "tangentlab.measure.batch_test" in files
    # the planted family is a package: both heads (the encoder's twin too) are on the path
    assert {"tangentlab.validate.planted.model", "tangentlab.validate.planted.masked"} <= set(files)
    assert not any(n.startswith("tangentlab.pipeline") for n in files)  # not on the path
    for name in VERDICT_PATH:  # every entry names a module or a package that exists
        assert any(n == name or n.startswith(name + ".") for n in files), name
    fp = verdict_path_fingerprints()
    assert set(fp) == set(files) and all(len(v) == 16 for v in fp.values())
    assert verdict_path_fingerprints() == fp  # a pure function of the files


def test_a_changed_removed_or_added_module_is_named(tmp_path):
    copy = tmp_path / "tangentlab"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = verdict_path_fingerprints(copy)
    assert before == verdict_path_fingerprints()
    rules = copy / "claims" / "rules.py"
    rules.write_text(rules.read_text() + "\n# a change\n")
    (copy / "measure" / "zipf.py").unlink()
    (copy / "claims" / "extra.py").write_text("X = 1\n")
    after = verdict_path_fingerprints(copy)
    assert stale_modules(before, after) == ["tangentlab.claims.extra added",
                                            "tangentlab.claims.rules changed",
                                            "tangentlab.measure.zipf removed"]
    assert stale_modules(before, before) == []

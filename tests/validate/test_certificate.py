"""Certificates: a finished end-to-end run kept as data, tied to its commit and its code."""

from __future__ import annotations

import json

import pytest

import tangentlab.runs as runs
from tangentlab.errors import DataError
from tangentlab.validate.certificate import (
    CERTIFICATE_KIND,
    certificate_stale,
    read_certificate,
    write_certificate,
)
from tests.validate.test_end_to_end_records import CFG, fake  # noqa: F401  (the fixture)


def test_a_finished_run_is_certified_with_its_checks_commit_and_fingerprints(tmp_path, fake,  # noqa: F811
                                                                              monkeypatch):
    import tangentlab.validate.end_to_end as e2e
    from tangentlab.claims.fingerprints import verdict_path_fingerprints
    from tangentlab.cli import main

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    path = write_certificate(run, tmp_path / "cert.json")
    cert = read_certificate(path)
    assert cert["kind"] == CERTIFICATE_KIND and cert["commit"] == fake.commit["commit"]
    checks = json.loads((run / runs.CHECKS_NAME).read_text())
    assert len(cert["checks"]) == len(checks) and cert["setting"]["sims"] == CFG.sims
    assert not any(cert["rows"].values())  # a simulation raised, and 3 sims bound nothing
    assert cert["fingerprints"] == verdict_path_fingerprints() and certificate_stale(cert) == []
    cert["fingerprints"]["tangentlab.claims.rules"] = "0" * 16  # the code moved on
    assert certificate_stale(cert) == ["tangentlab.claims.rules changed"]
    assert main(["validate", "certify", str(run), "--out", str(tmp_path / "c2.json")]) == 0


def test_an_unfinished_run_or_a_dirty_or_other_commit_is_refused(tmp_path, fake):  # noqa: F811
    import tangentlab.validate.end_to_end as e2e

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    fake.commit["commit"] = "beef" * 10  # the checkout moved on since the simulations
    with pytest.raises(DataError, match="certify at that commit"):
        write_certificate(run, tmp_path / "c.json")
    fake.commit.update(commit="c0ffee" * 6, dirty=True)
    dirty, _ = e2e.write_end_to_end(tmp_path / "dirty", CFG, quick=True)
    with pytest.raises(DataError, match="needs a clean, known commit"):
        write_certificate(dirty, tmp_path / "c.json")
    fake.commit["dirty"] = False
    shard, _ = e2e.write_end_to_end(tmp_path / "shard", CFG, quick=True, shard="1/2")
    with pytest.raises(DataError, match="shard"):
        write_certificate(shard, tmp_path / "c.json")
    (run / runs.MANIFEST_NAME).unlink()
    with pytest.raises(DataError, match="not finished|unfinished"):
        write_certificate(run, tmp_path / "c.json")
    assert not (tmp_path / "c.json").exists()
    (tmp_path / "other.json").write_text(json.dumps({"kind": "x", "commit": "c", "setting": {},
                                                     "checks": [], "rows": {},
                                                     "fingerprints": {}}))
    with pytest.raises(DataError, match="not a certificate"):
        read_certificate(tmp_path / "other.json")


def test_certify_writes_nothing_over_a_users_file_a_folder_or_inside_a_run(tmp_path, fake):  # noqa: F811
    import tangentlab.validate.end_to_end as e2e
    from tangentlab.cli import main
    from tangentlab.errors import OutputPathError

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    mine = tmp_path / "notes.json"
    mine.write_text('{"kind": "my notes"}')
    for out, words in ((mine, "is not a certificate"), (tmp_path, "is a directory"),
                       (run / "cert.json", "inside the run directory")):
        with pytest.raises(OutputPathError, match=words):
            write_certificate(run, out)
    assert mine.read_text() == '{"kind": "my notes"}' and not (run / "cert.json").exists()
    assert main(["validate", "certify", str(run), "--out", str(mine)]) == 2
    good = write_certificate(run, tmp_path / "cert.json")
    assert write_certificate(run, good) == good  # an earlier certificate is replaced
    # a refused run writes nothing, even at a new path
    with pytest.raises(DataError):
        write_certificate(tmp_path / "missing", tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()

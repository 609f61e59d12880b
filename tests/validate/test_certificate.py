"""Certificates: a finished end-to-end run kept as data, tied to its commit and its code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tangentlab.runs as runs
import tangentlab.validate.certificate as certificate
from tangentlab.errors import DataError
from tangentlab.validate.certificate import (
    CERTIFICATE_KIND,
    certificate_stale,
    read_certificate,
    recorded_statuses,
    spot_check,
    write_certificate,
)
from tests.validate.test_end_to_end_records import CFG
from tests.validate.test_end_to_end_records import fake as _fake  # noqa: F401  (the fixture)

#: The real reader of a commit's fingerprints (the ``fake`` fixture replaces it).
REAL_FINGERPRINTS_AT = certificate.fingerprints_at


@pytest.fixture
def fake(_fake, monkeypatch):  # noqa: F811
    """The stand-in simulations at a made-up commit, whose fingerprints are today's tree's."""
    from tangentlab.claims.fingerprints import verdict_path_fingerprints

    monkeypatch.setattr(certificate, "fingerprints_at", lambda commit: verdict_path_fingerprints())
    return _fake


def test_a_finished_run_is_certified_with_its_checks_commit_and_fingerprints(tmp_path, fake,
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


def test_an_unfinished_run_a_dirty_commit_or_one_git_lacks_is_refused(tmp_path, fake,
                                                                        monkeypatch):
    import tangentlab.validate.end_to_end as e2e

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    fake.commit["commit"] = "beef" * 10  # the checkout moved on since the simulations: fine
    assert read_certificate(write_certificate(run, tmp_path / "c.json"))["commit"] == "c0ffee" * 6
    (tmp_path / "c.json").unlink()
    monkeypatch.setattr(certificate, "fingerprints_at", REAL_FINGERPRINTS_AT)  # git lacks c0ffee
    with pytest.raises(DataError, match="cannot read commit c0ffeec0ffee's files from git"):
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


def test_certify_writes_nothing_over_a_users_file_a_folder_or_inside_a_run(tmp_path, fake):
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


def test_the_fingerprints_of_a_commit_are_read_from_git_not_the_working_tree():
    import hashlib
    import subprocess

    root = Path(certificate.__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an installed package): nothing to read a commit from")
    got = certificate.fingerprints_at(head)
    for module in ("tangentlab.claims.rules", "tangentlab.measure.batch_test"):
        rel = "tangentlab/" + module.split(".", 1)[1].replace(".", "/") + ".py"
        blob = subprocess.run(["git", "-C", str(root), "show", f"{head}:{rel}"],
                              capture_output=True, check=True).stdout
        assert got[module] == hashlib.sha256(blob).hexdigest()[:16]
    assert "tangentlab.report.gating" in got and not any(m.startswith("tangentlab.pipeline")
                                                         for m in got)


def test_a_spot_check_passes_on_the_recorded_statuses_and_fails_on_others(tmp_path, fake):
    import tangentlab.validate.end_to_end as e2e

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    cert = read_certificate(write_certificate(run, tmp_path / "cert.json"))
    st = cert["statuses"]
    assert set(st["by_null"]) == set(CFG.scenarios)
    assert all(len(line) == CFG.sims for line in st["by_null"].values())
    fake.ran.clear()
    checks = spot_check(cert, "cert.json", k=2, work=tmp_path / "w", seed=1)
    assert len(checks) == 2 and all(c["passed"] for c in checks), checks
    assert len(fake.ran) == 2  # it re-ran two simulations, it did not read them back
    null, sim = fake.ran[0]
    # a certificate whose record of that simulation differs: the re-run disagrees with it
    row = st["rows"][0]
    was = recorded_statuses(cert, null, sim)[row]
    other = next(c for w, c in st["codes"].items() if w != was) if len(st["codes"]) > 1 else "?"
    if other == "?":
        st["codes"]["made up"] = other = "z"
    line = st["by_null"][null][sim]
    st["by_null"][null][sim] = other + line[1:]
    bad = spot_check(cert, "cert.json", k=2, work=tmp_path / "w", seed=1)
    assert not bad[0]["passed"] and f"{row}: recorded" in bad[0]["detail"]


def test_the_validate_stage_spot_checks_a_fresh_certificate_and_skips_a_stale_one(tmp_path,
                                                                                  fake):
    import tangentlab.validate.end_to_end as e2e
    from tangentlab.validate.stage import SPOT_CHECK_KIND, spot_check_certificates

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    good = write_certificate(run, tmp_path / "good.json")
    cert = read_certificate(good)
    cert["fingerprints"]["tangentlab.claims.rules"] = "0" * 16
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(cert))
    out = tmp_path / "validate"
    out.mkdir()
    (out / "checks.json").write_text(json.dumps([{"name": "battery", "passed": True}]))
    fake.ran.clear()
    assert spot_check_certificates(out, [good, stale], k=2, seed=0)
    checks = json.loads((out / "checks.json").read_text())
    assert [c["kind"] for c in checks[1:]] == [SPOT_CHECK_KIND] * 2 and len(fake.ran) == 2
    assert all(c["certificate"] == "good.json" for c in checks[1:])  # the stale one: skipped
    # a run trained short of the certificate's last step (a quick reproduce against a default
    # certificate): nothing re-run, nothing appended; trained to that step: checked again
    last = max(read_certificate(good)["setting"]["steps"])
    fake.ran.clear()
    assert spot_check_certificates(out, [good], k=2, seed=0, trained_to=last - 1)
    assert fake.ran == [] and json.loads((out / "checks.json").read_text()) == checks
    assert spot_check_certificates(out, [good], k=1, seed=0, trained_to=last)
    assert len(fake.ran) == 1 and len(json.loads((out / "checks.json").read_text())) == 4
    bad = read_certificate(good)  # a schedule that is not a list of steps: a typed error
    for steps in ("1000", [0, None], [True]):
        bad["setting"]["steps"] = steps
        stale.write_text(json.dumps(bad))
        with pytest.raises(DataError, match="setting.steps must be a list"):
            spot_check_certificates(out, [stale], k=1, seed=0, trained_to=last)
    cert = read_certificate(good)  # every record now says a status no simulation gives
    cert["statuses"]["codes"]["made up"] = "z"
    cert["statuses"]["by_null"] = {n: ["z" * len(cert["statuses"]["rows"])] * CFG.sims
                                   for n in cert["statuses"]["by_null"]}
    good.write_text(json.dumps(cert))
    assert not spot_check_certificates(out, [good], k=1, seed=0)
    assert not json.loads((out / "checks.json").read_text())[-1]["passed"]


def test_a_certificates_table_shows_every_check_with_its_wilson_interval(tmp_path, fake):
    import tangentlab.validate.end_to_end as e2e
    from tangentlab.validate.battery import wilson_interval
    from tangentlab.validate.certificate import certificate_markdown, certificates_markdown

    run, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    cert = read_certificate(write_certificate(run, tmp_path / "cert.json"))
    text = certificate_markdown("quick", cert)
    lines = [line.strip("| ").split(" | ") for line in text.splitlines()
             if line.count(" | ") == 9 and not line.startswith("| row |")]
    assert len(lines) == len(cert["checks"]) > 0  # one line per check, none more
    rates = 0
    for cells, c in zip(lines, cert["checks"]):
        assert cells[3] == c["metric"] and cells[9] == ("pass" if c["passed"] else "**FAIL**")
        assert cells[8] == "screen" and cells[7] == c["target"]  # 3 simulations bound nothing
        if c["metric"] == "errors":
            assert cells[4] == f"{int(c['measured'])} of {c['n']} raised"
            continue
        k, n = (int(x) for x in cells[4].split("/"))
        lo, hi = wilson_interval(k, n)  # the interval belongs to the count shown beside it
        assert (n, cells[6]) == (c["n"], f"[{lo:.3f}, {hi:.3f}]") and cells[5] == f"{k / n:.3f}"
        rates += 1
    assert rates == len(cert["checks"]) - 1
    assert "**fresh**" in text and "| enrichment | no |" in text  # the gate validated nothing
    cert["fingerprints"]["tangentlab.claims.rules"] = "0" * 16  # the code moved on
    assert "**stale**: tangentlab.claims.rules changed" in certificate_markdown("quick", cert)
    (tmp_path / "quick.json").write_text(json.dumps(cert))
    block = certificates_markdown([tmp_path / "quick.json"])
    assert block.startswith("<!-- BEGIN certificates") and block.endswith("<!-- END certificates -->\n")
    assert "#### Certificate `quick`" in block and "No certificate ships" not in block
    with pytest.raises(DataError, match="no dict field 'rows'"):
        certificate_markdown("bad", {k: v for k, v in cert.items() if k != "rows"})


def test_a_missing_or_non_finite_number_reads_n_a_in_the_checks_table():
    from tangentlab.validate.certificate import checks_table

    base = {"row": "r", "null": "x", "metric": "power", "measured": 0.5, "n": 4, "ci_low": 0.1,
            "ci_high": 0.9, "passed": True, "bound_checked": True, "target": ">= 0.8"}
    # change to the check -> {column index: cell}; columns: row null truth check count rate
    # Wilson target judged result
    cases = [({}, dict(enumerate(["r", "x", "", "power", "2/4", "0.500", "[0.100, 0.900]",
                                  ">= 0.8", "Wilson bound", "pass"]))),
             ({"measured": None}, {4: "n/a", 5: "n/a"}),
             ({"measured": float("nan")}, {4: "n/a", 5: "n/a"}),
             ({"measured": "inf"}, {4: "n/a", 5: "n/a"}),
             ({"n": 0}, {4: "n/a", 5: "0.500"}),
             ({"ci_high": float("nan")}, {6: "[0.100, n/a]"}),
             ({"metric": "errors", "measured": None, "row": "", "null": ""},
              {0: "(all)", 1: "(all)", 4: "n/a", 5: "", 6: ""}),
             ({"metric": "errors", "measured": 2.0, "passed": False, "bound_checked": False},
              {4: "2 of 4 raised", 8: "screen", 9: "**FAIL**"})]
    for change, want in cases:
        cells = checks_table([{**base, **change}]).splitlines()[2].strip("| ").split(" | ")
        assert len(cells) == 10 and {i: cells[i] for i in want} == want, (change, cells)


def test_the_validation_page_shows_the_shipped_certificates():
    """docs/validation.md's certificates block is generated from tangentlab/claims/shipped/."""
    from tangentlab.validate.certificate import main

    doc = Path(__file__).resolve().parents[2] / "docs" / "validation.md"
    assert main(["--check", str(doc)]) == 0, (
        "docs/validation.md's certificates block is stale; regenerate it with "
        "`python -m tangentlab.validate.certificate docs/validation.md`")

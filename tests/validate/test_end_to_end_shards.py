"""Shards, merge and resume of the end-to-end battery on real quick simulations.

The quick setting (3 scenarios × 1 simulation of 1 unit) measured for real: two shards merged,
and a run killed inside its second simulation then resumed with ``--nproc 2``, must each write
the one-process run's ``results.csv``, ``checks.json`` and ``statuses.csv`` byte for byte.
The shared text is built once for the module and the git commit pinned (another engineer's
commit between two runs of a test would otherwise be refused, rightly, as a mismatch).
"""

from __future__ import annotations

import csv
import json

import pytest

import tangentlab.runs as runs
import tangentlab.validate.end_to_end as e2e
from tangentlab.errors import DataError
from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME, RESULTS_NAME
from tangentlab.validate.end_to_end import STATUSES_NAME, EndToEndConfig
from tangentlab.validate.end_to_end_merge import merge_end_to_end
from tangentlab.validate.end_to_end_records import (
    find_records,
    progress,
    read_record,
    require_finished,
)

pytestmark = [pytest.mark.model, pytest.mark.slow]

CFG = EndToEndConfig.quick(0)
SUMMARY = (RESULTS_NAME, CHECKS_NAME, STATUSES_NAME)
#: manifest fields that may differ between runs of the same simulations (when, where, how split)
VOLATILE = {"created", "timings_s", "argv", "platform", "nproc", "simulations_run",
            "simulations_reused", "seconds_per_simulation", "merged_from"}


@pytest.fixture(scope="module")
def text():
    """The quick setting's shared text, built once for the module."""
    return e2e._shared_text(CFG)


@pytest.fixture(scope="module")
def whole(tmp_path_factory, text):
    """(folder for more runs, the uninterrupted one-process quick run); text built once."""
    root = tmp_path_factory.mktemp("e2e-shards")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(e2e, "_shared_text", lambda cfg: text)
        mp.setattr(runs, "git_commit", lambda *a, **k: {"commit": "f" * 40, "dirty": False})
        path, _ = e2e.write_end_to_end(root / "whole", CFG, quick=True)
        yield root, path


def _summary(path):
    return {name: (path / name).read_bytes() for name in SUMMARY}


def _stable_manifest(path):
    m = json.loads((path / MANIFEST_NAME).read_text())
    return {k: v for k, v in m.items() if k not in VOLATILE}


def _verdicts(path):
    return {key: (r.statuses, r.reasons, r.error) for key, p in find_records(path).items()
            for r in [read_record(p)[0]]}


def test_two_shards_merged_equal_the_one_process_run_byte_for_byte(whole):
    root, one = whole
    # shard 1 holds two simulations: --nproc 2 runs them in a pool on a fresh directory (which
    # has no simulations/ folder yet: the shared text was written there first and the run
    # stopped with FileNotFoundError)
    shards = [e2e.write_end_to_end(root / f"shard{k}", CFG, quick=True, shard=f"{k}/2",
                                   nproc=2)[0] for k in (1, 2)]
    assert [sorted(find_records(s)) for s in shards] == [
        [("effect", 0), ("short-eval", 0)], [("no-effect", 0)]]
    merged, passed = merge_end_to_end(shards[::-1], root / "merged")  # order given: irrelevant
    assert _summary(merged) == _summary(one)
    assert _stable_manifest(merged) == _stable_manifest(one)
    assert _verdicts(merged) == _verdicts(one)
    assert passed == all(c["passed"] for c in json.loads((one / CHECKS_NAME).read_text()))


def test_a_run_killed_inside_a_simulation_resumes_with_nproc_2_to_the_same_bytes(whole,
                                                                                monkeypatch):
    root, one = whole
    part = root / "killed"
    real_decide = e2e._decide
    calls = []

    def killed_in_second(data):  # measured, not yet decided: the kill
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_decide(data)

    with monkeypatch.context() as mp:
        mp.setattr(e2e, "_decide", killed_in_second)
        with pytest.raises(KeyboardInterrupt):
            e2e.write_end_to_end(part, CFG, quick=True)
    assert sorted(find_records(part)) == [("effect", 0)] and not (part / MANIFEST_NAME).exists()
    half = progress(part)  # what `validate status` prints of it
    assert (half.part, half.finished, half.remaining) == ("whole run", False, 2)
    assert half.done == {"effect": 1, "no-effect": 0, "short-eval": 0} and len(half.seconds) == 1
    assert any((part / "simulations" / "no-effect" / "sim000").iterdir())  # its half-done work
    e2e.write_end_to_end(part, CFG, quick=True, nproc=2, resume=True)
    assert _summary(part) == _summary(one)
    assert _stable_manifest(part) == _stable_manifest(one)
    manifest = json.loads((part / MANIFEST_NAME).read_text())
    assert (manifest["simulations_reused"], manifest["simulations_run"]) == (1, 2)



def test_the_enrichment_figure_reads_the_intervals_against_the_planted_truth(whole,
                                                                             monkeypatch):
    import tangentlab.validate.planted_scenarios as ps
    from tangentlab.validate.end_to_end_records import (
        ENRICHMENT_FIGURE,
        enrichment_calibration,
        write_enrichment_figure,
    )

    _, one = whole
    z, by_step = enrichment_calibration(one)
    exact = [n for n in CFG.scenarios if ps.enrichment_truth(n) is not None]
    assert exact and z.size == len(exact) * CFG.sims * CFG.units
    assert sorted(by_step) == list(range(len(CFG.steps)))
    covered = sum(map(sum, by_step.values())) / sum(map(len, by_step.values()))
    assert covered >= 0.5 and list(z) == sorted(z)
    path = write_enrichment_figure(one)
    assert path == one / ENRICHMENT_FIGURE and path.stat().st_size > 10_000
    # against a wrong truth the same intervals cover nothing and the errors move by the offset
    monkeypatch.setattr(ps, "enrichment_truth", lambda name: 50.0 if name in exact else None)
    z_bad, by_bad = enrichment_calibration(one)
    assert not any(map(any, by_bad.values())) and (z_bad < z.min()).all()


def test_an_extension_merged_with_its_run_is_a_run_of_that_many_simulations(whole, text,
                                                                            monkeypatch, capsys):
    """Issue 35, item 3: more simulations for one null, run apart and merged, are those a run
    of that many simulations holds (a simulation's seed is its scenario and index only)."""
    import dataclasses

    from tangentlab.cli import main
    from tangentlab.validate.end_to_end_merge import scenarios_to_extend, wrong_statuses
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

    root, one = whole
    monkeypatch.setattr(e2e, "_shared_text", lambda cfg: text)
    monkeypatch.setattr(runs, "git_commit", lambda *a, **k: {"commit": "f" * 40, "dirty": False})
    ext, ok = e2e.write_end_to_end(root / "ext", CFG, quick=True, extension="1:2@no-effect")
    assert ok and sorted(find_records(ext)) == [("no-effect", 1)]
    assert not (ext / STATUSES_NAME).exists()  # finished like a shard: merge judges it
    merged, _ = merge_end_to_end([ext, one], root / "extended")
    direct, _ = e2e.write_end_to_end(root / "direct", dataclasses.replace(
        CFG, scenarios=("no-effect",), sims=2), quick=True)
    got = {k: v for k, v in _verdicts(merged).items() if k[0] == "no-effect"}
    assert sorted(got) == [("no-effect", 0), ("no-effect", 1)] and got == _verdicts(direct)
    manifest = json.loads((merged / MANIFEST_NAME).read_text())
    settings = json.loads((merged / "end_to_end.json").read_text())
    assert manifest["extensions"] == settings["extensions"] == ["1:2@no-effect"]
    assert settings["jobs"] == 4 and "extension" not in settings
    # a merged run merges again with a further extension
    more, _ = e2e.write_end_to_end(root / "ext2", CFG, quick=True, extension="2:3@no-effect")
    twice, _ = merge_end_to_end([merged, more], root / "twice")
    assert sorted(k for k in find_records(twice) if k[0] == "no-effect") == [
        ("no-effect", 0), ("no-effect", 1), ("no-effect", 2)]
    assert json.loads((twice / MANIFEST_NAME).read_text())["extensions"] == [
        "1:2@no-effect", "2:3@no-effect"]
    statuses = (merged / STATUSES_NAME).read_text()
    assert statuses.count(",no-effect,") == 2 * statuses.count(",effect,")
    # which nulls an extension takes: those with a wrong status, counted as the checks count it
    wrong = wrong_statuses(one)
    checks = json.loads((one / CHECKS_NAME).read_text())
    assert wrong == {n: sum(round(c["measured"] * c["n"]) for c in checks if c["null"] == n
                            and c["metric"] in ("wrong_supported", "wrong_not_supported"))
                     for n in CFG.scenarios}
    assert scenarios_to_extend(one) == tuple(n for n in CFG.scenarios if wrong[n])
    with pytest.raises(DataError, match="merge it with its run"):
        require_finished(ext)  # an extension judges nothing alone
    # validate status: the part each directory runs, per scenario, and the wrong statuses so far
    pe, pm = progress(ext), progress(merged)
    assert (pe.part, pe.total, pe.done, pe.finished) == ("extension 1:2@no-effect",
                                                         {"no-effect": 1}, {"no-effect": 1}, True)
    assert pm.part == "merged" and pm.total == {"effect": 1, "no-effect": 2, "short-eval": 1}
    assert pm.remaining == 0 and pm.wrong == wrong_statuses(merged)
    assert main(["validate", "status", str(ext), str(merged)]) == 0
    printed = capsys.readouterr().out
    assert "extension 1:2@no-effect at commit ffffffffffff, finished: 1 of 1" in printed
    assert "no-effect 2/2" in printed and "verdict path: not compared" in printed  # no such commit
    # --statuses: the table of one directory, its rows equal to the merged statuses.csv's
    table = root / "status-table.csv"
    assert main(["validate", "status", str(merged), "--statuses", str(table)]) == 0
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 4 * len(PREDICTION_ROWS)
    assert sum(int(r["wrong"]) for r in rows) == sum(wrong_statuses(merged).values())
    want = {(r["null"], r["sim"], r["row"]): r["value"]
            for r in csv.DictReader((merged / STATUSES_NAME).open()) if r["metric"] == "status"}
    assert {(r["scenario"], r["sim"], r["row"]): r["status"] for r in rows} == want
    assert main(["validate", "status", str(merged), "--statuses", str(table)]) == 0  # replaced
    settings_file = root / "ext" / "end_to_end.json"
    kept = settings_file.read_bytes()
    for target, words in ((root, "is a directory"), (settings_file, "not a status table"),
                          (settings_file / "x.csv", "which is a file"),
                          ("/dev/null", "not a regular file")):
        assert main(["validate", "status", str(merged), "--statuses", str(target)]) == 2
        assert words in capsys.readouterr().err
    assert settings_file.read_bytes() == kept  # a refused file is left as it was
    before = table.read_bytes()
    assert main(["validate", "status", str(ext), str(merged), "--statuses", str(table)]) == 2
    assert "of one run's disjoint parts" in capsys.readouterr().err  # they overlap
    assert table.read_bytes() == before
    # refused: settings --extend takes from the run, a merged run, nothing above its sims
    base = ["validate", "--end-to-end", "--extend", str(one), "--out", str(root / "no")]
    capsys.readouterr()
    for extra, words in ((["--quick"], "drop --quick"), (["--seed", "3"], "drop --seed"),
                         (["--extend-to", "1"], "nothing to extend")):
        assert main([*base, *extra]) == 2
        assert words in capsys.readouterr().err
    assert main(["validate", "--end-to-end", "--extend", str(merged), "--out",
                 str(root / "no")]) == 2
    assert "already merged with extensions" in capsys.readouterr().err
    assert main(["validate", "--end-to-end", "--quick", "--extend-to", "300"]) == 2
    assert "only with --extend" in capsys.readouterr().err
    monkeypatch.setattr(runs, "git_commit", lambda *a, **k: {"commit": "e" * 40, "dirty": False})
    assert main(base) == 2  # another commit: merge would refuse it after it ran
    assert "ran at commit ffffffffffff, this checkout is at eeeeeeeeeeee" in capsys.readouterr().err
    assert not (root / "no").exists()

"""Resume, shards and merge of the end-to-end run, on a stand-in simulation (no model is measured).

``simulate`` is replaced by a function of (scenario, sim) alone and the shared text by a stub, so
that these tests check the bookkeeping (records, fingerprints, order, refusals) in well under a
second each; ``test_end_to_end_shards.py`` runs the same paths on real quick simulations.
"""

from __future__ import annotations

import dataclasses
import json
import types

import pytest

import tangentlab.runs as runs
import tangentlab.validate.end_to_end as e2e
from tangentlab.errors import ConfigError, DataError, OutputPathError
from tangentlab.report.gating import read_end_to_end
from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME, RESULTS_NAME
from tangentlab.validate.end_to_end import STATUSES_NAME, EndToEndConfig, Shard, SimulationResult
from tangentlab.validate.end_to_end_merge import merge_end_to_end
from tangentlab.validate.end_to_end_records import (
    SETTINGS_NAME,
    find_records,
    read_record,
    record_path,
    require_finished,
)
from tangentlab.validate.planted_scenarios import PREDICTION_ROWS

SUMMARY = (RESULTS_NAME, CHECKS_NAME, STATUSES_NAME)
WORDS = ("supported", "inconclusive", "not supported")
CFG = dataclasses.replace(EndToEndConfig.quick(), scenarios=("no-effect", "effect", "rd-1/64"),
                          sims=3, keep_measures=False)


def _fake_simulate(cfg, name, sim, text, work):
    """A simulation whose statuses depend on (scenario, sim) only; ``rd-1/64`` #1 raises."""
    if (name, sim) == ("rd-1/64", 1):
        raise FloatingPointError("a NaN activation")
    k = sim + len(name)
    return SimulationResult(name, sim, {r: WORDS[(k + i) % 3] for i, r in
                                        enumerate(PREDICTION_ROWS)},
                            {r: f"p = {k / 7:.4f}" for r in PREDICTION_ROWS}, 0.01,
                            enrichment_intervals=((1 + k / 50, 0.9, 1.2 + k / 40),
                                                  (None, None, None)))


@pytest.fixture
def fake(monkeypatch):
    """The stand-in simulation, a stub text, and one git commit for every run of the test."""
    ran = []

    def simulate(cfg, name, sim, text, work):
        ran.append((name, sim))
        return _fake_simulate(cfg, name, sim, text, work)

    monkeypatch.setattr(e2e, "simulate", simulate)
    monkeypatch.setattr(e2e, "_shared_text", lambda cfg: types.SimpleNamespace(zipf=1.0))
    commit = {"commit": "c0ffee" * 6, "dirty": False}
    monkeypatch.setattr(runs, "git_commit", lambda *a, **k: dict(commit))
    return types.SimpleNamespace(ran=ran, commit=commit)


def _summary(path):
    return {name: (path / name).read_bytes() for name in SUMMARY}


class _Kill(KeyboardInterrupt):
    pass


def _killed_after(k: int):
    seen = []

    def on_result(res):
        seen.append(res)
        if len(seen) == k:
            raise _Kill
    return on_result


def test_shard_takes_every_nth_job_and_refuses_bad_k_over_n():
    assert Shard.parse("2/3").take(list(range(8))) == [1, 4, 7]
    assert str(Shard.parse(" 1 / 1 ")) == "1/1"
    for bad in ("0/2", "3/2", "2", "a/b", "-1/2", "1/0"):
        with pytest.raises(ConfigError, match="--shard"):
            Shard.parse(bad)


def test_every_simulation_writes_its_own_record_with_its_fingerprint(tmp_path, fake):
    out, passed = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    assert not passed  # rd-1/64 #1 raised: the errors check fails
    assert sorted(find_records(out)) == sorted((n, s) for n in CFG.scenarios for s in range(3))
    res, data = read_record(record_path(out, "rd-1/64", 1))
    assert "FloatingPointError: a NaN activation" in res.error
    assert set(res.statuses.values()) == {"not run"}
    settings = json.loads((out / SETTINGS_NAME).read_text())
    assert data["config_hash"] == settings["config_hash"] and data["git"] == fake.commit
    assert data["shard"] is None and settings["jobs"] == 9
    assert e2e.read_statuses(out)[0].scenario == "no-effect"
    # the unit intervals survive the record and statuses.csv, None included
    res, _ = read_record(record_path(out, "effect", 2))
    want = _fake_simulate(CFG, "effect", 2, None, None).enrichment_intervals
    assert res.enrichment_intervals == want
    back = {(r.scenario, r.sim): r for r in e2e.read_statuses(out)}
    assert back["effect", 2].enrichment_intervals == want


def test_a_record_with_malformed_intervals_is_refused(tmp_path, fake):
    out, _ = e2e.write_end_to_end(tmp_path / "run", CFG, quick=True)
    path = record_path(out, "effect", 0)
    data = json.loads(path.read_text())
    data["enrichment_intervals"] = [[1.0, "low", 2.0]]
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match="enrichment_intervals must be a list"):
        read_record(path)


def test_a_killed_run_resumes_to_the_same_bytes_and_reruns_only_what_was_lost(tmp_path, fake):
    whole, _ = e2e.write_end_to_end(tmp_path / "whole", CFG, quick=True)
    fake.ran.clear()
    part = tmp_path / "part"
    with pytest.raises(_Kill):
        e2e.write_end_to_end(part, CFG, quick=True, on_result=_killed_after(4))
    assert len(find_records(part)) == 4 and not (part / MANIFEST_NAME).exists()
    with pytest.raises(DataError, match=r"not finished \(unfinished: 4 of 9"):
        require_finished(part)  # an unfinished run is never read as a finished one
    (part / CHECKS_NAME).write_text("[]")  # even beside a stale summary
    with pytest.raises(DataError, match="unfinished"):
        e2e.read_statuses(part)
    with pytest.raises(OutputPathError, match="unfinished: 4 of 9.*--resume"):
        e2e.write_end_to_end(part, CFG, quick=True)  # without --resume: refused
    fake.ran.clear()
    e2e.write_end_to_end(part, CFG, quick=True, resume=True)
    assert fake.ran == [j for n in CFG.scenarios for j in ((n, 0), (n, 1), (n, 2))][4:]
    assert _summary(part) == _summary(whole)
    manifest = json.loads((part / MANIFEST_NAME).read_text())
    assert manifest["simulations_reused"] == 4 and manifest["simulations_run"] == 5
    fake.ran.clear()  # resuming a finished run re-judges its records and runs nothing
    e2e.write_end_to_end(part, CFG, quick=True, resume=True)
    assert fake.ran == [] and _summary(part) == _summary(whole)


def test_resume_refuses_another_config_commit_or_shard(tmp_path, fake):
    part = tmp_path / "part"
    with pytest.raises(_Kill):
        e2e.write_end_to_end(part, CFG, quick=True, on_result=_killed_after(2))
    before = sorted(p.read_bytes() for p in find_records(part).values())
    other = dataclasses.replace(CFG, sims=4)
    with pytest.raises(ConfigError, match=r"cannot resume .*config_hash .*differs in sims"):
        e2e.write_end_to_end(part, other, quick=True, resume=True)
    with pytest.raises(ConfigError, match=r"cannot resume .*shard \(none vs 1/2\)"):
        e2e.write_end_to_end(part, CFG, quick=True, resume=True, shard="1/2")
    fake.commit["commit"] = "beef" * 10
    with pytest.raises(ConfigError, match=r"cannot resume .*git commit \(c0ffeec0ffee vs beef"):
        e2e.write_end_to_end(part, CFG, quick=True, resume=True)
    assert sorted(p.read_bytes() for p in find_records(part).values()) == before
    assert fake.ran == [j for n in CFG.scenarios for j in ((n, 0), (n, 1), (n, 2))][:2]
    fake.commit["commit"] = "c0ffee" * 6
    rec = record_path(part, "no-effect", 1)
    rec.write_text(rec.read_text().replace('"config_hash": "', '"config_hash": "x'))
    with pytest.raises(DataError, match=r"sim001.json' was run under config_hash x"):
        e2e.write_end_to_end(part, CFG, quick=True, resume=True)  # a foreign record: refused
    assert len(fake.ran) == 2  # before anything ran


def test_shards_merged_in_any_order_equal_the_one_process_run(tmp_path, fake):
    whole, _ = e2e.write_end_to_end(tmp_path / "whole", CFG, quick=True)
    shards = [e2e.write_end_to_end(tmp_path / f"s{k}", CFG, quick=True, shard=f"{k}/4")[0]
              for k in (1, 2, 3, 4)]
    assert [len(find_records(s)) for s in shards] == [3, 2, 2, 2]
    with pytest.raises(DataError, match="holds shard 1/4 .* validate merge"):
        require_finished(shards[0])
    assert json.loads((shards[0] / MANIFEST_NAME).read_text())["kind"] == "validate/end-to-end-shard"
    merged, passed = merge_end_to_end(shards[::-1], tmp_path / "merged")
    assert _summary(merged) == _summary(whole) and not passed
    manifest = json.loads((merged / MANIFEST_NAME).read_text())
    assert manifest["kind"] == "validate/end-to-end" and len(manifest["merged_from"]) == 4
    assert read_end_to_end(merged).rows == read_end_to_end(whole).rows  # the gate reads both alike


def test_merge_refuses_other_settings_commits_missing_and_duplicate_simulations(tmp_path, fake):
    s1 = e2e.write_end_to_end(tmp_path / "s1", CFG, quick=True, shard="1/2")[0]
    s2 = e2e.write_end_to_end(tmp_path / "s2", CFG, quick=True, shard="2/2")[0]
    out = tmp_path / "merged"
    with pytest.raises(DataError, match=r"4 of 9 simulations are in none .*: no-effect #1, "):
        merge_end_to_end([s1], out)
    other = e2e.write_end_to_end(tmp_path / "o2", dataclasses.replace(CFG, seed=1), quick=True,
                                 shard="2/2")[0]
    with pytest.raises(ConfigError, match=r"cannot merge .*s1.* and .*o2.*: they differ in "
                                          r"config_hash .*differs in seed"):
        merge_end_to_end([s1, other], out)
    fake.commit["commit"] = "beef" * 10
    late = e2e.write_end_to_end(tmp_path / "late", CFG, quick=True, shard="2/2")[0]
    with pytest.raises(ConfigError, match=r"s1.* and .*late.*: they differ in git commit"):
        merge_end_to_end([s1, late], out)
    fake.commit["commit"] = "c0ffee" * 6
    whole = e2e.write_end_to_end(tmp_path / "whole", CFG, quick=True)[0]
    with pytest.raises(DataError, match=r"simulation effect #0 is recorded twice, in .*s2' and .*whole'"):
        merge_end_to_end([s1, s2, whole], out)
    record_path(s2, "effect", 0).unlink()
    with pytest.raises(DataError, match=r"1 of 9 simulations are in none .*: effect #0;"):
        merge_end_to_end([s1, s2], out)
    with pytest.raises(DataError, match=r"not an end-to-end run directory"):
        merge_end_to_end([s1, tmp_path], out)
    assert not out.exists()  # nothing written by a refused merge


def test_cli_shard_resume_and_merge(tmp_path, fake, capsys, monkeypatch):
    """``--shard``/``--resume`` reach the harness; ``validate merge`` prints the merged checks."""
    from tangentlab.cli import main

    monkeypatch.setattr(EndToEndConfig, "preset", classmethod(lambda cls, name, seed=0: CFG))
    for k in (1, 2):
        assert main(["validate", "--end-to-end", "--quick", "--shard", f"{k}/2", "--out",
                     str(tmp_path / f"s{k}")]) == 0
    assert "shard 2/2" in capsys.readouterr().out
    assert main(["validate", "--end-to-end", "--quick", "--resume", "--shard", "1/2", "--out",
                 str(tmp_path / "s1")]) == 0
    rc = main(["validate", "merge", str(tmp_path / "s2"), str(tmp_path / "s1"), "--out",
               str(tmp_path / "m")])
    text = capsys.readouterr().out
    assert rc == 1 and "FAIL  simulations: every one ran" in text and "2 directories" in text
    assert main(["validate", "--end-to-end", "--quick", "--shard", "3/2", "--out",
                 str(tmp_path / "bad")]) == 2
    assert main(["validate", "--seed", "3", "merge", str(tmp_path / "s1"), "--out",
                 str(tmp_path / "m2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "1 <= K <= N; got 3/2" in err[0] and "drop --seed" in err[1]
    assert not (tmp_path / "bad").exists() and not (tmp_path / "m2").exists()


def test_another_kind_of_run_or_an_old_end_to_end_run_is_never_written_into(tmp_path, fake):
    from tangentlab.runs import write_manifest

    other = tmp_path / "other"
    other.mkdir()
    write_manifest(other, {"kind": "reproduce", "stages": {}})
    with pytest.raises(OutputPathError, match="not a 'validate/end-to-end' run"):
        e2e.write_end_to_end(other, CFG, quick=True, resume=True)
    old = tmp_path / "old"  # an end-to-end run written before the records were kept
    old.mkdir()
    write_manifest(old, {"kind": "validate/end-to-end"})
    with pytest.raises(OutputPathError, match="written without simulation records"):
        e2e.write_end_to_end(old, CFG, quick=True, resume=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old", "other"]  # no lock left
    assert [p.name for p in old.iterdir()] == [MANIFEST_NAME] and fake.ran == []
    fresh, _ = e2e.write_end_to_end(tmp_path / "fresh", CFG, quick=True, resume=True)
    assert (fresh / MANIFEST_NAME).is_file()  # --resume on a new folder starts the run


def test_a_twin_s_shards_merged_equal_its_one_process_run(tmp_path, fake, capsys):
    """Issue 35: `validate --end-to-end --like RUN --shard 1/2` and `2/2`, merged, equal the
    one-process twin byte for byte; the twin runs at the run's schedule and units."""
    from tangentlab.cli import main
    from tests.validate.test_twin import write_measure

    run = tmp_path / "run"
    for arch in ("encoder", "decoder"):
        write_measure(run / "measure" / arch, steps=[0, 40, 100], arch=arch)
    args = ["validate", "--end-to-end", "--like", str(run), "--sims", "2"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 1  # rd-1/64 #1 raises
    for k in (1, 2):
        assert main([*args, "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}")]) == 0
    assert main(["validate", "merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out",
                 str(tmp_path / "merged")]) == 1
    assert _summary(tmp_path / "merged") == _summary(tmp_path / "whole")
    cfg = json.loads((tmp_path / "whole" / SETTINGS_NAME).read_text())["config"]
    assert cfg["steps"] == [0, 40, 100] and cfg["units"] == 4 and cfg["sims"] == 2
    assert cfg["archs"] == ["decoder", "decoder", "encoder", "encoder"]  # a head per unit
    assert main([*args, "--setting", "full", "--out", str(tmp_path / "bad")]) == 2
    assert "drop --quick/--setting" in capsys.readouterr().err
    assert main(["validate", "--end-to-end", "--like-effect", "run", "--out",
                 str(tmp_path / "bad")]) == 2
    assert "--like-effect applies only to a twin" in capsys.readouterr().err


def test_a_twin_resumes_from_its_stored_config_without_its_run(tmp_path, fake, capsys):
    """`--resume --out DIR` with no setting flag continues under DIR's stored config, and
    `--like DIR` starts another shard of that twin, so a twin goes on in a later session that
    no longer has the RUN it was read from; a setting flag still decides the config (and a
    mismatch is refused as before)."""
    import shutil

    from tangentlab.cli import main
    from tests.validate.test_twin import write_measure

    run = tmp_path / "run"
    for arch in ("encoder", "decoder"):
        write_measure(run / "measure" / arch, steps=[0, 40, 100], arch=arch)
    out = tmp_path / "twin"
    main(["validate", "--end-to-end", "--like", str(run), "--sims", "2", "--out", str(out)])
    whole = _summary(out)
    for scenario in ("effect", "no-effect"):  # lose two simulations, and the RUN itself
        record_path(out, scenario, 1).unlink()
    shutil.rmtree(run)
    fake.ran.clear()
    main(["validate", "--end-to-end", "--resume", "--out", str(out)])
    assert sorted(fake.ran) == [("effect", 1), ("no-effect", 1)] and _summary(out) == whole
    # a shard of that very twin, started from the twin's directory instead of the lost RUN
    assert main(["validate", "--end-to-end", "--like", str(out), "--shard", "2/2", "--out",
                 str(tmp_path / "s2")]) == 0
    assert json.loads((tmp_path / "s2" / SETTINGS_NAME).read_text())["config_hash"] == \
        json.loads((out / SETTINGS_NAME).read_text())["config_hash"]
    assert main(["validate", "--end-to-end", "--like", str(out), "--like-effect", "run",
                 "--out", str(tmp_path / "bad")]) == 2  # the effect is stored with the twin
    capsys.readouterr()
    assert main(["validate", "--end-to-end", "--resume", "--setting", "full", "--out",
                 str(out)]) == 2  # a setting flag: the full preset, not the stored twin
    assert "cannot resume" in capsys.readouterr().err

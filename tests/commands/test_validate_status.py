"""``tangentlab validate status DIR...``: each directory, then the total of one run's shards.

On the stand-in simulation of ``tests/validate/test_end_to_end_records.py`` (no model measured):
the total must add the shards up to what the merged run holds, count an unfinished shard's
records only, and refuse to add up directories of different runs.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

import tangentlab.runs as runs
import tangentlab.validate.end_to_end as e2e
from tangentlab.cli import main
from tangentlab.validate.end_to_end_merge import merge_end_to_end
from tangentlab.validate.end_to_end_records import progress
from tests.validate.test_end_to_end_records import (  # fake: the stand-in simulation fixture
    CFG,
    _Kill,
    _killed_after,
    fake,  # noqa: F401
)

pytestmark = pytest.mark.usefixtures("fake")


def _total(text: str) -> tuple[str, dict[str, tuple[int, int, int]]]:
    """The total's head line and, per scenario, (done, total, wrong) from its second line."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("together"))
    per = {m[1]: (int(m[2]), int(m[3]), int(m[4] or 0)) for m in re.finditer(
        r"([\w/-]+) (\d+)/(\d+)(?: \((\d+) wrong\))?", lines[at + 1])}
    return lines[at], per


def test_the_total_adds_the_shards_up_to_the_merged_run(tmp_path, capsys):
    s1 = e2e.write_end_to_end(tmp_path / "s1", CFG, quick=True, shard="1/2")[0]
    s2 = e2e.write_end_to_end(tmp_path / "s2", CFG, quick=True, shard="2/2")[0]
    merged = progress(merge_end_to_end([s1, s2], tmp_path / "merged")[0])
    assert merged.remaining == 0 and sum(merged.wrong.values()) > 0  # the check can fail
    assert main(["validate", "status", str(s1), str(s2)]) == 0
    head, per = _total(capsys.readouterr().out)
    assert head.startswith("together (2 directories, 2 finished): 9 of 9 simulations;")
    assert "(mean of 9), about 0.0 process-hours left; 1 raised" in head  # rd-1/64 #1 raised
    assert per == {n: (merged.done[n], merged.total[n], merged.wrong[n]) for n in CFG.scenarios}
    # parts that overlap would count simulations twice: the merged run beside its shards, a
    # shard given twice (another spelling of its path)
    for dirs in ([s1, s2, merged.path], [s1, f"{s1}/"]):
        assert main(["validate", "status", *map(str, dirs)]) == 0
        out = capsys.readouterr().out
        assert re.search(r"together: no total: \S+ and \S+ both run \d+ simulation", out), out
        assert "simulations;" not in out.split("together")[-1] and "rows:" not in out


def _row_counts(statuses_csv) -> dict[str, tuple[int, int, int, int]]:
    """Per row, from a finished run's own statuses.csv (written by the run's summary, not by
    ``validate status``): (wrong, recorded, "supported" where positive, positive)."""
    import csv

    from tangentlab.validate.planted_scenarios import scenario

    out: dict[str, list[int]] = {}
    with open(statuses_csv, newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] != "status":
                continue
            truth, st = scenario(r["null"]).truth.get(r["row"]), r["value"]
            c = out.setdefault(r["row"], [0, 0, 0, 0])
            c[0] += (truth in ("null", "negative") and st == "supported") or (
                truth in ("null", "positive") and st == "not supported")
            c[1] += 1
            c[2] += truth == "positive" and st == "supported"
            c[3] += truth == "positive"
    return {row: tuple(c) for row, c in out.items()}


def _power_by_scenario(statuses_csv) -> dict[str, dict[str, tuple[int, int]]]:
    """Per row and scenario that plants it positive, from a finished run's own statuses.csv:
    ("supported", simulations)."""
    import csv

    from tangentlab.validate.planted_scenarios import scenario

    out: dict[str, dict[str, list[int]]] = {}
    with open(statuses_csv, newline="") as f:
        for r in csv.DictReader(f):
            if r["metric"] == "status" and scenario(r["null"]).truth.get(r["row"]) == "positive":
                c = out.setdefault(r["row"], {}).setdefault(r["null"], [0, 0])
                c[0] += r["value"] == "supported"
                c[1] += 1
    return {row: {null: tuple(c) for null, c in by.items()} for row, by in out.items()}


def test_the_rows_line_counts_wrong_statuses_and_power_as_the_merged_run(tmp_path, capsys):
    s1 = e2e.write_end_to_end(tmp_path / "s1", CFG, quick=True, shard="1/2")[0]
    s2 = e2e.write_end_to_end(tmp_path / "s2", CFG, quick=True, shard="2/2")[0]
    merged = merge_end_to_end([s1, s2], tmp_path / "merged")[0]
    want = _row_counts(merged / e2e.STATUSES_NAME)
    want_each = _power_by_scenario(merged / e2e.STATUSES_NAME)
    assert sum(w for w, *_ in want.values()) > 0 and sum(m for *_, m in want.values()) > 0
    assert set(want_each) == {row for row, c in want.items() if c[3]}
    for dirs in ([s1, s2], [merged]):
        assert main(["validate", "status", *map(str, dirs)]) == 0
        line = capsys.readouterr().out.splitlines()[-1]
        got = {m[1]: (int(m[2]), int(m[3]), int(m[4] or 0), int(m[5] or 0)) for m in re.finditer(
            r"([\w-]+) (\d+) wrong of (\d+)(?:, supported (\d+) of (\d+) where positive)?", line)}
        assert line.startswith("  rows: ") and got == want, (line, want)
        # and per scenario that plants the row positive (the power check is per scenario)
        each = {m[1]: dict((n, (int(k), int(t))) for n, k, t in re.findall(
            r"(\S+) (\d+)/(\d+)(?:,|$)", m[2])) for m in re.finditer(
            r"([\w-]+) \d+ wrong of \d+, supported \d+ of \d+ where positive \(([^)]*)\)", line)}
        assert each == want_each, (line, want_each)


def test_the_status_table_of_the_shards_is_the_merged_runs(tmp_path, capsys):
    """``--statuses FILE`` over a run's shards writes the table the merged run gives, byte for
    byte; over parts that overlap it is refused and writes nothing."""
    s1 = e2e.write_end_to_end(tmp_path / "s1", CFG, quick=True, shard="1/2")[0]
    s2 = e2e.write_end_to_end(tmp_path / "s2", CFG, quick=True, shard="2/2")[0]
    merged = merge_end_to_end([s1, s2], tmp_path / "merged")[0]
    one, parts = tmp_path / "merged.csv", tmp_path / "parts.csv"
    assert main(["validate", "status", str(merged), "--statuses", str(one)]) == 0
    assert main(["validate", "status", str(s2), str(s1), "--statuses", str(parts)]) == 0
    assert f"wrote {parts}: " in capsys.readouterr().out
    assert parts.read_bytes() == one.read_bytes()
    assert len(one.read_text().splitlines()) > 1 + 2 * len(CFG.scenarios)  # both shards' rows
    for dirs in ([s1, s2, merged], [s1, f"{s1}/"]):
        capsys.readouterr()
        assert main(["validate", "status", *map(str, dirs), "--statuses",
                     str(tmp_path / "no.csv")]) == 2
        out, err = capsys.readouterr()
        assert "both run" in err and out == "", (out, err)
    assert not (tmp_path / "no.csv").exists()


def test_an_unfinished_shard_counts_its_records_and_other_runs_get_no_total(tmp_path, capsys,
                                                                           monkeypatch):
    s1 = e2e.write_end_to_end(tmp_path / "s1", CFG, quick=True, shard="1/2")[0]
    with pytest.raises(_Kill):
        e2e.write_end_to_end(tmp_path / "s2", CFG, quick=True, shard="2/2",
                             on_result=_killed_after(1))
    assert main(["validate", "status", str(s1), str(tmp_path / "s2")]) == 0
    head, per = _total(capsys.readouterr().out)
    assert head.startswith("together (2 directories, 1 finished): 6 of 9 simulations;")
    assert "(mean of 6)" in head  # the seconds of both directories' records, pooled
    assert sum(d for d, _, _ in per.values()) == 6 and sum(t for _, t, _ in per.values()) == 9
    assert per == {n: (progress(s1).done[n] + progress(tmp_path / "s2").done[n], 3,
                       progress(s1).wrong[n] + progress(tmp_path / "s2").wrong[n])
                   for n in CFG.scenarios}
    other = e2e.write_end_to_end(tmp_path / "o2", dataclasses.replace(CFG, seed=1), quick=True,
                                 shard="2/2")[0]
    assert main(["validate", "status", str(s1), str(other)]) == 0
    out = capsys.readouterr().out
    assert "together: no total: the 2 directories are not the parts of one run (2 configs, " \
           "1 commits)" in out
    monkeypatch.setattr(runs, "git_commit", lambda *a, **k: {"commit": "beef" * 10,
                                                              "dirty": False})
    later = e2e.write_end_to_end(tmp_path / "l2", CFG, quick=True, shard="2/2")[0]
    assert main(["validate", "status", str(s1), str(later)]) == 0
    assert "not the parts of one run (1 configs, 2 commits)" in capsys.readouterr().out
    assert main(["validate", "status", str(s1)]) == 0  # one directory: no total
    assert "together" not in capsys.readouterr().out

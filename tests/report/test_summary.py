"""The headline numbers in one call: `tangentlab summary RUN` and `tangentlab.load_results`."""

from __future__ import annotations

import pandas as pd
import pytest

import tangentlab
from tangentlab.cli import main
from tangentlab.errors import DataError
from tangentlab.report.summary import SUMMARY_COLUMNS, headline_table
from tests.report.fixtures import measure_rows, trajectory_rows, write_measure_dir, write_run


def _variants(rows: list[dict]) -> list[dict]:
    """The fixed full-space rows again as the refit proxy (x2) and the constrained space (x0.5)."""
    out = list(rows)
    for r in rows:
        if r["metric"] == "enrichment" and r["bucket"] == "all" and r["step"] is not None:
            out.append({**r, "proxy": "refit", "value": r["value"] * 2, "ci_low": r["ci_low"] * 2,
                        "ci_high": r["ci_high"] * 2})
            out.append({**r, "subspace": "constrained", "value": r["value"] / 2,
                        "ci_low": r["ci_low"] / 2, "ci_high": r["ci_high"] / 2})
    return out


@pytest.fixture()
def measured(tmp_path):
    rows = _variants(trajectory_rows("pythia-14m", {0: 1.2, 10: 3.0, 100: 2.0}, site="blocks.1.resid_post")
                     + trajectory_rows("pythia-14m", {0: 1.0, 10: 1.5, 100: 1.4}, site="blocks.3.resid_post"))
    return write_measure_dir(tmp_path / "m", rows, n_controls=20)


def test_one_row_per_site_and_step_with_intervals_and_variants_apart(measured):
    t = headline_table(measured)
    assert list(t.columns) == list(SUMMARY_COLUMNS)
    assert len(t) == 6 and not t.duplicated(["site", "step"]).any()  # the example printed each twice
    r = t[(t.site == "blocks.1.resid_post") & (t.step == 10)].iloc[0]
    assert r.enrichment == pytest.approx(3.0) and r.enrichment_ci_low == pytest.approx(2.85)
    assert r.enrichment_ci_high == pytest.approx(3.15) and r.enrichment_step0 == pytest.approx(1.2)
    assert r.enrichment_refit == pytest.approx(6.0) and r.enrichment_constrained == pytest.approx(1.5)
    assert r.p_value == pytest.approx(1 / 21) and r.n_controls == 20 and r.p_floor == pytest.approx(1 / 21)
    assert r.energy_control_mean == pytest.approx(0.2) and r.model == "pythia-14m" and r.run == "."


def test_cli_prints_and_writes_summary_csv_and_load_results_returns_it(measured, tmp_path, capsys):
    assert main(["summary", str(measured)]) == 0
    out = capsys.readouterr().out
    assert "enrichment [95% CI]" in out and "3 [2.85, 3.15]" in out and "6 rows written" in out
    written = pd.read_csv(measured / "summary.csv")
    api = tangentlab.load_results(measured)
    assert list(written.columns) == list(api.columns) and len(written) == len(api) == 6
    assert written["enrichment"].tolist() == pytest.approx(api["enrichment"].tolist())
    long = tangentlab.load_results(measured, long=True)
    assert len(long) == len(pd.read_csv(measured / "results.csv")) and "metric" in long.columns
    assert not [p for p in measured.iterdir() if p.name.endswith(".tmp")]
    assert main(["summary", str(measured), "--out", str(tmp_path / "elsewhere.csv")]) == 0
    assert len(pd.read_csv(tmp_path / "elsewhere.csv")) == 6


def test_reproduce_run_summarises_each_measure_stage_and_its_externals(tmp_path, measured):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder"), "encoder": measure_rows("encoder")},
                    config={"external_measures": {"pythia": str(measured)}})
    t = headline_table(run)
    assert list(dict.fromkeys(t.run)) == ["measure/decoder", "measure/encoder", "external/pythia"]
    dec = t[t.run == "measure/decoder"]
    assert dec.step.tolist() == [0, 10, 100] and dec.enrichment_ci_low.tolist() == pytest.approx([0.9, 2.16, 2.7])


def test_bad_runs_are_typed_errors(tmp_path, capsys):
    with pytest.raises(DataError, match="not a directory"):
        headline_table(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    assert main(["summary", str(tmp_path / "empty")]) == 2
    assert "holds no results.csv" in capsys.readouterr().err


def test_out_never_replaces_a_run_file_or_a_users_file(measured, tmp_path, capsys):
    """Issue 32: `summary --out` replaced results.csv, manifest.json and a user's own file."""
    before = {p.name: p.read_bytes() for p in measured.iterdir()}
    mine = tmp_path / "notes.txt"
    mine.write_text("my own notes\n")
    for target in (measured / "results.csv", measured / "manifest.json", mine,
                   measured / "new.csv"):
        assert main(["summary", str(measured), "--out", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(target.name) in err
    assert {p.name: p.read_bytes() for p in measured.iterdir()} == before  # nothing written
    assert mine.read_text() == "my own notes\n"
    # a summary it wrote may be replaced, and so may the run's own summary.csv
    assert main(["summary", str(measured), "--out", str(tmp_path / "s.csv")]) == 0
    assert main(["summary", str(measured), "--out", str(tmp_path / "s.csv")]) == 0
    assert main(["summary", str(measured), "--out", str(measured / "summary.csv")]) == 0


def test_a_refused_validation_leaves_no_summary_behind(tmp_path, measured, capsys):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    assert main(["summary", str(run), "--validation", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
    assert not (run / "summary.csv").exists()
    assert main(["summary", str(measured), "--validation", str(tmp_path / "nope")]) == 2
    assert not (measured / "summary.csv").exists()


def test_unwritable_folders_and_impossible_paths_are_typed_errors(measured, tmp_path, capsys,
                                                                   monkeypatch):
    from tangentlab import atomic

    def read_only(path, data):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(atomic, "atomic_write_bytes", read_only)
    assert main(["summary", str(measured)]) == 2  # a read-only run: exit 2, not an internal error
    assert "Permission denied" in capsys.readouterr().err
    monkeypatch.undo()
    long = tmp_path / ("a" * 4800)
    assert main(["summary", str(measured), "--out", str(long)]) == 2
    assert "longer than the file system allows" in capsys.readouterr().err
    assert main(["summary", str(tmp_path / ("b" * 4800))]) == 2  # as RUN too
    assert "internal error" not in capsys.readouterr().err


def test_numbers_that_cannot_be_right_are_flagged(tmp_path, capsys):
    rows = trajectory_rows("m", {0: 1.0, 10: 2.0, 100: 3.0}, site="blocks.0.resid_post")
    for r in rows:
        if r["metric"] == "enrichment" and r["step"] == 100 and r["bucket"] == "all":
            r.update(value=float("inf"))
        if r["metric"] == "enrichment" and r["step"] == 10 and r["bucket"] == "all":
            r.update(ci_low=2.5, ci_high=2.9)  # excludes its estimate 2.0
    run = write_measure_dir(tmp_path / "m", rows, extra={"split": {"test_batches": list(range(4))}})
    t = headline_table(run).set_index("step")
    assert "non-finite enrichment" in t.loc[100, "notes"]
    assert "excludes its estimate 2" in t.loc[10, "notes"]
    assert all("interval from 4 test batches (coverage validated at >= 32)" in f for f in t.notes)
    assert main(["summary", str(run)]) == 0
    out = capsys.readouterr().out
    assert "[1] " in out and "non-finite enrichment (inf)" in out and "excludes its estimate" in out
    assert pd.read_csv(run / "summary.csv")["notes"].str.contains("non-finite").sum() == 1


def test_damaged_results_tables_are_typed_errors(measured, capsys):
    text = (measured / "results.csv").read_text()
    (measured / "results.csv").write_text(text.splitlines()[0] + "\n")  # the header alone
    with pytest.raises(DataError, match="header and no rows"):
        tangentlab.load_results(measured)
    (measured / "results.csv").write_text(text[: len(text) // 2].rsplit(",", 1)[0])  # cut mid-row
    with pytest.raises(DataError, match="cut short"):
        tangentlab.load_results(measured, long=True)
    (measured / "results.csv").write_text("")
    assert main(["summary", str(measured)]) == 2
    assert "is empty (0 bytes)" in capsys.readouterr().err

"""A damaged results table stops the report with a typed error naming file, column and row."""

from __future__ import annotations

import csv

import pytest

from tangentlab.cli import main
from tangentlab.errors import DataError
from tangentlab.report.inputs import check_results
from tangentlab.report.load import RunData
from tangentlab.report.verdicts import build_verdicts
from tests.report.fixtures import measure_rows, write_run


def _corrupt(path, column="value", value="not-a-number", rows=None):
    with open(path, newline="") as fh:
        data = list(csv.DictReader(fh))
    for i, r in enumerate(data):
        if rows is None or i in rows:
            r[column] = value
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(data[0]))
        w.writeheader()
        w.writerows(data)


def test_text_in_the_value_column_is_a_typed_error_not_a_changed_verdict(tmp_path, capsys):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    assert {v.key: v for v in build_verdicts(RunData.open(run))}["enrichment"].status == "supported"
    path = run / "measure" / "decoder" / "results.csv"
    _corrupt(path)
    # today: every value reads as missing and the headline row turns inconclusive without a word
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "'value'" in err and "data row 1 (line 2" in err and "not-a-number" in err
    assert not (run / "report.html").exists()


def test_the_first_bad_row_is_named(tmp_path):
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder")})
    path = run / "measure" / "decoder" / "results.csv"
    _corrupt(path, column="ci_low", value="oops", rows={6, 9})
    with pytest.raises(DataError, match=r"'ci_low' holds 'oops' at data row 7 \(line 8"):
        RunData.open(run).results("measure/decoder")


def test_check_results_accepts_numbers_and_empty_cells_and_needs_metric_and_value(tmp_path):
    import pandas as pd

    ok = pd.DataFrame({"metric": ["a", "b"], "value": ["1.5", None], "step": [0, float("nan")]})
    assert check_results(ok, tmp_path / "r.csv") is ok
    with pytest.raises(DataError, match="no 'value' column"):
        check_results(pd.DataFrame({"metric": ["a"]}), tmp_path / "r.csv")

"""The HTML page's layout (issue 32, item 7): the "Validated end to end" table fits the page."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tangentlab.report.load import END_TO_END_DIR, RunData
from tangentlab.report.verdicts import build_verdicts
from tests.report.fixtures import measure_rows, write_end_to_end_run, write_run

#: a null name with no place to break: the reason cell must still wrap inside the page
_LONG = "a-null-name-without-any-space-" * 6


def _gated_run(tmp_path):
    """A run whose end-to-end validation differs from the run on every count (long reasons)."""
    run = write_run(tmp_path / "run", {"decoder": measure_rows("decoder"),
                                       "encoder": measure_rows("encoder")}, validated=False)
    write_end_to_end_run(run / END_TO_END_DIR, sims=1, setting={
        "units": 3, "n_batches": 1, "n_boot": 10**4, "tokens_per_checkpoint": 64,
        "rank_over_dim": [0.5, 0.5], "scenarios": ["no-effect"],
        "scenarios_known": ["no-effect", _LONG, "effect", "bursty", "convex", "concave"]})
    return run


def _end_to_end_table(html: str) -> str:
    return html.split('id="end-to-end"')[1].split("</table>")[0]


def test_end_to_end_reasons_are_text_that_wraps_not_a_nowrap_badge(tmp_path):
    from tangentlab.report.html_page import render_html
    from tangentlab.report.page import build

    data = RunData.open(_gated_run(tmp_path))
    html = render_html(build(data, build_verdicts(data)), {})
    table = _end_to_end_table(html)
    assert "setting differs" in table and _LONG[:40] in table
    # a badge (white-space: nowrap) holds only the yes/no word; the reason is ordinary text
    badges = re.findall(r'<span class="status [a-z]+">(.*?)</span>', table)
    assert badges and set(badges) <= {"yes", "no"}, badges
    assert '<table class="e2e">' in html
    css = html.split("<style>")[1].split("</style>")[0]
    rule = re.search(r"table\.e2e td\{([^}]*)\}", css)
    assert rule and "overflow-wrap:anywhere" in rule.group(1), css


def test_end_to_end_table_fits_the_page_in_headless_chromium_when_installed(tmp_path):
    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no chromium here; scripts/check_report_in_browser.sh documents the check")
    from tangentlab.cli import main

    run = _gated_run(tmp_path)
    assert main(["report", str(run)]) == 0
    html = (run / "report.html").read_text()
    assert _LONG[:40] in _end_to_end_table(html)
    script = Path(__file__).resolve().parents[2] / "scripts" / "check_report_in_browser.sh"
    res = subprocess.run(["bash", str(script), str(run / "report.html"), str(tmp_path / "shot.png")],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "WIDTH": "1280", "HEIGHT": "1200"})
    assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-3000:]
    assert "the page fits 1280 px" in res.stdout

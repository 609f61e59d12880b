"""Rendering the report from stored (hand-made) results, with a failed stage."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest

from tangentlab.cli import main
from tangentlab.pipeline.reproduce import QUICK, reproduce
from tangentlab.report import RunData, build_verdicts
from tangentlab.report.render import SECTIONS
from tangentlab.report.verdicts import row_keys
from tests.report.fixtures import fixture_stages


def decode_png(data: bytes) -> np.ndarray:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(data), format="png")


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rep") / "run"
    summary = reproduce(QUICK, out, stages=fixture_stages(fail_train_decoder=True))
    return out, summary


def test_run_with_failed_stage_still_reports(failed_run):
    out, summary = failed_run
    st = {r.name: r.status for r in summary.records}
    assert st["train/decoder"] == "failed" and st["measure/decoder"] == "skipped"
    assert st["measure/encoder"] == "done" and st["report"] == "done"
    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    for sid, title in SECTIONS:
        assert f'id="{sid}"' in html
        assert f"## {title}" in md
    assert "boom: hand-made failure" in html and "boom: hand-made failure" in md
    assert "depends on train/decoder, which failed" in html
    # the limitations name the failure and the skipped stage
    lim = html.split('id="limitations"')[1].split('id="provenance"')[0]
    assert "train/decoder failed" in lim and "measure/decoder was skipped" in lim


def test_every_row_present_with_status_and_source(failed_run):
    out, _ = failed_run
    html = (out / "report.html").read_text()
    for key in row_keys():
        assert f'id="row-{key}"' in html
    # encoder measured, decoder not: empirical rows cannot be fully supported
    row = html.split('id="row-enrichment"')[1].split('class="row"')[0]
    assert "inconclusive" in row and "measure/decoder was skipped" in row
    assert 'href="measure/encoder/"' in row and "config " in row and "seed 0" in row
    # synthetic rows come out supported with the hand-made passing checks
    row = html.split('id="row-visibility"')[1].split('class="row"')[0]
    assert ">supported<" in row and "measured 0.0412 vs target 0.04" in row
    # every check line says which kind of error its tolerance bounds, or that none was recorded
    assert "<td>0.1: relative error</td>" in row
    row = html.split('id="row-attenuation"')[1].split('class="row"')[0]
    assert "<td>0.05: tolerance (kind not recorded)</td>" in row


def test_html_is_self_contained_and_figures_are_not_blank(failed_run):
    out, _ = failed_run
    html = (out / "report.html").read_text()
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)="(https?:)?//', html)
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    # every row draws a figure, except the validation battery, which did not run here, and the
    # learning arms, of which the hand-made measure rows store none
    assert len(imgs) == len([k for k in row_keys() if k not in ("validation", "learning-arms")])
    for b64 in imgs:
        pixels = decode_png(base64.b64decode(b64))
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100
        assert float(pixels[..., :3].var()) > 0
    md = (out / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md)
    assert len(links) == len(imgs)
    for link in links:
        assert (out / link).stat().st_size > 1000


def test_report_command_rerenders_without_recomputing(failed_run, capsys):
    out, _ = failed_run
    results = sorted(p for p in out.rglob("results.csv"))
    before = {p: p.stat().st_mtime_ns for p in results}
    (out / "report.html").unlink()
    (out / "report.md").unlink()
    rc = main(["report", str(out)])
    assert rc == 0
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert {p: p.stat().st_mtime_ns for p in results} == before
    assert str(out / "report.html") in capsys.readouterr().out


def test_failing_check_gives_not_supported(tmp_path):
    from functools import partial

    from tests.report import fixtures as F

    st = fixture_stages()
    st[1] = type(st[1])("synthetic/visibility", F.make_synthetic("visibility", checks_pass=False),
                        check=st[1].check)
    st[0] = type(st[0])("theory", partial(F.make_theory, fail=True), check=st[0].check)
    out = tmp_path / "run"
    reproduce(QUICK, out, stages=st[:-1])  # no report stage: only the verdicts are checked
    by = {v.key: v for v in build_verdicts(RunData.open(out))}
    assert by["attenuation"].status == "not supported"
    assert by["visibility"].status == "supported"  # its own check still passed
    assert by["theory"].status == "not supported"
    # its own measurements still say supported; no end-to-end run, so the row is gated
    assert by["enrichment"].raw_status == "supported" and "no end-to-end" in by["enrichment"].gated


def test_report_on_a_missing_or_foreign_directory_is_a_clean_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text('{"kind": "synthetic/visibility"}')
    assert main(["report", str(tmp_path)]) == 2
    assert "reproduce run" in capsys.readouterr().err


def test_default_output_is_a_timestamped_dir_with_latest_link(tmp_path):
    stages = fixture_stages()[:2]  # theory + one synthetic stage are enough here
    s1 = reproduce(QUICK, runs_root=tmp_path, stages=stages)
    latest = tmp_path / "latest"
    assert latest.is_symlink() and latest.resolve() == s1.run_dir
    assert s1.run_dir.parent == tmp_path and re.fullmatch(r"\d{8}-\d{6}(-\d+)?", s1.run_dir.name)
    s2 = reproduce(QUICK, runs_root=tmp_path, stages=stages)
    assert s2.run_dir != s1.run_dir and latest.resolve() == s2.run_dir


def test_summary_figure_is_small_and_not_blank(failed_run, tmp_path):
    out, _ = failed_run
    path = tmp_path / "summary.png"
    assert main(["report", str(out), "--summary-figure", str(path)]) == 0
    data = path.read_bytes()
    assert 5_000 < len(data) < 300_000
    px = decode_png(data)
    assert float(px[..., :3].var()) > 0


def test_report_renders_in_headless_chromium_when_installed(failed_run, tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    if not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no chromium here; scripts/check_report_in_browser.sh documents the check")
    out, _ = failed_run
    script = Path(__file__).resolve().parents[2] / "scripts" / "check_report_in_browser.sh"
    shot = tmp_path / "shot.png"
    res = subprocess.run(["bash", str(script), str(out / "report.html"), str(shot)],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    px = decode_png(shot.read_bytes())
    assert px.shape[:2] == (4000, 1400) and float(px[..., :3].var()) > 0


@pytest.mark.parametrize("content,match", [("[]", "must hold an object, got a list"),
                                           ("{not json", "not valid JSON"),
                                           ('{"seed": 0}', "has no field 'derivations'")])
def test_a_damaged_theory_record_is_named_not_an_internal_error(tmp_path, content, match):
    """Issue 32: `theory/verify.json` holding `[]` made the report fail with exit 3."""
    out = tmp_path / "run"
    reproduce(QUICK, out, stages=fixture_stages()[:1])  # the theory stage alone
    (out / "theory" / "verify.json").write_text(content)
    by = {v.key: v for v in build_verdicts(RunData.open(out))}
    assert by["theory"].error is not None and match in by["theory"].error
    assert "verify.json" in by["theory"].error

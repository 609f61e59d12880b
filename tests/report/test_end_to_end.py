"""One real `tangentlab reproduce --quick` run, end to end (slow): every stage, every section,
every figure. (Resume is tested with cheap stages in test_stages.py and test_render.py.)"""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest

from tangentlab.report.gating import GATED_TEXT
from tangentlab.report.load import END_TO_END_DIR
from tangentlab.report.render import SECTIONS
from tangentlab.report.verdicts import row_keys


def _pixels(data: bytes) -> np.ndarray:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.image as mpimg

    return mpimg.imread(io.BytesIO(data), format="png")


def _section(html: str, sid: str) -> str:
    ids = [s for s, _ in SECTIONS]
    start = html.index(f'id="{sid}"')
    nxt = ids.index(sid) + 1
    end = html.index(f'id="{ids[nxt]}"') if nxt < len(ids) else html.index("</body>")
    return html[start:end]


@pytest.mark.slow
def test_quick_reproduce_end_to_end(quick_reproduce):
    out, rc, err, first = quick_reproduce(2)
    manifest = json.loads((out / "manifest.json").read_text())
    stages = manifest["stages"]
    seconds = {k: v["seconds"] for k, v in stages.items()}
    problems = {k: (v["status"], v["error"], v["reason"]) for k, v in stages.items() if v["status"] != "done"}
    assert not problems, f"stages did not finish: {problems}\n{err[-3000:]}"
    assert rc == 0, f"reproduce --quick exited {rc} (stage seconds {seconds}):\n{err[-3000:]}"
    assert list(stages) == manifest["stage_order"] and len(stages) >= 11

    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    for sid, title in SECTIONS:
        body = re.sub(r"<[^>]+>", " ", _section(html, sid))
        words = body.replace(title, "").split()
        assert len(words) >= 5, f"section {sid!r} is empty in report.html"
        assert f"## {title}" in md
    # every verdict row is decided from real outputs (nothing 'not run'); the validation battery
    # row reads 'not run' only where the run has no validate stage
    has_validate = "validate" in stages
    keys = [k for k in row_keys() if has_validate or k != "validation"]
    for key in keys:
        row = html.split(f'id="row-{key}"')[1].split('class="row"')[0]
        status = re.search(r'class="status [a-z]+">([a-z ()]+)<', row).group(1)
        assert status in ("supported", "not supported", "inconclusive", GATED_TEXT), (key, status)
    # the validate stage ran the quick end-to-end battery where the report reads it; a quick run
    # certifies nothing, so every prediction the rules decided is gated, its raw verdict kept
    assert (out / END_TO_END_DIR / "checks.json").is_file()
    assert "Validated end to end" in html and "### Validated end to end" in md
    from tangentlab.report import RunData, build_verdicts

    preds = [v for v in build_verdicts(RunData.open(out)) if v.section == "prediction"]
    assert all(v.status not in ("supported", "not supported") for v in preds)
    assert all("point rates only" in v.gated for v in preds if v.gated)
    # no figure is empty: every decided row has at least one, decoded pixels vary
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(imgs) >= len(keys)
    for b64 in imgs:
        px = _pixels(base64.b64decode(b64))
        assert px.shape[0] > 100 and float(px[..., :3].var()) > 1e-4
    for link in re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", md):
        assert float(_pixels((out / link).read_bytes())[..., :3].var()) > 1e-4
    assert "<script" not in html.lower() and not re.search(r'(src|href)="(https?:)?//', html)

    print(f"reproduce --quick: {first:.1f} s; stage seconds {seconds}")

"""The committed docs/theory pages are what render.py produces now."""

from __future__ import annotations

from pathlib import Path

import pytest

from tangentlab.theory import get, names
from tangentlab.theory.pages import main, render_all
from tangentlab.theory.render import derivation_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "theory"


@pytest.mark.parametrize("name", names())
def test_committed_page_is_up_to_date(name):
    page = DOCS / f"{name}.md"
    assert page.exists(), f"missing {page}; run python -m tangentlab.theory.pages docs/theory"
    assert page.read_text(encoding="utf-8") == derivation_markdown(get(name)), (
        f"{page} is stale; run python -m tangentlab.theory.pages docs/theory")


def test_index_links_every_page():
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for name in names():
        assert f"({name}.md)" in index


def test_render_all_writes_pages(tmp_path):
    paths = render_all(tmp_path / "out")
    assert sorted(p.name for p in paths) == sorted(f"{n}.md" for n in names())
    assert main([]) == 2

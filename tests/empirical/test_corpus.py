import json

import numpy as np
import pytest

from tangentlab.empirical.corpus import (
    frequency_table,
    load_frequency_table,
    load_texts,
    save_frequency_table,
    split_texts,
)
from tangentlab.errors import DataError, UnknownNameError


def test_builtin_wikipedia_is_real_english():
    docs = load_texts("wikipedia")
    assert len(docs) > 50
    assert any("Anarchism" in d for d in docs[:3])
    assert "'''" not in docs[0]


def test_bible_corpus_groups_chapters():
    docs = load_texts("bible", max_docs=3)
    assert len(docs) == 3
    assert docs[0].startswith("In the beginning God created")


def test_text_and_jsonl_sources(tmp_path):
    (tmp_path / "a.txt").write_text("one two three\n\nfour five six\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "seven eight"}) + "\n\n")
    assert load_texts(tmp_path / "a.txt") == ["one two three", "four five six"]
    assert load_texts(tmp_path) == ["one two three", "four five six", "seven eight"]


@pytest.mark.parametrize("content", ["", "\n\n  \n", "word word word\n\nword"])
def test_empty_or_single_type_corpus_is_rejected(tmp_path, content):
    f = tmp_path / "c.txt"
    f.write_text(content)
    with pytest.raises(DataError):
        load_texts(f)


def test_bad_jsonl_and_unknown_source(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text('{"title": "no text"}\n')
    with pytest.raises(DataError, match="text"):
        load_texts(f)
    with pytest.raises(UnknownNameError):
        load_texts("no-such-corpus")


def test_split_is_deterministic_and_disjoint():
    docs = [f"document number {i} with words" for i in range(50)]
    a, b = split_texts(docs, 0.2, seed=1), split_texts(docs, 0.2, seed=1)
    assert a == b
    assert set(a.train).isdisjoint(a.eval) and len(a.train) + len(a.eval) == 50
    assert split_texts(docs, 0.2, seed=2) != a
    assert len(a.eval) >= 1 and len(a.train) >= 1


def test_frequency_table_roundtrip(tmp_path):
    counts = frequency_table(np.array([0, 3, 3, 5]), 8)
    assert counts.tolist() == [1, 0, 0, 2, 0, 1, 0, 0]
    save_frequency_table(counts, tmp_path / "f.csv")
    assert load_frequency_table(tmp_path / "f.csv").tolist() == counts.tolist()
    with pytest.raises(DataError):
        frequency_table(np.array([9]), 8)

import json

import numpy as np
import pytest

from tangentlab.empirical.loading.corpus import (
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


# -- eval text through the datasets loaders, external frequency tables ------------------------------
def test_datasets_loaders_read_text_jsonl_and_parquet(tmp_path):
    import pandas as pd

    from tangentlab.empirical.loading.corpus import load_dataset_texts

    (tmp_path / "a.txt").write_text("one two three\n\nfour five six\n")
    assert load_texts(f"text:{tmp_path / 'a.txt'}") == load_texts(tmp_path / "a.txt")
    rows = [{"text": "seven eight", "id": 1}, {"text": "  ", "id": 2}, {"text": "nine ten", "id": 3}]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert load_texts(f"json:{tmp_path / 'b.jsonl'}") == ["seven eight", "nine ten"]
    pq = tmp_path / "pq"
    pq.mkdir()
    pd.DataFrame({"body": ["alpha beta", "gamma delta"], "n": [1, 2]}).to_parquet(pq / "0.parquet")
    pd.DataFrame({"body": ["epsilon zeta"], "n": [3]}).to_parquet(pq / "1.parquet")
    assert load_dataset_texts(pq, fmt="parquet", text_field="body") == [
        "alpha beta", "gamma delta", "epsilon zeta"]
    pd.DataFrame({"text": ["eta theta", "iota kappa"]}).to_parquet(tmp_path / "c.parquet")
    assert load_texts(tmp_path / "c.parquet") == ["eta theta", "iota kappa"]  # by suffix
    assert load_texts(f"parquet:{tmp_path / 'c.parquet'}", max_docs=1) == ["eta theta"]


def test_datasets_loader_errors(tmp_path):
    import pandas as pd

    from tangentlab.empirical.loading.corpus import load_dataset_texts

    pd.DataFrame({"body": ["a b"]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(DataError, match=r"no 'text' column.*\['body'\]"):
        load_texts(f"parquet:{tmp_path / 'x.parquet'}")
    pd.DataFrame({"text": [1, 2]}).to_parquet(tmp_path / "n.parquet")
    with pytest.raises(DataError, match="not text"):
        load_texts(f"parquet:{tmp_path / 'n.parquet'}")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{not json\n')
    with pytest.raises(DataError, match="cannot read"):
        load_texts(f"json:{tmp_path / 'bad.jsonl'}")
    with pytest.raises(DataError, match="does not exist"):
        load_texts(f"parquet:{tmp_path / 'missing.parquet'}")
    with pytest.raises(DataError, match="cannot tell the format"):
        load_dataset_texts(tmp_path / "x.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no"):
        load_texts(f"json:{tmp_path / 'empty'}")


def test_external_frequency_table(tmp_path):
    from tangentlab.empirical.loading.corpus import load_token_counts

    f = tmp_path / "freq.csv"
    f.write_text("token_id,count\n# pre-training counts\n3,10\n0,2\n\n7\t5\n")
    c = load_token_counts(f, vocab_size=8)
    assert c.dtype == np.int64 and c.tolist() == [2, 0, 0, 10, 0, 0, 0, 5]
    # our own saved tables read back too
    save_frequency_table(np.array([1, 0, 4]), tmp_path / "own.csv")
    assert load_token_counts(tmp_path / "own.csv", vocab_size=3).tolist() == [1, 0, 4]
    bad = {
        "3,x\n": "must be integers",
        "1,2,3\n": "expected 'token_id,count'",
        "9,1\n": "outside the tokenizer's range",
        "-1,1\n": "outside",
        "2,-4\n": "negative",
        "2,1\n2,3\n": "appears twice",
        "token_id,count\n1,0\n": "no positive count",
        "1,1\n# vocab_size=99\n": "vocabulary of 99",
    }
    for text, msg in bad.items():
        f.write_text(text)
        with pytest.raises(DataError, match=msg) as err:
            load_token_counts(f, vocab_size=8)
        assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="does not exist"):
        load_token_counts(tmp_path / "none.csv", vocab_size=8)


def test_external_counts_for_a_model_and_its_tokenizer(tmp_path):
    from types import SimpleNamespace

    from tangentlab.empirical.loading.corpus import load_external_counts
    from tangentlab.empirical.loading.tokenizer import train_tokenizer

    tok = train_tokenizer(["alpha beta gamma delta " * 20, "beta gamma alpha " * 20], vocab_size=300)
    n = len(tok)
    f = tmp_path / "pile_counts.csv"
    f.write_text(f"token_id,count\n5,7\n{n + 2},3\n")  # an id in the padded embedding range
    counts, source = load_external_counts(f, tok, SimpleNamespace(vocab_size=n + 8))
    assert len(counts) == n + 8 and counts[5] == 7 and counts[n + 2] == 3
    assert source == "external table pile_counts.csv (10 tokens over 2 ids)"
    with pytest.raises(DataError, match="outside the tokenizer's range"):
        load_external_counts(f, tok, SimpleNamespace(vocab_size=n))
    with pytest.raises(DataError, match="not this model's tokenizer"):
        load_external_counts(f, tok, SimpleNamespace(vocab_size=n - 1))


def test_text_column_and_the_whole_file_as_eval(tmp_path):
    """--text-column reaches every tabular reader; eval_fraction=1 keeps every document."""
    import pandas as pd

    from tangentlab.errors import DataError

    rows = [{"body": "alpha beta", "text": 1}, {"body": "gamma delta", "text": 2}]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert load_texts(tmp_path / "a.jsonl", text_column="body") == ["alpha beta", "gamma delta"]
    assert load_texts(tmp_path, text_column="body") == ["alpha beta", "gamma delta"]  # a folder
    with pytest.raises(DataError, match="'text' field.*body"):
        load_texts(tmp_path / "a.jsonl")
    assert load_texts(f"json:{tmp_path / 'a.jsonl'}", text_column="body") == [
        "alpha beta", "gamma delta"]
    pd.DataFrame({"body": ["eta theta", "iota kappa"]}).to_parquet(tmp_path / "c.parquet")
    assert load_texts(tmp_path / "c.parquet", text_column="body") == ["eta theta", "iota kappa"]
    docs = [f"document number {i}" for i in range(30)]
    whole = split_texts(docs, 1.0, seed=0)
    assert whole.eval == tuple(docs) and whole.train == ()
    half = split_texts(docs, 0.5, seed=0)
    assert len(half.eval) + len(half.train) == 30 and 5 <= len(half.eval) <= 25
    with pytest.raises(DataError, match=r"\(0, 1\]"):
        split_texts(docs, 1.5)

import pytest

from tangentlab.empirical.loading.tokenizer import encode_stream, load_tokenizer, train_tokenizer
from tangentlab.errors import CheckpointError, DataError

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 20


def test_bpe_roundtrip_and_specials(tmp_path):
    tok = train_tokenizer(TEXTS, 300)
    assert tok.pad_token_id == 0 and tok.mask_token_id is not None
    ids = tok("the cat sat", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "the cat sat"
    tok.save_pretrained(tmp_path)
    tok2 = load_tokenizer(tmp_path)
    assert tok2("the cat sat", add_special_tokens=False)["input_ids"] == ids


def test_training_is_deterministic():
    a, b = train_tokenizer(TEXTS, 300), train_tokenizer(TEXTS, 300)
    assert a.get_vocab() == b.get_vocab()


def test_stream_appends_eos_and_caps():
    tok = train_tokenizer(TEXTS, 300)
    s = encode_stream(tok, TEXTS[:2])
    assert (s == tok.eos_token_id).sum() == 2
    assert len(encode_stream(tok, TEXTS, max_tokens=7)) == 7


def test_bad_inputs(tmp_path):
    with pytest.raises(DataError):
        train_tokenizer([], 300)
    with pytest.raises(DataError):
        train_tokenizer(TEXTS, 10)
    with pytest.raises(CheckpointError):
        load_tokenizer(tmp_path / "missing")


def test_check_tokenizer_fits():
    from types import SimpleNamespace

    from tangentlab.empirical.loading.tokenizer import check_tokenizer_fits, train_tokenizer

    tok = train_tokenizer(["alpha beta gamma delta " * 20, "beta gamma alpha " * 20], vocab_size=300)
    n = len(tok)
    assert check_tokenizer_fits(tok, SimpleNamespace(vocab_size=n)) == n
    assert check_tokenizer_fits(tok, SimpleNamespace(vocab_size=n + 27)) == n + 27  # padded
    with pytest.raises(DataError, match=f"{n} ids but the model's embedding has {n - 1}"):
        check_tokenizer_fits(tok, SimpleNamespace(vocab_size=n - 1))
    with pytest.raises(DataError, match="no vocab_size"):
        check_tokenizer_fits(tok, SimpleNamespace())


def test_a_remembered_encoding_is_a_fresh_copy_keyed_by_tokenizer_texts_and_cut():
    """encode_documents remembers its last encodings: a hit is the same numbers as a fresh
    encoding, never shared with a caller, and another tokenizer, text or cut is not a hit."""
    import numpy as np

    from tangentlab.empirical.loading import tokenizer as T

    texts = [f"the cat number {i} sat on the mat and the dog {i % 3} ran" for i in range(40)]
    tok = T.train_tokenizer(texts, vocab_size=300)
    other = T.train_tokenizer([f"zebra {i} quokka axolotl" for i in range(40)], vocab_size=300)
    T._ENCODED.clear()
    ids, doc = T.encode_documents(tok, texts)
    fresh = ids.copy()
    ids[:] = -1  # the caller's copy; the remembered one is its own
    again, doc2 = T.encode_documents(tok, texts)
    assert len(T._ENCODED) == 1 and np.array_equal(again, fresh) and np.array_equal(doc2, doc)
    assert T.encode_documents(tok, texts, max_tokens=7)[0].tolist() == fresh[:7].tolist()
    assert not np.array_equal(T.encode_documents(tok, texts[1:])[0], fresh)
    T._ENCODED_KEEP, keep = 0, T._ENCODED_KEEP  # no memory: the other tokenizer's own ids
    try:
        T._ENCODED.clear()
        want = T.encode_documents(other, texts)[0]
    finally:
        T._ENCODED_KEEP = keep
    T.encode_documents(tok, texts)
    assert np.array_equal(T.encode_documents(other, texts)[0], want)
    assert not np.array_equal(want, fresh)  # (so a key without the tokenizer would be caught)
    assert len(T._ENCODED) <= T._ENCODED_KEEP

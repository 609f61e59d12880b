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

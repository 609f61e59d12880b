"""Eval windows (issue 18, fixes: windows): disjoint slices of the eval stream, document ids.

A fake tokenizer gives every word of the eval text its own id, so a repeated id in the eval
batches is a repeated stream position: the check runs through ``make_eval_data`` unchanged.
"""

import numpy as np
import pytest
import torch

from tangentlab.empirical.loading.data import (
    disjoint_window_starts,
    encode_documents,
    eval_batches,
    make_batch,
    make_eval_data,
    random_window_starts,
)
from tangentlab.errors import DataError


class UniqueWordTokenizer:
    """Word ``wN`` → id N + 4; ids 0–3 are pad, unk, eos, mask (like the trained BPE)."""

    pad_token_id, eos_token_id, mask_token_id, sep_token_id, cls_token_id = 0, 2, 3, None, None

    def __init__(self, n_words):
        self.n = n_words + 4

    def __len__(self):
        return self.n

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[int(w[1:]) + 4 for w in t.split()] for t in texts]}


def _texts(n_docs=12, words=200):
    return [" ".join(f"w{d * words + i}" for i in range(words)) for d in range(n_docs)], \
        UniqueWordTokenizer(n_docs * words)


def _eval(arch="decoder", n_batches=8, batch_size=4, seq_len=32, **kw):
    texts, tok = _texts(**kw)
    counts = np.ones(len(tok), dtype=np.int64)
    return make_eval_data(tok, arch, texts=texts, counts=counts, frequency_source="t",
                          n_batches=n_batches, batch_size=batch_size, seq_len=seq_len, seed=0,
                          n_buckets=2)


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_no_stream_position_enters_two_eval_windows(arch):
    """Old sampler: random offsets, so with 2.3x the needed text some ids appear twice."""
    ev = _eval(arch, n_batches=8, batch_size=4, seq_len=32, n_docs=12, words=200)
    ids = torch.cat([b.token_ids.reshape(-1) for b in ev.batches]).numpy()
    assert ids.size == 8 * 4 * 32
    words = ids[ids != 2]  # every id but eos is one stream position
    assert np.unique(words).size == words.size
    fit = torch.cat([b.token_ids.reshape(-1) for b in ev.fit_batches]).numpy()
    test = torch.cat([b.token_ids.reshape(-1) for b in ev.test_batches]).numpy()
    fit, test = fit[fit != 2], test[test != 2]
    assert fit.size and test.size and not np.intersect1d(fit, test).size


def test_windows_positions_and_documents_are_recorded():
    ev = _eval(n_docs=12, words=200)
    for b in ev.batches:
        pos, ids = b.positions.numpy(), b.token_ids.numpy()
        assert np.all(np.diff(pos, axis=1) == 1)  # contiguous windows
        # stream: 12 documents of 200 words then eos; position p is word p % 201 of doc p // 201
        real = pos % 201 != 200
        assert np.all(ids[~real] == 2)
        assert np.array_equal(ids[real] - 4, (pos // 201 * 200 + pos % 201)[real])
        assert np.array_equal(b.doc_ids.numpy(), pos // 201)
    rec = ev.split_record()
    inst = rec["token_instances"]
    assert inst["repeated"] == 0 and inst["shared_fit_test"] == 0
    assert inst["all"] == inst["positions"] == 8 * 4 * 32 == inst["fit"] + inst["test"]
    starts = rec["window_starts"]
    assert len(starts["fit"]) == len(starts["test"]) == 16
    assert rec["eval_documents"] == ev.n_documents and 1 < ev.n_documents <= 12
    assert ev.stream_tokens == 12 * 201


def test_too_short_eval_text_raises_and_says_how_many_windows_fit():
    """Old sampler: overlapping windows silently reused the same 1005 tokens 4x over."""
    with pytest.raises(DataError, match=r"room for 31 disjoint windows.*at most 7\b"):
        _eval(n_batches=16, batch_size=4, seq_len=32, n_docs=5, words=200)
    ev = _eval(n_batches=7, batch_size=4, seq_len=32, n_docs=5, words=200)  # 28 <= 31: fits
    assert len(ev.batches) == 7


def test_disjoint_window_starts_are_seeded_slots():
    s = disjoint_window_starts(1000, 20, 32, seed=3)
    assert np.array_equal(s, disjoint_window_starts(1000, 20, 32, seed=3))
    assert not np.array_equal(s, disjoint_window_starts(1000, 20, 32, seed=4))
    assert len(set(s.tolist())) == 20 and s.min() >= 0 and s.max() + 32 <= 1000
    assert len(set((s - s.min()) % 32)) == 1  # one phase: the windows tile the stream
    d = np.sort(s)
    assert np.all(np.diff(d) >= 32)
    with pytest.raises(DataError, match="holds 31 disjoint windows"):
        disjoint_window_starts(1000, 32, 32, seed=0)


def test_training_batches_keep_their_random_offsets():
    """make_batch (training) is the old rule: starts, then the MLM draws, from one generator."""
    stream = torch.arange(5000) % 97 + 4
    for arch in ("decoder", "encoder"):
        inp, lab, masked = make_batch(stream, 7, batch_size=8, seq_len=16, arch=arch, seed=2,
                                      mask_id=3, vocab_size=101, special_ids=(0, 2))
        g = torch.Generator().manual_seed(2 * 1_000_003 + 7)
        starts = torch.randint(0, 5000 - 16, (8,), generator=g)
        assert torch.equal(starts, random_window_starts(5000, 7, batch_size=8, seq_len=16,
                                                        seed=2))
        ids = stream[starts[:, None] + torch.arange(16)[None, :]]
        if arch == "decoder":
            assert torch.equal(inp, ids) and not masked.any()
            continue
        probs = torch.rand(ids.shape, generator=g)
        assert torch.equal(masked, probs < 0.15)
        assert torch.equal(torch.where(masked, lab, inp), ids)


def test_encode_documents_matches_encode_stream():
    from tangentlab.empirical.loading.tokenizer import encode_stream

    texts, tok = _texts(n_docs=3, words=10)
    ids, doc = encode_documents(tok, texts)
    assert np.array_equal(ids, encode_stream(tok, texts))
    assert doc.tolist() == [0] * 11 + [1] * 11 + [2] * 11
    ids, doc = encode_documents(tok, texts, max_tokens=15)
    assert np.array_equal(ids, encode_stream(tok, texts, max_tokens=15)) and doc.size == 15


def test_eval_batches_without_document_ids_use_one_document():
    stream = torch.arange(1000)
    got = eval_batches(stream, None, arch="decoder", n_batches=4, batch_size=2, seq_len=10,
                       seed=0)
    assert all(b.doc_ids.unique().tolist() == [0] for b in got)

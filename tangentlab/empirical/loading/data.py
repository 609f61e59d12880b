"""Fixed evaluation batches and the token-frequency buckets used by ``measure``.

The same batches (windows of the eval split, and for an encoder the same MLM masks) are used at
every checkpoint, so per-token statistics follow the *same occurrences* across the trajectory.
The batches are split once, by a seeded permutation, into a *fit half* (activations: proxies,
activation sample, frequency geometry) and a *test half* (gradients: energy tests, ΔIsoScore*,
causal checks), so that a proxy never borrows the noise of the gradients it is tested on.

Eval windows are **disjoint** slices of the eval stream (:func:`disjoint_window_starts`: a seeded
permutation of non-overlapping window slots), so no stream position enters twice and the fit
and test halves share no token instance. Windows at random offsets overlap: the same position
then enters twice, which shrinks the spread of exactly the rare tokens (a fake positive
frequency–spread correlation) and leaks fit rows into test windows. Training batches
(:func:`make_batch`) keep their random offsets. The eval stream carries a document id per
position (:func:`~tangentlab.empirical.loading.tokenizer.encode_documents`, re-exported here), so per-token geometry can take one occurrence per document.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tangentlab.empirical.loading.tokenizer import encode_documents
from tangentlab.errors import ConfigError, DataError

if TYPE_CHECKING:  # annotations only
    import numpy as np
    import torch

__all__ = [
    "EVAL_STREAM_TOKENS", "EvalBatch", "EvalData", "make_batch", "make_eval_data", "bucket_edges", "bucket_of", "split_halves",
    "encode_documents", "disjoint_window_starts", "random_window_starts", "eval_batches",
]

#: The eval stream is the whole eval text up to this many tokens (or 4x the windows' tokens if
#: more), so that the disjoint windows spread over as many documents as the text has.
EVAL_STREAM_TOKENS = 1_000_000


@dataclass(frozen=True)
class EvalBatch:
    """One fixed eval batch (the same at every checkpoint).

    Attributes:
        input_ids: (B, T) int tensor, the model's inputs (MLM-masked for an encoder).
        labels: (B, T) int tensor: the MLM targets (-100 where no loss) or the inputs (decoder).
        masked: (B, T) bool tensor, the positions chosen for MLM (masked, replaced or kept); all
            False for a decoder.
        token_ids: (B, T) int tensor, the true token at each position (inputs before masking).
        index: position of the batch in the eval set.
        half: ``"fit"`` (activations: proxies, samples, geometry) or ``"test"`` (gradients:
            energy tests, ΔIsoScore*, causal checks).
        positions: (B, T) int64 tensor, the eval-stream position of each token (disjoint
            windows: no position appears twice over all batches), or None.
        doc_ids: (B, T) int64 tensor, the document of each position, or None (unknown: each
            window is then its own document).
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    masked: torch.Tensor
    token_ids: torch.Tensor
    index: int = 0
    half: str = "test"
    positions: torch.Tensor | None = None
    doc_ids: torch.Tensor | None = None

    def __iter__(self) -> Iterator[Any]:
        """Unpack as the former ``(input_ids, labels, masked, token_ids)`` tuple."""
        return iter((self.input_ids, self.labels, self.masked, self.token_ids))


@dataclass
class EvalData:
    """Fixed eval batches and per-token frequency information.

    Attributes:
        batches: list of :class:`~tangentlab.empirical.loading.data.EvalBatch` (input_ids, labels,
            masked, token_ids, each (B, T) tensors; ``token_ids`` are the true tokens, the inputs
            before MLM masking).
        counts: training-split token counts, shape (vocab,), int64.
        frequency_source: where ``counts`` came from (run's frequency.csv or recomputed).
        edges: inner bucket edges on log(count + 1), ascending, shape (K - 1,).
        labels: bucket labels, rarest first (``f1`` … ``fK``).
        stream_tokens: length of the encoded eval stream the windows are cut from.
        n_documents: documents in that stream.
    """

    batches: list
    counts: np.ndarray
    frequency_source: str
    edges: np.ndarray
    labels: list[str]
    stream_tokens: int = 0
    n_documents: int = 0

    @property
    def fit_batches(self) -> list:
        """The fit half: activations (proxies, activation sample, frequency geometry)."""
        return [b for b in self.batches if b.half == "fit"]

    @property
    def test_batches(self) -> list:
        """The test half: gradients (energy tests, ΔIsoScore*, causal checks)."""
        return [b for b in self.batches if b.half == "test"]

    def split_record(self) -> dict[str, Any]:
        """What the manifest records about the split and the windows.

        Besides the batch indices of each half: each half's window starts (stream positions of
        each window's first token, in batch order), the number of distinct stream positions
        (token instances) of each half and of all windows, and how many positions appear more
        than once or in both halves (0 with disjoint windows).
        """
        import numpy as np

        rec: dict[str, Any] = {
            "fit_batches": [b.index for b in self.fit_batches],
            "test_batches": [b.index for b in self.test_batches],
            "rule": "seeded permutation of the eval batches: the first floor(n/2) fit "
                    "(activations), the rest test (gradients)",
        }
        if any(getattr(b, "positions", None) is None for b in self.batches):
            return rec
        pos = {h: [np.asarray(b.positions).reshape(-1) for b in bs]
               for h, bs in (("fit", self.fit_batches), ("test", self.test_batches))}
        flat = {h: np.concatenate(v) if v else np.zeros(0, dtype=np.int64)
                for h, v in pos.items()}
        allp = np.concatenate([flat["fit"], flat["test"]])
        rec.update({
            "windows": "disjoint slices of the eval stream: a seeded permutation of "
                       "non-overlapping seq_len slots",
            "window_starts": {h: [int(p) for b in bs for p in np.asarray(b.positions)[:, 0]]
                              for h, bs in (("fit", self.fit_batches),
                                            ("test", self.test_batches))},
            "token_instances": {
                "fit": int(np.unique(flat["fit"]).size),
                "test": int(np.unique(flat["test"]).size),
                "all": int(np.unique(allp).size),
                "positions": int(allp.size),
                "repeated": int(allp.size - np.unique(allp).size),
                "shared_fit_test": int(np.intersect1d(flat["fit"], flat["test"]).size)},
            "eval_stream_tokens": int(self.stream_tokens),
            "eval_documents": int(self.n_documents),
        })
        return rec


def split_halves(n_batches: int, seed: int) -> tuple[list[int], list[int]]:
    """Split batch indices ``0..n_batches-1`` into a fit half and a test half, deterministically.

    A seeded permutation (``default_rng([seed, 13])``); the first ``n_batches // 2`` indices are
    the fit half, the rest the test half; both returned sorted. Needs ``n_batches >= 2``.
    """
    import numpy as np

    if n_batches < 2:
        raise DataError(f"a fit/test split needs at least 2 eval batches, got {n_batches}")
    perm = np.random.default_rng([int(seed), 13]).permutation(n_batches)
    k = n_batches // 2
    return sorted(int(i) for i in perm[:k]), sorted(int(i) for i in perm[k:])


def bucket_edges(logf, n_buckets: int):
    """Inner edges of ``n_buckets`` equal-mass quantile buckets of the values ``logf`` (ties merged)."""
    import numpy as np

    qs = np.quantile(np.asarray(logf, dtype=np.float64), np.linspace(0, 1, n_buckets + 1)[1:-1])
    return np.unique(qs)


def bucket_of(logf, edges):
    """Bucket index (0 = rarest) of each value: ``searchsorted(edges, logf, side='right')``."""
    import numpy as np

    return np.searchsorted(edges, np.asarray(logf, dtype=np.float64), side="right")


def disjoint_window_starts(n_tokens: int, n_windows: int, seq_len: int, seed: int):
    """Starts of ``n_windows`` disjoint windows of ``seq_len`` in a stream of ``n_tokens``.

    The stream holds ``n_slots = n_tokens // seq_len`` non-overlapping slots, shifted by a seeded
    phase in ``[0, n_tokens − n_slots·seq_len]``; a seeded permutation (``default_rng([seed,
    31])``) picks ``n_windows`` of them, in random order. Returns int64 (n_windows,).

    Raises:
        DataError: fewer slots than windows (the message says how many windows fit).
    """
    import numpy as np

    n_slots = int(n_tokens) // int(seq_len)
    if n_slots < n_windows:
        raise DataError(
            f"the eval stream of {n_tokens} tokens holds {n_slots} disjoint windows of seq_len "
            f"{seq_len}, but {n_windows} are needed")
    rng = np.random.default_rng([int(seed), 31])
    phase = int(rng.integers(0, int(n_tokens) - n_slots * int(seq_len) + 1))
    return (phase + rng.permutation(n_slots)[:n_windows] * int(seq_len)).astype(np.int64)


def eval_batches(stream, doc_ids, *, arch: str, n_batches: int, batch_size: int, seq_len: int,
                 seed: int, mask_id: int | None = None, vocab_size: int | None = None,
                 mlm_probability: float = 0.15, special_ids: Sequence[int] = ()) -> list:
    """The fixed eval batches: disjoint windows of ``stream``, split into a fit and a test half.

    ``stream``: 1-D int64 torch tensor of ids; ``doc_ids``: (len,) document id of each position
    (or None: one document). Window w (of :func:`disjoint_window_starts`) is row ``w %
    batch_size`` of batch ``w // batch_size``; MLM masks come from a generator seeded with
    ``(seed, 10**7 + b)`` per batch (the rule of :func:`make_batch`). Returns a list of
    :class:`~tangentlab.empirical.loading.data.EvalBatch` with ``positions`` and ``doc_ids``.

    Raises:
        DataError: the stream is too short for ``n_batches × batch_size`` disjoint windows; the
            message says how many batches fit and what to change.
    """
    import torch


    n = int(stream.numel())
    need = n_batches * batch_size
    if n // seq_len < need:
        fit = n // seq_len
        raise DataError(
            f"the eval text encodes to {n} tokens: room for {fit} disjoint windows of seq_len "
            f"{seq_len} ({fit // batch_size} batches of {batch_size}), but n_batches × "
            f"batch_size = {n_batches} × {batch_size} = {need} are needed; lower n_batches (at "
            f"most {max(fit // batch_size, 0)}), batch_size or seq_len, or give more eval text "
            "(a larger eval_fraction or corpus)")
    starts = torch.from_numpy(disjoint_window_starts(n, need, seq_len, seed))
    docs = torch.zeros(n, dtype=torch.int64) if doc_ids is None else \
        torch.as_tensor(doc_ids, dtype=torch.int64)
    fit_idx, _test_idx = split_halves(n_batches, seed)
    out = []
    for b in range(n_batches):
        pos = starts[b * batch_size:(b + 1) * batch_size, None] + torch.arange(seq_len)[None, :]
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + 10**7 + b)
        inp, lab, masked = _finish_batch(stream[pos], g, arch=arch, mask_id=mask_id,
                                         vocab_size=vocab_size, mlm_probability=mlm_probability,
                                         special_ids=special_ids)
        orig = torch.where(masked, lab, inp)  # the true token at each position
        out.append(EvalBatch(input_ids=inp, labels=lab, masked=masked, token_ids=orig, index=b,
                             half="fit" if b in fit_idx else "test", positions=pos,
                             doc_ids=docs[pos]))
    return out


def make_eval_data(tokenizer, arch: str, *, texts, counts, frequency_source: str, n_batches: int,
                   batch_size: int, seq_len: int, seed: int, n_buckets: int,
                   mlm_probability: float = 0.15) -> EvalData:
    """Build the fixed eval batches from ``texts`` and the frequency buckets from ``counts``.

    The windows are disjoint slices of the encoded eval text (:func:`eval_batches`), each
    position tagged with its document (the index of its text in ``texts``).
    """
    import numpy as np
    import torch

    # all the eval text up to EVAL_STREAM_TOKENS (at least 4x the windows): the windows spread
    # over as many documents as there are, which one-per-document geometry needs
    need = max(n_batches * batch_size * seq_len * 4 + seq_len + 1, EVAL_STREAM_TOKENS)
    ids_np, doc_np = encode_documents(tokenizer, list(texts), max_tokens=need)
    stream = torch.from_numpy(ids_np)
    if stream.numel() <= seq_len + 1:
        raise DataError(
            f"the eval text has only {stream.numel()} tokens, fewer than seq_len {seq_len}; use a "
            "larger corpus or a smaller seq_len"
        )
    mask_id = tokenizer.mask_token_id
    if arch == "encoder" and mask_id is None:
        raise DataError("the tokenizer has no mask token, so the encoder's MLM loss is undefined")
    special = [i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id,
                           getattr(tokenizer, "cls_token_id", None),
                           getattr(tokenizer, "sep_token_id", None)) if i is not None]
    batches = eval_batches(stream, doc_np, arch=arch, n_batches=n_batches,
                           batch_size=batch_size, seq_len=seq_len, seed=seed, mask_id=mask_id,
                           vocab_size=len(tokenizer), mlm_probability=mlm_probability,
                           special_ids=special)
    ids = torch.cat([b.token_ids.reshape(-1) for b in batches]).numpy()
    if ids.max() >= len(counts):
        raise DataError(
            f"the frequency table covers {len(counts)} ids but the tokenizer produced id {ids.max()}"
        )
    logf = np.log1p(counts[ids])
    edges = bucket_edges(logf, n_buckets)
    labels = [f"f{i + 1}" for i in range(len(edges) + 1)]
    used = np.unique(np.concatenate([np.asarray(b.doc_ids).reshape(-1) for b in batches]))
    return EvalData(batches=batches, counts=counts, frequency_source=frequency_source,
                    edges=edges, labels=labels, stream_tokens=int(stream.numel()),
                    n_documents=int(used.size))


def random_window_starts(n_tokens: int, step: int, *, batch_size: int, seq_len: int, seed: int):
    """The window starts :func:`make_batch` draws for ``step`` (uniform random, may overlap).

    Returns an int64 tensor (batch_size,). Training batches use them; eval batches do not.
    """
    import torch

    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
    return _random_starts(g, int(n_tokens), batch_size, seq_len)


def _random_starts(g, n_tokens: int, batch_size: int, seq_len: int):
    import torch

    hi = n_tokens - seq_len
    if hi < 1:
        raise ConfigError(f"the token stream ({n_tokens} ids) is shorter than seq_len {seq_len}")
    return torch.randint(0, hi, (batch_size,), generator=g)


def make_batch(stream, step: int, *, batch_size: int, seq_len: int, arch: str, seed: int,
               mask_id: int | None = None, vocab_size: int | None = None,
               mlm_probability: float = 0.15, special_ids: Sequence[int] = ()):
    """The deterministic batch of ``step``: (input_ids, labels, masked), each (batch, seq_len).

    Windows start at uniform random offsets of the 1-D ``stream`` (torch int64). For the encoder,
    ``mlm_probability`` of the non-special positions are chosen (80% → mask id, 10% → random id,
    10% unchanged), ``labels`` are -100 elsewhere and ``masked`` marks the chosen ones. For the
    decoder, ``labels`` = inputs (the model shifts them) and ``masked`` is all False.
    """
    import torch

    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
    starts = _random_starts(g, stream.numel(), batch_size, seq_len)
    idx = starts[:, None] + torch.arange(seq_len)[None, :]
    return _finish_batch(stream[idx], g, arch=arch, mask_id=mask_id, vocab_size=vocab_size,
                         mlm_probability=mlm_probability, special_ids=special_ids)


def _finish_batch(ids, g, *, arch: str, mask_id, vocab_size, mlm_probability: float,
                  special_ids: Sequence[int]):
    """(input_ids, labels, masked) of the window ids (B, T), MLM draws from generator ``g``."""
    import torch

    if arch == "decoder":
        return ids, ids.clone(), torch.zeros_like(ids, dtype=torch.bool)
    probs = torch.rand(ids.shape, generator=g)
    special = torch.zeros_like(ids, dtype=torch.bool)
    for s in special_ids:
        special |= ids == s
    masked = (probs < mlm_probability) & ~special
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    how = torch.rand(ids.shape, generator=g)
    rand_ids = torch.randint(0, int(vocab_size), ids.shape, generator=g)
    inputs = ids.clone()
    inputs[masked & (how < 0.8)] = int(mask_id)
    swap = masked & (how >= 0.8) & (how < 0.9)
    inputs[swap] = rand_ids[swap]
    return inputs, labels, masked

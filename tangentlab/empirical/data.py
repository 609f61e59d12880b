"""Fixed evaluation batches and the token-frequency buckets used by ``measure``.

The same batches (windows of the eval split, and for an encoder the same MLM masks) are used at
every checkpoint, so per-token statistics follow the *same occurrences* across the trajectory.
The batches are split once, by a seeded permutation, into a *fit half* (activations: proxies,
activation sample, frequency geometry) and a *test half* (gradients: energy tests, ΔIsoScore*,
causal checks), so that a proxy never borrows the noise of the gradients it is tested on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tangentlab.errors import ConfigError, DataError

__all__ = [
    "EvalData", "make_batch", "make_eval_data", "bucket_edges", "bucket_of", "split_halves",
]


@dataclass
class EvalData:
    """Fixed eval batches and per-token frequency information.

    Attributes:
        batches: list of :class:`~tangentlab.empirical.records.EvalBatch` (input_ids, labels,
            masked, token_ids, each (B, T) tensors; ``token_ids`` are the true tokens, the inputs
            before MLM masking).
        counts: training-split token counts, shape (vocab,), int64.
        frequency_source: where ``counts`` came from (run's frequency.csv or recomputed).
        edges: inner bucket edges on log(count + 1), ascending, shape (K - 1,).
        labels: bucket labels, rarest first (``f1`` … ``fK``).
    """

    batches: list
    counts: Any
    frequency_source: str
    edges: Any
    labels: list[str]

    @property
    def fit_batches(self) -> list:
        """The fit half: activations (proxies, activation sample, frequency geometry)."""
        return [b for b in self.batches if b.half == "fit"]

    @property
    def test_batches(self) -> list:
        """The test half: gradients (energy tests, ΔIsoScore*, causal checks)."""
        return [b for b in self.batches if b.half == "test"]

    def split_record(self) -> dict[str, Any]:
        """What the manifest records about the split."""
        return {"fit_batches": [b.index for b in self.fit_batches],
                "test_batches": [b.index for b in self.test_batches],
                "rule": "seeded permutation of the eval batches: the first floor(n/2) fit "
                        "(activations), the rest test (gradients)"}


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


def make_eval_data(tokenizer, arch: str, *, texts, counts, frequency_source: str, n_batches: int,
                   batch_size: int, seq_len: int, seed: int, n_buckets: int,
                   mlm_probability: float = 0.15) -> EvalData:
    """Build the fixed eval batches from ``texts`` and the frequency buckets from ``counts``."""
    import numpy as np
    import torch

    from tangentlab.empirical.records import EvalBatch
    from tangentlab.empirical.tokenizer import encode_stream

    need = n_batches * batch_size * seq_len * 4 + seq_len + 1
    stream = torch.from_numpy(encode_stream(tokenizer, list(texts), max_tokens=need))
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
    fit_idx, _test_idx = split_halves(n_batches, seed)
    batches = []
    for b in range(n_batches):
        inp, lab, masked = make_batch(
            stream, 10**7 + b, batch_size=batch_size, seq_len=seq_len, arch=arch, seed=seed,
            mask_id=mask_id, vocab_size=len(tokenizer), mlm_probability=mlm_probability,
            special_ids=special)
        orig = torch.where(masked, lab, inp)  # the true token at each position
        batches.append(EvalBatch(input_ids=inp, labels=lab, masked=masked, token_ids=orig,
                                 index=b, half="fit" if b in fit_idx else "test"))
    ids = torch.cat([b.token_ids.reshape(-1) for b in batches]).numpy()
    if ids.max() >= len(counts):
        raise DataError(
            f"the frequency table covers {len(counts)} ids but the tokenizer produced id {ids.max()}"
        )
    logf = np.log1p(counts[ids])
    edges = bucket_edges(logf, n_buckets)
    labels = [f"f{i + 1}" for i in range(len(edges) + 1)]
    return EvalData(batches=batches, counts=counts, frequency_source=frequency_source,
                    edges=edges, labels=labels)


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
    hi = stream.numel() - seq_len
    if hi < 1:
        raise ConfigError(f"the token stream ({stream.numel()} ids) is shorter than seq_len {seq_len}")
    starts = torch.randint(0, hi, (batch_size,), generator=g)
    idx = starts[:, None] + torch.arange(seq_len)[None, :]
    ids = stream[idx]
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

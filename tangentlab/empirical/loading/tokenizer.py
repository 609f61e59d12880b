"""Byte-level BPE training (``tokenizers``) and tokenizer loading from a model directory.

The trained tokenizer has four special tokens: ``<pad>`` (id 0), ``<unk>``, ``<eos>`` (ends each
document in the training stream) and ``<mask>`` (MLM masking). It is wrapped in a
``PreTrainedTokenizerFast`` so it saves/loads with the model in Hugging Face format.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tangentlab.errors import CheckpointError, DataError

__all__ = ["SPECIAL_TOKENS", "TOKENIZER_FILES", "train_tokenizer", "load_tokenizer", "check_tokenizer_fits",
           "encode_stream", "encode_documents"]

SPECIAL_TOKENS = ("<pad>", "<unk>", "<eos>", "<mask>")


def train_tokenizer(texts: Sequence[str], vocab_size: int = 4096, *, min_frequency: int = 2):
    """Train a byte-level BPE on ``texts``; returns a ``PreTrainedTokenizerFast``.

    Deterministic for the same texts and parameters (the BPE trainer breaks ties by order).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise DataError(f"vocab_size must be at least 300 for a byte-level BPE; got {vocab_size}")
    if not texts:
        raise DataError("cannot train a tokenizer on an empty corpus")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size),
        min_frequency=int(min_frequency),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<eos>",
        mask_token="<mask>",
    )


#: Files of which a folder must hold at least one to hold a tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt",
                   "tokenizer.model", "spiece.model", "merges.txt")


def load_tokenizer(path: str | Path):
    """Load the tokenizer saved in a model or run directory (``AutoTokenizer``, local files only)."""
    from transformers import AutoTokenizer

    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"no tokenizer: {str(p)!r} is not a directory")
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        # transformers 5 would build an empty tokenizer (one id, no vocabulary) from config.json
        raise CheckpointError(f"no tokenizer in {str(p)!r}: it holds none of "
                              f"{', '.join(TOKENIZER_FILES)}; save one there "
                              "(tokenizer.save_pretrained) or load it from where it is")
    try:
        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(f"cannot load a tokenizer from {str(p)!r}: {msg}") from None
    return tok


def check_tokenizer_fits(tokenizer, config) -> int:
    """Check that ``tokenizer`` can feed the model of ``config``; return the id range.

    Its ids must stay below the model's ``vocab_size``. The returned range, ``max(len(tokenizer),
    vocab_size)``, is what frequency tables must cover (Pythia pads its embedding to 50304 > 50277
    tokens).

    Raises:
        DataError: the tokenizer has more ids than the model's embedding (a tokenizer of another
            model), or the config declares no vocabulary size.
    """
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise DataError("the model config declares no vocab_size; cannot check its tokenizer")
    n = len(tokenizer)
    if n > vocab:
        raise DataError(
            f"the tokenizer has {n} ids but the model's embedding has {vocab}: it is not this "
            "model's tokenizer (load the tokenizer saved with the checkpoint)"
        )
    return max(n, vocab)


def encode_stream(tokenizer, texts: Sequence[str], *, max_tokens: int | None = None):
    """Concatenate documents into one id stream, each followed by the eos id (if any).

    Returns a 1-D int64 numpy array. Stops once ``max_tokens`` ids are collected. The ids of
    :func:`encode_documents` (which remembers the last few encodings).
    """
    return encode_documents(tokenizer, texts, max_tokens=max_tokens, what="the corpus")[0]


#: The last few encodings (:func:`encode_documents`): key → (ids, doc), oldest first.
_ENCODED: dict[tuple, tuple] = {}
_ENCODED_KEEP = 4


def _encoding_key(tokenizer, texts: Sequence[str], max_tokens: int | None) -> tuple | None:
    """What decides an encoding: the tokenizer's full definition, the texts and the cut.

    None for a tokenizer with no serialisable definition (a slow, Python one): not remembered.
    """
    import hashlib

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    texts_hash = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        texts_hash.update(len(b).to_bytes(8, "little") + b)
    definition = hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()
    return (definition, tokenizer.eos_token_id, tokenizer.sep_token_id, texts_hash.hexdigest(),
            max_tokens)


def encode_documents(tokenizer, texts: Sequence[str], *, max_tokens: int | None = None,
                     what: str = "the eval text"):
    """The id stream and a parallel document id per position: ``(ids (n,), doc (n,))``.

    Documents concatenated, each followed by the eos id (else the sep id, else nothing), cut at
    ``max_tokens``; ``doc[i]`` is the index in ``texts`` of the document position i belongs to
    (its eos included). Both int64 numpy arrays, fresh copies.

    The last few encodings are remembered in the process, keyed by the tokenizer's full
    definition, the texts and the cut: the end-to-end battery measures many trajectories of one
    tokenizer on one eval text, and tokenizing it again took about a tenth of a simulation.
    DataError (naming ``what``) when the texts encode to zero tokens.
    """
    import numpy as np

    texts = list(texts)
    key = _encoding_key(tokenizer, texts, max_tokens)
    if key is not None and key in _ENCODED:
        ids, doc = _ENCODED[key]
        return ids.copy(), doc.copy()
    eos = tokenizer.eos_token_id
    if eos is None:
        eos = tokenizer.sep_token_id
    out: list[int] = []
    owner: list[int] = []
    for i in range(0, len(texts), 64):
        enc = tokenizer(texts[i:i + 64], add_special_tokens=False)["input_ids"]
        for j, e in enumerate(enc):
            out.extend(e)
            if eos is not None:
                out.append(eos)
            owner.extend([i + j] * (len(e) + (eos is not None)))
        if max_tokens is not None and len(out) >= max_tokens:
            out, owner = out[:max_tokens], owner[:max_tokens]
            break
    if not out:
        raise DataError(f"{what} encodes to zero tokens")
    ids, doc = np.asarray(out, dtype=np.int64), np.asarray(owner, dtype=np.int64)
    if key is not None:
        _ENCODED[key] = (ids.copy(), doc.copy())
        while len(_ENCODED) > _ENCODED_KEEP:
            del _ENCODED[next(iter(_ENCODED))]
    return ids, doc

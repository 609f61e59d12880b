"""Reading the files a command is handed, checked for shape and type, not only for syntax.

A file that parses but has the wrong shape (``[]`` where an object belongs, ``{"step": [3]}``
where a whole number belongs) is bad input, not a bug: every reader of a run file, a checkpoint
record or a config goes through :func:`read_json` (and :func:`check_fields` for records nested in
one), so that it raises one typed error naming the file and the field, which the CLI prints as one
line with exit code 2.

Example::

    state = read_json(ck / "train_state.json", fields={"step": int, "tokens_seen": int},
                      error=CheckpointError, hint="delete the checkpoint and resume again")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tangentlab.errors import DataError, TangentlabError

__all__ = ["read_json", "read_text", "check_fields", "type_word"]

#: A field's expected type: a type, or a tuple of types (any of them).
FieldType = type | tuple[type, ...]

_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
          list: "a list", dict: "an object", type(None): "null"}


def type_word(tp: FieldType) -> str:
    """What a JSON value of type ``tp`` is called in a message (``int`` -> "a whole number")."""
    if isinstance(tp, tuple):
        return " or ".join(type_word(t) for t in tp)
    return _WORDS.get(tp, getattr(tp, "__name__", str(tp)))


def _describe(value: Any) -> str:
    word = {bool: "a boolean", int: "a whole number", float: "a number", str: "a string",
            list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)
    text = json.dumps(value, default=str) if not isinstance(value, (dict, list)) or \
        len(json.dumps(value, default=str)) <= 40 else ""
    return f"{word} {text}".strip() if text and word != "null" else word


def _is(value: Any, tp: FieldType) -> bool:
    kinds = tp if isinstance(tp, tuple) else (tp,)
    for kind in kinds:
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if kind is int and isinstance(value, bool):
            continue  # JSON true is not a step count
        if isinstance(value, kind):
            return True
    return False


def _hinted(message: str, hint: str) -> str:
    return f"{message}; {hint}" if hint else message


def check_fields(
    data: Mapping[str, Any],
    *,
    where: str,
    fields: Mapping[str, FieldType] | None = None,
    optional: Mapping[str, FieldType] | None = None,
    error: type[TangentlabError] = DataError,
    hint: str = "",
) -> Mapping[str, Any]:
    """Check that ``data`` has each of ``fields`` (and, where present, ``optional``) with its type.

    Args:
        data: the decoded JSON object.
        where: what ``data`` is, for the message (``"'RUN/manifest.json'"``, or ``"stage
            'theory' in 'RUN/manifest.json'"``).
        fields: required keys and their types (``float`` accepts whole numbers; ``int`` does not
            accept ``true``/``false``).
        optional: keys that may be absent (or null) but otherwise must have the type.
        error: the typed error raised.
        hint: what to do, appended to the message.

    Returns:
        ``data`` itself.
    """
    if not isinstance(data, Mapping):
        raise error(_hinted(f"{where} must be a JSON object, got {_describe(data)}", hint))
    for key, tp in (fields or {}).items():
        if key not in data:
            raise error(_hinted(f"{where} has no field {key!r} ({type_word(tp)})", hint))
        if not _is(data[key], tp):
            raise error(_hinted(f"{where}: field {key!r} must be {type_word(tp)}, got "
                                f"{_describe(data[key])}", hint))
    for key, tp in (optional or {}).items():
        if data.get(key) is not None and not _is(data[key], tp):
            raise error(_hinted(f"{where}: field {key!r} must be {type_word(tp)}, got "
                                f"{_describe(data[key])}", hint))
    return data


def read_text(path: str | Path, *, error: type[TangentlabError] = DataError,
              hint: str = "") -> str:
    """The UTF-8 text of ``path``; a missing, unreadable or non-UTF-8 file is ``error``."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise error(_hinted(f"{str(p)!r} is missing", hint)) from None
    except OSError as exc:
        raise error(_hinted(f"cannot read {str(p)!r} ({exc.strerror or exc})", hint)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(_hinted(f"{str(p)!r} is not UTF-8 text (byte {exc.start})", hint)) from None


def read_json(
    path: str | Path,
    *,
    expect: type = dict,
    fields: Mapping[str, FieldType] | None = None,
    optional: Mapping[str, FieldType] | None = None,
    error: type[TangentlabError] = DataError,
    hint: str = "",
) -> Any:
    """Read a JSON file and check its shape: the top-level type, then the fields of an object.

    Args:
        path: the file.
        expect: the top-level type (``dict`` for an object, ``list`` for an array).
        fields: required keys of an object and their types (see :func:`check_fields`).
        optional: keys that may be absent but otherwise must have the type.
        error: the typed error raised (:class:`~tangentlab.errors.DataError` by default;
            :class:`~tangentlab.errors.CheckpointError` for checkpoints, ...).
        hint: what to do, appended to every message (e.g. "rerun the stage that wrote it").

    Returns:
        The decoded value.

    Raises:
        TangentlabError: (the class given as ``error``) the file is missing, unreadable, not
            UTF-8, not valid JSON, not of type ``expect``, or lacks a field or has one of the
            wrong type; the message names the file and the field.
    """
    p = Path(path)
    text = read_text(p, error=error, hint=hint)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(_hinted(f"{str(p)!r} is not valid JSON ({exc.msg} at line {exc.lineno})",
                            hint)) from None
    if not isinstance(data, expect):
        raise error(_hinted(f"{str(p)!r} must hold {type_word(expect)}, got {_describe(data)}",
                            hint))
    if fields or optional:
        check_fields(data, where=repr(str(p)), fields=fields, optional=optional, error=error,
                     hint=hint)
    return data

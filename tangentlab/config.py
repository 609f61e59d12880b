"""Frozen-dataclass configs: load from TOML, override from the CLI, save with the results.

Every experiment, preset and stage is configured by a frozen dataclass with documented defaults.
This module turns untrusted input (a TOML file, ``--set key=value`` flags) into such a dataclass,
coercing each value to the field's annotated type and raising :class:`~tangentlab.errors.ConfigError`
with the key, the bad value and the expected type when that is impossible.

Constraints are declared on the fields, once (:func:`option`: bounds, choices, non-empty,
unique), and checked in one place (:func:`check_config`, called by every :class:`Config`'s
``__post_init__``), with messages that name the key, the bound and the value received. Relations
between fields go in :meth:`Config.relations`, checked by the same function. Every config's
quick variant is its :meth:`Config.quick` classmethod.

Renamed keys: a config class may declare ``renamed_keys`` (a mapping old key → new key, a
class attribute, not a field). An old key still works for a release: its value goes to the new
key, with a :class:`DeprecatedKeyWarning` (a ``DeprecationWarning``) naming both (both: an error).

Supported field types: ``int``, ``float``, ``bool``, ``str``, ``X | None``, ``Literal[...]``,
``tuple[X, ...]`` and nested frozen dataclasses (a TOML table, or dotted keys ``a.b=1``).

Example::

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Cfg:
    ...     rank: int = 8
    ...     spreads: tuple[float, ...] = (0.1, 0.2)
    >>> load_config(Cfg, overrides={"rank": "4", "spreads": "0.05,0.1"})
    Cfg(rank=4, spreads=(0.05, 0.1))
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tangentlab.errors import ConfigError

__all__ = [
    "DeprecatedKeyWarning",
    "Bound",
    "option",
    "Config",
    "check_config",
    "load_config",
    "config_from_mapping",
    "config_to_dict",
    "config_hash",
    "config_diff",
    "parse_overrides", "read_toml",
]

T = TypeVar("T")


class DeprecatedKeyWarning(DeprecationWarning):
    """A config key was given under its old name (see ``renamed_keys``); it still works."""


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file into a dict.

    A missing or unreadable file, one that is not UTF-8 or not valid TOML is a ConfigError
    naming the file.
    """
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist; pass the path of a TOML file")
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {str(p)!r} is not UTF-8 text (byte {exc.start}); TOML "
                          "files are UTF-8: save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {str(p)!r} ({exc.strerror or exc})") from None


def parse_overrides(items: Iterable[str] | None) -> dict[str, str]:
    """Turn CLI ``key=value`` strings into a dict (values stay strings; coercion comes later)."""
    out: dict[str, str] = {}
    for item in items or ():
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (e.g. rank=8)")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key; use key=value")
        out[key] = value.strip()
    return out


def _unflatten(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Turn dotted keys ``a.b=1`` into nested dicts ``{"a": {"b": 1}}``."""
    nested: dict[str, Any] = {}
    for key, value in mapping.items():
        parts = str(key).split(".")
        cur = nested
        for part in parts[:-1]:
            cur = cur.setdefault(part, {})
            if not isinstance(cur, dict):
                raise ConfigError(f"config key {key!r} sets a field inside a non-table value")
        cur[parts[-1]] = value
    return nested


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in {"none", "null", ""}):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(
            f"config key {key!r} got {value!r}, which is none of "
            f"{' | '.join(_type_name(a) for a in args)}"
        )
    if origin is typing.Literal:
        for arg in args:
            if value == arg or (isinstance(value, str) and str(arg) == value):
                return arg
        raise ConfigError(
            f"config key {key!r} must be one of {', '.join(repr(a) for a in args)}; got {value!r}"
        )
    if origin is tuple:
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            items = [value]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], key) for v in items)
        if args and len(items) != len(args):
            raise ConfigError(f"config key {key!r} needs {len(args)} values, got {len(items)}")
        return tuple(_coerce(v, a, key) for v, a in zip(items, args or [Any] * len(items)))
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key!r} must be a table of {_type_name(tp)} fields")
        return config_from_mapping(tp, value, where=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"config key {key!r} must be true or false; got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"config key {key!r} must be an integer; got the boolean {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(f"config key {key!r} must be an integer; got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"config key {key!r} must be a number; got the boolean {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"config key {key!r} must be a number; got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"config key {key!r} must be a string; got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"config key {key!r} has unsupported type {_type_name(tp)}")


def config_from_mapping(cls: type[T], mapping: Mapping[str, Any], *, where: str = "config") -> T:
    """Build the frozen dataclass ``cls`` from ``mapping``, starting from its defaults.

    Unknown keys are errors (never silently dropped). Dotted keys address nested dataclasses.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    nested = _renamed(cls, _unflatten(mapping), where)
    unknown = sorted(set(nested) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown {where} key(s) {', '.join(repr(k) for k in unknown)}; "
            f"valid keys: {', '.join(sorted(fields))}"
        )
    kwargs: dict[str, Any] = {}
    for name, value in nested.items():
        tp = hints[name]
        key = name if where == "config" else f"{where}.{name}"
        if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
            default = _field_default(fields[name])
            base = config_to_dict(default) if default is not None else {}
            base.update(_flatten(value))
            kwargs[name] = config_from_mapping(tp, base, where=key)
        else:
            kwargs[name] = _coerce(value, tp, key)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"invalid {where}: {exc}") from None


def _renamed(cls: type, nested: dict[str, Any], where: str) -> dict[str, Any]:
    """``nested`` with the old keys of ``cls.renamed_keys`` moved to their new names (warned)."""
    import warnings

    renames = getattr(cls, "renamed_keys", None) or {}
    out = dict(nested)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out:
            raise ConfigError(
                f"{where} keys {old!r} and {new!r} are the same setting ({old!r} is its old "
                f"name); give only {new!r}"
            )
        warnings.warn(f"config key {old!r} is deprecated; use {new!r} (same meaning)",
                      DeprecatedKeyWarning, stacklevel=4)
        out[new] = out.pop(old)
    return out


def _field_default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return None


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, full + "."))
        else:
            out[full] = value
    return out


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    base: T | None = None,
    section: str | None = None,
) -> T:
    """Resolve a config: ``base`` (or the defaults), then the TOML file, then ``overrides``.

    Args:
        cls: the frozen dataclass type.
        path: optional TOML file. If ``section`` is given and the file has that table, only the
            table is used.
        overrides: mapping of (possibly dotted) keys to values or strings, e.g. from
            :func:`parse_overrides`.
        base: a starting instance (for example the ``--quick`` variant) instead of the defaults.
        section: the TOML table to read when the file has one (e.g. ``"reproduce"``).
    """
    values: dict[str, Any] = config_to_dict(base) if base is not None else {}
    values = _flatten(values)
    if path is not None:
        data = read_toml(path)
        if section is not None and isinstance(data.get(section), Mapping):
            data = data[section]
        values.update(_renamed(cls, _flatten(data), str(path)))
    if overrides:  # each layer renamed on its own, so an override beats a file's old key
        values.update(_renamed(cls, dict(overrides), "override"))
    return config_from_mapping(cls, values)


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-able dict of a (nested) dataclass config; tuples become lists."""
    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, dict):
            return {str(k): conv(x) for k, x in v.items()}
        if isinstance(v, Path):
            return str(v)
        return v

    return conv(cfg)


def config_hash(cfg: Any) -> str:
    """First 12 hex digits of the SHA-256 of the config's canonical JSON."""
    data = config_to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def config_diff(base: Any, other: Any) -> dict[str, Any]:
    """The fields of ``other`` whose values differ from ``base``, in field order.

    Both must be instances of one dataclass. This is how a preset instance is written as
    ``key=value`` overrides of the defaults.
    """
    if type(base) is not type(other) or not dataclasses.is_dataclass(base):
        raise TypeError(f"config_diff needs two instances of one dataclass; got {type(base)!r} and {type(other)!r}")
    return {f.name: getattr(other, f.name) for f in dataclasses.fields(base)
            if getattr(base, f.name) != getattr(other, f.name)}


# --------------------------------------------------------------------------------- constraints


@dataclass(frozen=True)
class Bound:
    """A declared constraint on one value (a config field or a prediction parameter).

    Attributes:
        ge, gt, le, lt: numeric bounds (each element of a tuple or array must satisfy them).
        integer: values must be whole numbers.
        choices: the allowed values (each element, for a tuple).
        min_len: a tuple must hold at least this many items.
        unique: a tuple must not list an item twice.
        finite: numbers must be finite (``gt=0`` bounds still admit ``+inf`` when false).
        why: the reason for the bound, added to the error message (e.g. ``"the bootstrap
            resamples batches"``).
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    integer: bool = False
    choices: tuple[Any, ...] = ()
    min_len: int = 0
    unique: bool = False
    finite: bool = True
    why: str = ""

    def describe(self) -> str:
        """The constraint in words, e.g. ``"a whole number >= 1"``."""
        text = self._describe_scalar()
        if self.min_len:
            text = (text + "; " if text != "any value" else "") + f"at least {self.min_len} item(s)"
        if self.unique:
            text = (text + "; " if text != "any value" else "") + "no item twice"
        return text

    def _describe_scalar(self) -> str:
        parts = []
        if self.choices:
            parts.append("one of " + ", ".join(repr(c) for c in self.choices))
        for op, v in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt)):
            if v is not None:
                parts.append(f"{op} {v:g}")
        text = " and ".join(parts)
        if self.integer:
            text = "a whole number" + (f" {text}" if text else "")
        return text or "any value"

    def problem(self, value: Any) -> str | None:
        """None when ``value`` satisfies the bound, else what is wrong (without the key)."""
        if isinstance(value, (tuple, list)):
            if len(value) < self.min_len:
                return f"needs at least {self.min_len} item(s)"
            if self.unique and len(set(value)) != len(value):
                return "must not list an item twice"
            for item in value:
                why = self._scalar_problem(item)
                if why is not None:
                    return f"has item {item!r}, which {why}"
            return None
        return self._scalar_problem(value)

    def _scalar_problem(self, value: Any) -> str | None:
        if self.choices:
            return None if value in self.choices else f"must be {self._describe_scalar()}"
        if value is None or isinstance(value, str):
            return None
        import numpy as np

        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return f"must be a number ({self._describe_scalar()})"
        finite = np.isfinite(arr) | (np.isposinf(arr) & (self.gt is not None or self.ge is not None)
                                     & (not self.finite))
        if not bool(np.all(finite)):
            return f"must be finite ({self._describe_scalar()})"
        ok = finite.copy()
        if self.ge is not None:
            ok &= arr >= self.ge
        if self.gt is not None:
            ok &= arr > self.gt
        if self.le is not None:
            ok &= arr <= self.le
        if self.lt is not None:
            ok &= arr < self.lt
        if self.integer:
            ok &= np.isfinite(arr) & (arr == np.round(arr))
        return None if bool(np.all(ok)) else f"must be {self._describe_scalar()}"


def option(default: Any, **bound: Any) -> Any:
    """A dataclass field with a default and a declared :class:`Bound` (keyword arguments).

    Example::

        >>> @dataclass(frozen=True)
        ... class Cfg(Config):
        ...     rank: int = option(8, ge=1, integer=True)
        >>> Cfg(rank=0)
        Traceback (most recent call last):
        ...
        tangentlab.errors.ConfigError: invalid Cfg: config key 'rank' must be a whole number >= 1; got 0
    """
    return dataclasses.field(default=default, metadata={"bound": Bound(**bound)})


def check_config(cfg: Any) -> None:
    """Check every declared field bound and every relation of ``cfg``.

    One ConfigError naming all problems (key, bound, value received) if any fails.
    """
    problems = []
    for f in dataclasses.fields(cfg):
        bound = f.metadata.get("bound")
        if bound is None:
            continue
        value = getattr(cfg, f.name)
        why = bound.problem(value)
        if why is not None:
            reason = f" ({bound.why})" if bound.why else ""
            problems.append(f"config key {f.name!r} {why}{reason}; got {value!r}")
    relations = getattr(cfg, "relations", None)
    if relations is not None and not problems:  # relations may assume the bounds hold
        problems += [message for ok, message in relations() if not ok]
    if problems:
        raise ConfigError(f"invalid {type(cfg).__name__}: " + "; ".join(problems))


@dataclass(frozen=True)
class Config:
    """Base of every frozen config dataclass: declared bounds and relations checked on creation."""

    def __post_init__(self) -> None:
        check_config(self)

    @classmethod
    def quick(cls):
        """The ``--quick`` variant (the one spelling of every config's; default: the defaults)."""
        return cls()

    def relations(self) -> list[tuple[bool, str]]:
        """Constraints between fields, as ``(holds, message)`` pairs; none by default."""
        return []

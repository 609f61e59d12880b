"""The one registry style: a table of names to ``"module:attribute"``, loaded on first use.

Theory derivations, synthetic experiments and tangent proxies are each looked up by name in a
:class:`Registry`. The table is written out in one place (its order is the order of
:meth:`Registry.names`), nothing is imported until a name is asked for, and an unknown name is an
:class:`~tangentlab.errors.UnknownNameError` that lists the known ones.

>>> r = Registry("thing", {"path": "pathlib:PurePosixPath"})
>>> r.names(), r.load("path").__name__
(('path',), 'PurePosixPath')
>>> r.load("nope")
Traceback (most recent call last):
...
tangentlab.errors.UnknownNameError: unknown thing 'nope'; known: path
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from tangentlab.errors import UnknownNameError

__all__ = ["Registry"]


class Registry:
    """Names to ``"module:attribute"`` targets (a ``kind`` such as ``"derivation"`` names them).

    Args:
        kind: what the entries are, for the unknown-name message.
        table: name -> ``"module:attribute"``, in the canonical order.
        make: how an entry's object is built from the loaded attribute (e.g. a class called
            once); ``get`` caches the result per name. Default: the attribute itself.
        known: the words before the list of names in that message.
        hint: appended to the message (e.g. another accepted spelling).
    """

    def __init__(self, kind: str, table: Mapping[str, str], *,
                 make: Callable[[Any], Any] | None = None, known: str = "known",
                 hint: str = "") -> None:
        self.kind, self.table, self.known, self.hint = kind, dict(table), known, hint
        self._make = make
        self._made: dict[str, Any] = {}

    def names(self) -> tuple[str, ...]:
        """The registered names, in the table's order."""
        return tuple(self.table)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.table

    def load(self, name: str) -> Any:
        """The attribute ``name`` stands for, imported now (UnknownNameError for another name)."""
        if name not in self:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; {self.known}: "
                                   f"{', '.join(self.table)}{self.hint}")
        module, _, attr = self.table[name].partition(":")
        return getattr(importlib.import_module(module), attr)

    def get(self, name: str) -> Any:
        """The object of ``name``: ``make(load(name))``, built once and cached."""
        if name not in self._made:
            target = self.load(name)
            self._made[name] = self._make(target) if self._make is not None else target
        return self._made[name]

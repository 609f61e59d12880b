"""One way to export names lazily from a package ``__init__``.

Every public package re-exports its names explicitly, but loads the module that defines them
only on first access, so ``import tangentlab`` and ``tangentlab --help`` stay fast.

Example::

    >>> __all__, __getattr__, __dir__ = lazy_exports("demo", {"json.decoder": ("JSONDecoder",)})
    >>> __all__
    ['JSONDecoder']
    >>> __getattr__("JSONDecoder")().decode('{"a": 1}')
    {'a': 1}
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """Build ``__all__``, ``__getattr__`` and ``__dir__`` for a package that exports lazily.

    Args:
        package: the package's ``__name__``; module names in ``where`` are relative to it
            (``""`` means the package itself is not used; a name with a dot is absolute).
        where: module name (relative, e.g. ``"train"``, or ``""`` for a subpackage that *is* the
            export, e.g. ``{"": ("measure",)}``) mapped to the names it defines.

    Returns:
        ``(__all__, __getattr__, __dir__)``: assign all three in the package ``__init__``.

    A name listed twice is an error (one place for each list of names).
    """
    table: dict[str, str] = {}
    for module, names in where.items():
        for name in names:
            if name in table:
                raise ValueError(f"{package}: {name!r} is exported from two modules")
            table[name] = module
    exported = list(table)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if module == "":
            return importlib.import_module(f"{package}.{name}")
        full = module if "." in module else f"{package}.{module}"
        return getattr(importlib.import_module(full), name)

    def __dir__() -> list[str]:
        return sorted(exported)

    return exported, __getattr__, __dir__

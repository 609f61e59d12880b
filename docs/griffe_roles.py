"""A griffe extension for the API site: Sphinx roles in docstrings become cross-references.

The docstrings write references the Sphinx way (``:func:`render_report```, ``:class:`~x.y.Z```,
``:mod:`tangentlab.report```), which mkdocstrings would otherwise print literally. This
extension rewrites each role, once the object tree is built, into an optional autorefs
cross-reference ``<autoref identifier="FULL.PATH" optional><code>TITLE</code></autoref>``:

- the target is resolved in the scope of the object whose docstring holds it (a name imported
  there, a sibling, a member of the enclosing class or module), as Python would;
- ``~a.b.c`` shows ``c``, any other target shows as written;
- a target that cannot be resolved, or one whose page is not in the site, renders as plain code
  (``optional``: no broken link and no warning).

mkdocs.yml loads it with ``extensions: [docs/griffe_roles.py]``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(?P<target>[^`]+)`")


def _resolve(obj: Any, target: str) -> str | None:
    head, _, rest = target.partition(".")
    for name in (target, head):
        try:
            path = obj.resolve(name)
        except Exception:  # griffe's NameResolutionError, or an alias it cannot follow
            continue
        return path if name == target else f"{path}.{rest}"
    return target if target.startswith("tangentlab.") else None


def rewrite(obj: Any, text: str) -> str:
    """``text`` with every Sphinx role replaced by an optional cross-reference (or code)."""

    def one(match: re.Match) -> str:
        target = match["target"].strip()
        short = target.startswith("~")
        target = target.lstrip("~")
        if "<" in target and target.endswith(">"):  # :func:`title <target>`
            title, target = (p.strip() for p in target[:-1].split("<", 1))
        else:
            title = target.rsplit(".", 1)[-1] if short else target
        if target.endswith("()"):
            target = target[:-2]
        ident = _resolve(obj, target)
        if ident is None:
            return f"`{title}`"
        return f'<autoref identifier="{ident}" optional><code>{title}</code></autoref>'

    return _ROLE.sub(one, text)


class SphinxRoles(griffe.Extension):
    """Rewrite ``:role:`target``` in every docstring into an optional cross-reference."""

    def on_object(self, *, obj: Any, loader: Any, **kwargs: Any) -> None:  # noqa: D102
        doc = getattr(obj, "docstring", None)
        if doc is not None and ":`" in doc.value:
            doc.value = rewrite(obj, doc.value)

    def on_package(self, *, pkg: Any, loader: Any, **kwargs: Any) -> None:  # noqa: D102
        self.on_object(obj=pkg, loader=loader)  # the top-level package is not an "object" event

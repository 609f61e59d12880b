"""Generate the theory pages of the docs: ``python -m tangentlab.theory.pages docs/theory``.

One Markdown page per registered derivation (``docs/theory/<name>.md``), written by
:func:`tangentlab.theory.render.derivation_markdown`. Kept apart from :mod:`~tangentlab.theory.render`
so that rendering one derivation never needs the registry (no import cycle).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["render_all", "main"]


def render_all(directory: str | Path) -> list[Path]:
    """Write one page per registered derivation into ``directory``; returns the paths."""
    from tangentlab.runs import atomic_write_text
    from tangentlab.theory.derivation import get, names
    from tangentlab.theory.render import derivation_markdown

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names():
        p = out / f"{name}.md"
        atomic_write_text(p, derivation_markdown(get(name)))
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Write the pages into the folder in ``argv`` (``python -m tangentlab.theory.pages DIR``)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m tangentlab.theory.pages DIR\n")
        return 2
    for p in render_all(args[0]):
        print(p)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

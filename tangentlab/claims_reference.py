"""Write the claims page (``docs/claims.md``) from the claims table.

Regenerate it with one command::

    python -m tangentlab.claims_reference docs/claims.md        # or: make docs

``python -m tangentlab.claims_reference --check docs/claims.md`` exits 1 when the file is out of
date. The text is :func:`tangentlab.claims.pages.render_claims`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the claims page at the path in ``argv`` (default docs/claims.md)."""
    from tangentlab.claims.pages import render_claims

    ap = argparse.ArgumentParser(prog="python -m tangentlab.claims_reference",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default="docs/claims.md", help="output Markdown file")
    ap.add_argument("--check", action="store_true", help="exit 1 if PATH differs from the table")
    args = ap.parse_args(argv)
    path, text = Path(args.path), render_claims()
    if args.check:
        if (path.read_text() if path.is_file() else "") != text:
            sys.stderr.write(f"{path} is out of date; regenerate it with "
                             f"`python -m tangentlab.claims_reference {path}`\n")
            return 1
        return 0
    from tangentlab.runs import atomic_write_text

    atomic_write_text(path, text)
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

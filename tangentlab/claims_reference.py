"""Write the claims page (``docs/claims.md``) from the claims table.

Regenerate it with one command::

    python -m tangentlab.claims_reference docs/claims.md        # or: make docs

``python -m tangentlab.claims_reference --check docs/claims.md`` exits 1 when the file is out of
date. The text is :func:`tangentlab.claims.pages.render_claims`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or ``--check``) the claims page at the path in ``argv`` (default docs/claims.md)."""
    from tangentlab.claims.pages import render_claims
    from tangentlab.cli_reference import write_generated_page

    return write_generated_page(argv, module="tangentlab.claims_reference",
                                default="docs/claims.md", description=__doc__.splitlines()[0],
                                render=render_claims)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

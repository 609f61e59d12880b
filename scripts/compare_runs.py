#!/usr/bin/env python3
"""Compare two reproduce run directories' results.csv and checks.json, byte for byte.

    python scripts/compare_runs.py BEFORE_DIR AFTER_DIR

Every ``results.csv`` and ``checks.json`` under BEFORE_DIR is compared with the file at the same
relative path under AFTER_DIR. Files only AFTER_DIR has are listed (new outputs, not a
difference). Exit status: 0 when every file BEFORE_DIR holds is byte-identical in AFTER_DIR,
1 otherwise (each difference named), 2 on bad arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

NAMES = ("results.csv", "checks.json")


def files(root: Path) -> set[Path]:
    """The compared files under ``root``, relative to it."""
    return {p.relative_to(root) for name in NAMES for p in root.rglob(name)}


def main(argv: list[str]) -> int:
    """Compare and print one line per file; returns the exit status."""
    if len(argv) != 2 or not all(Path(a).is_dir() for a in argv):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    before, after = (Path(a) for a in argv)
    old, new = files(before), files(after)
    bad = 0
    for rel in sorted(old):
        if rel not in new:
            print(f"MISSING    {rel}")
            bad += 1
        elif (before / rel).read_bytes() != (after / rel).read_bytes():
            print(f"DIFFERENT  {rel}")
            bad += 1
        else:
            print(f"identical  {rel}")
    for rel in sorted(new - old):
        print(f"new        {rel}")
    print(f"{len(old) - bad}/{len(old)} files byte-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

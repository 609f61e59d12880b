"""``tangentlab validate frequency-null RUN``: the frequency-distance row under permuted tables.

A verb of ``tangentlab validate`` (registered by :mod:`tangentlab.commands.validate`); the work is
:mod:`tangentlab.validate.run_nulls.frequency_table`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["add_frequency_null"]


def add_frequency_null(verbs, *, parent_flags: Callable, print_checks: Callable) -> None:
    """Add the ``frequency-null`` verb to ``validate``'s verbs."""
    from tangentlab.commands import positive_int

    p = verbs.add_parser(
        "frequency-null", help="the frequency-distance row of a run under permuted frequency "
                               "tables (a null on the run's own activations)",
        description=(
            "Shuffle RUN's frequency table among the token ids that occur in it, N times, and "
            "decide the frequency-distance row each time with the run's own code (its eval "
            "batches, the measurement's frequency rows, the report's rule and its combination "
            "of units): frequency then has nothing to do with the geometry, so a 'supported' or "
            "'not supported' is wrong. Table 0 is the run's own and must give the run's stored "
            "numbers and raw status (check same_code). Writes null.csv, checks.json and "
            "manifest.json to --out. Exit code 0 when every check passes (the wrong rates <= "
            "0.05 with their upper Wilson bound <= 0.08, which needs N >= 45), 1 when one "
            "fails, 2 on bad input."))
    p.add_argument("run", metavar="RUN", help="a reproduce run or a measure directory")
    p.add_argument("--permutations", type=positive_int, default=200, metavar="N",
                   help="permuted tables (default 200)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="run directory to write (default: runs/frequency-null)")
    p.set_defaults(func=lambda args: _run(args, parent_flags, print_checks))


def _run(args: argparse.Namespace, parent_flags: Callable, print_checks: Callable) -> int:
    from pathlib import Path

    from tangentlab.commands import writing_run
    from tangentlab.errors import ConfigError
    from tangentlab.validate.run_nulls.frequency_table import KIND, write_frequency_table_null

    given = [f for f in parent_flags(args) if f != "--seed"]
    if given:
        raise ConfigError(f"frequency-null reads RUN's own settings; drop {' and '.join(given)}")
    out = Path(args.out) if args.out is not None else Path("runs") / "frequency-null"
    with writing_run(out, kind=KIND, command="validate frequency-null"):
        path, passed = write_frequency_table_null(args.run, out, permutations=args.permutations,
                                                  seed=args.seed)
    return print_checks(path, note="", what=f"validate frequency-null ({args.permutations} "
                        "tables)", passed=passed)

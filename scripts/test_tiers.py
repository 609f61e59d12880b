#!/usr/bin/env python3
"""Run the whole pytest suite as its two tiers side by side: what ``make test`` runs.

    python scripts/test_tiers.py [PYTEST_ARGS...]

The ``model`` tier (tests that train, measure or reproduce and read a session fixture:
``-m "model and not standalone"``; ``tests/conftest.py`` marks them) runs in the foreground and
prints as it goes. The unit tier (``-m "not model or standalone"``: the unit tests and the model
tests that read no session fixture) runs at the same time in a second pytest process; its output
is held and printed after the model tier's, under its own header. PYTEST_ARGS go to both.

Why two processes and not ``pytest -n 2 --dist loadgroup``: the model tests share session
fixtures (one quick reproduce per session), so they must all run in one process, and xdist's
``loadgroup`` no longer groups anything with pytest 9.2 (pytest-xdist issue #1386: it renames
node ids, which pytest 9.2 ignores). The unit tests run numpy, BLAS and torch on one thread
(``tests/conftest.py``). The standalone model tests go to the second process so that the two take
about as long (a fresh clone on a quiet 2-core machine, side by side: 648 s and 352 s before
they moved, 504 s and 552 s after).

Exit status: the model tier's when it is not 0, else the unit tier's (pytest's codes: 0 all
passed, 1 a test failed, 2 interrupted, 5 no tests collected). A tier that collected nothing
(PYTEST_ARGS naming only unit tests, say) counts as passed when the other tier ran tests; 5 only
when neither collected any.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

#: pytest's exit status when a run collected no tests.
NO_TESTS = 5
#: The two tiers' marker expressions: the session-fixture model tests, and everything else.
MODEL_TIER = "model and not standalone"
UNIT_TIER = "not model or standalone"


def main(argv: list[str]) -> int:
    """Run both tiers; print the unit tier's output after the model tier's; return the status."""
    python = sys.executable
    print(f"unit tier (-m '{UNIT_TIER}') runs beside the model tier; its output follows at the "
          "end", flush=True)
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as unit_log:
        unit = subprocess.Popen([python, "-m", "pytest", "-m", UNIT_TIER, *argv],
                                stdout=unit_log, stderr=subprocess.STDOUT)
        try:
            model_rc = subprocess.call([python, "-m", "pytest", "-m", MODEL_TIER, *argv])
        finally:
            unit_rc = unit.wait()
        unit_log.seek(0)
        print("\n" + "=" * 30 + f" unit tier (-m '{UNIT_TIER}') " + "=" * 30, flush=True)
        sys.stdout.write(unit_log.read())
    print(f"\ntiers: model exit {model_rc}, unit exit {unit_rc}", flush=True)
    if model_rc == unit_rc == NO_TESTS:
        return NO_TESTS
    model_rc, unit_rc = (0 if rc == NO_TESTS else rc for rc in (model_rc, unit_rc))
    return model_rc or unit_rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The theory producer: ``verify(seed)`` of every derivation, written as a run directory.

:func:`produce` writes, through the run-directory contract (:func:`tangentlab.contract.write_run`):

- ``results.csv``: one row per check of every derivation (``derivation``, ``check``, ``method``
  the check kind, ``metric`` ``residual``, ``value`` its residual, ``tolerance``, ``seed``);
- ``checks.json``: the same checks, each named ``"<derivation>: <check>"`` with ``passed``;
- ``verify.json``: the per-derivation ``verify()`` reports (what the report reads), with their
  wall seconds;
- ``manifest.json`` (kind ``theory/verify``).

Residuals depend only on the seed, so the same seed writes the same ``results.csv`` and
``checks.json``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["THEORY_KIND", "produce"]

#: The manifest ``kind`` of a theory run directory.
THEORY_KIND = "theory/verify"


def produce(out: str | Path, *, seed: int = 0, derivations: Sequence[str] = ()) -> Path:
    """Verify ``derivations`` (empty: all of :func:`tangentlab.theory.names`) into ``out``.

    An unknown name is an :class:`~tangentlab.errors.UnknownNameError` before anything runs.
    Returns ``out``.
    """
    from tangentlab.contract import RunOutput, write_run
    from tangentlab.progress import log
    from tangentlab.runs import VERIFY_NAME
    from tangentlab.theory.derivation import get, names

    selected = list(derivations) or list(names())
    found = [get(n) for n in selected]  # unknown names fail before any output

    def run() -> RunOutput:
        entries: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        checks: list[dict[str, Any]] = []
        for name, derivation in zip(selected, found):
            start = time.perf_counter()
            rep = derivation.verify(seed=seed)
            seconds = time.perf_counter() - start
            d = dict(rep.to_dict())
            d.setdefault("name", name)
            d["passed"] = bool(rep.passed)
            d["seconds"] = round(seconds, 3)
            entries.append(d)
            for c in rep.checks:
                rows.append({"experiment": "theory", "derivation": name, "check": c.name,
                             "method": c.kind, "metric": "residual", "value": float(c.residual),
                             "tolerance": float(c.tolerance), "seed": seed})
                checks.append({**c.to_dict(), "name": f"{name}: {c.name}", "derivation": name})
            n_fail = len(rep.failures)
            log(f"    theory {name}: {'passed' if rep.passed else f'{n_fail} check(s) FAILED'} "
                f"({seconds:.1f} s)")
        verify = {"seed": seed, "passed": all(e["passed"] for e in entries), "derivations": entries}
        return RunOutput(rows=rows, checks=checks, files={VERIFY_NAME: verify})

    return write_run(out, kind=THEORY_KIND, config={"derivations": selected}, produce=run,
                     seeds={"seed": seed}, quick=False, dtype="float64")

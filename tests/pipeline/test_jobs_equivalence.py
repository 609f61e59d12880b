"""A fixed-seed `reproduce --quick` gives byte-identical stage results with --jobs 1 and --jobs 2,
and whichever other stages ran beside them (slow).

The ``--jobs 1`` side is the small quick reproduce (decoder, one derivation, one experiment, run
one stage at a time); the ``--jobs 2`` side is the whole quick reproduce, where every stage runs
next to others. Each stage the small run has must give the same bytes in both.
"""

from __future__ import annotations

import json

import pytest

# the files whose bytes must not depend on how many stages ran at once
_COMPARED = ("results.csv", "checks.json")
# stages whose results depend on which other stages ran (the theory table lists the derivations
# that ran, the report renders every stage): compared below by derivation, or not at all
_WHOLE_RUN = ("theory", "report")


@pytest.mark.slow
def test_jobs_1_and_jobs_2_give_identical_results(quick_reproduce):
    one, rc1, err1, _ = quick_reproduce(1, small=True)
    assert rc1 == 0, err1[-3000:]
    two, rc2, err2, _ = quick_reproduce(2)
    assert rc2 == 0, err2[-3000:]
    m1, m2 = (json.loads((r / "manifest.json").read_text()) for r in (one, two))
    assert m1["jobs"] == 1 and m2["jobs"] == 2
    assert all(s["status"] == "done" for s in m2["stages"].values())
    assert set(m1["stages"]) < set(m2["stages"])  # the small run's stages, all in the whole run
    compared = set()
    for path in sorted(one.rglob("*")):
        rel = path.relative_to(one)
        if path.name not in _COMPARED or rel.parts[0] in _WHOLE_RUN:
            continue
        twin = two / rel
        assert twin.is_file(), f"{twin} missing with --jobs 2"
        assert path.read_bytes() == twin.read_bytes(), f"{rel} differs"
        compared.add(str(rel))
    assert {"measure/decoder/results.csv", "synthetic/river-valley/results.csv"} <= compared
    # the theory checks' numbers too, derivation by derivation (their timings naturally differ)
    def checks(run):
        verify = json.loads((run / "theory" / "verify.json").read_text())
        return {d["name"]: [{k: v for k, v in c.items() if k != "seconds"} for c in d["checks"]]
                for d in verify["derivations"]}

    c1, c2 = checks(one), checks(two)
    assert set(c1) == {"river-valley"} and c1["river-valley"] == c2["river-valley"]
    # every stage kept its own log
    assert {p.name for p in (two / "logs").glob("*.log")} >= {"train__encoder.log", "report.log"}

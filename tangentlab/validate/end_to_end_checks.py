"""Judging an end-to-end run: rates with Wilson intervals and one pass/fail per criterion.

:func:`summarize` turns the simulations' statuses (and their units' enrichment intervals) into
the run's ``results.csv`` rows and ``checks.json`` checks:

- per (row, scenario): each status's rate; the wrong-"supported" / wrong-"not supported" rate
  the truth implies and power where it is positive. From :data:`BOUND_SIMS` simulations on
  (a certifying run) a wrong rate passes at ≤ :data:`WRONG_RATE_MAX` with its upper Wilson
  bound ≤ :data:`WRONG_BOUND_MAX` and power at ≥ :data:`POWER_MIN`; below, the same bands are
  a screen judged with the exact binomial 1% tail (:func:`_judged_rate`);
- per row, the wrong "supported" and wrong "not supported" rates pooled over the nulls
  (:data:`POOLED`), against the rules' per-unit level :data:`POOLED_WRONG_MAX`;
- the enrichment interval's coverage of the planted truth where it is exact
  (:data:`COVERAGE_MIN`, :data:`TRUTH_ABOVE_MAX`);
- one check that every simulation ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tangentlab.validate.end_to_end_config import EndToEndConfig
from tangentlab.validate.end_to_end_records import SimulationResult

__all__ = ["summarize", "WRONG_RATE_MAX", "WRONG_BOUND_MAX", "POWER_MIN",
           "POOLED_WRONG_MAX", "BOUND_SIMS", "COVERAGE_MIN", "TRUTH_ABOVE_MAX", "POOLED", "EXPERIMENT"]

WRONG_RATE_MAX = 0.05
WRONG_BOUND_MAX = 0.08
POWER_MIN = 0.8
#: Simulations per scenario from which the Wilson bound is checked (a certifying run).
BOUND_SIMS = 45
#: The ``experiment`` column of an end-to-end run's rows (and its manifest ``kind``).
EXPERIMENT = "validate/end-to-end"
_EXPERIMENT = EXPERIMENT


def _wilson(k: int, n: int) -> tuple[float, float]:
    from tangentlab.validate.battery import wilson_interval

    return wilson_interval(k, n)


def _judged_rate(rows: list[dict[str, Any]], base: dict[str, Any], name: str, metric: str,
                 k: int, n: int, *, bound: bool, low: float | None = None,
                 high: float | None = None) -> dict[str, Any]:
    """One (row, null) rate: its result row (appended to ``rows``) and its check.

    With the bound checked (a certifying run, ≥ :data:`BOUND_SIMS` simulations) the criteria of
    a certificate: a wrong rate ≤ ``high`` with its upper Wilson bound ≤
    :data:`WRONG_BOUND_MAX`, power ≥ ``low`` (demonstrations, strict by design). Below that, a
    screen: :func:`tangentlab.validate.battery.rate_check`, which fails a rule whose true rate
    lies on the band's edge at most 1% of the time at any number of simulations (issue 33: at 4
    simulations a point criterion failed a power of 0.9 a third of the time).
    """
    from tangentlab.validate.battery import BatteryCheck, rate_check

    rate = k / n if n else float("nan")
    lo, hi = _wilson(k, n)
    rows.append({**base, "metric": metric, "value": rate, "ci_low": lo, "ci_high": hi})
    what = "supported" if metric == "power" else "wrong"
    detail = f"{k}/{n} {what}; Wilson 95% [{lo:.3f}, {hi:.3f}]"
    if bound:
        ok = (rate >= low) if low is not None else (rate <= high and hi <= WRONG_BOUND_MAX)
        target = (f">= {low:g}" if low is not None else
                  f"<= {high:g}, Wilson upper <= {WRONG_BOUND_MAX:g}")
        chk = BatteryCheck(name=name, kind="end-to-end", measured=rate, target=target, low=low,
                           high=high, passed=bool(ok), n=n, detail=detail)
    else:
        chk = rate_check(name, "end-to-end", rate, n, low=low, high=high,
                         detail=detail + "; a screen (too few simulations for the Wilson bound)")
    return _check_dict(chk, row=base["row"], null=base["null"], metric=metric,
                       truth=base["truth"], k=k, n=n, bound=bound)


def summarize(cfg: EndToEndConfig, results: Sequence[SimulationResult]):
    """(result rows, checks) from the simulations: rates with Wilson intervals, pass/fail."""
    from tangentlab.claims.rules import NOT_SUPPORTED, STATUS_WORDS, SUPPORTED
    from tangentlab.validate.battery import BatteryCheck
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS, scenario

    bound = cfg.sims >= BOUND_SIMS
    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for name in cfg.scenarios:
        sc = scenario(name)
        got = [r for r in results if r.scenario == name]
        n = len(got)
        for row in PREDICTION_ROWS:
            truth = sc.truth.get(row)
            statuses = [r.statuses.get(row, "not run") for r in got]
            base = {"experiment": _EXPERIMENT, "row": row, "null": name, "truth": truth or "",
                    "n": n, "seed": cfg.seed}
            for word in STATUS_WORDS:
                k = sum(s == word for s in statuses)
                lo, hi = _wilson(k, n)
                rows.append({**base, "metric": "rate_" + word.replace(" ", "_"),
                             "value": k / n if n else float("nan"), "ci_low": lo, "ci_high": hi})
            if truth is None:
                continue
            wanted = []
            if truth in ("null", "negative"):
                wanted.append(("wrong_supported", SUPPORTED))
            if truth in ("null", "positive"):
                wanted.append(("wrong_not_supported", NOT_SUPPORTED))
            for metric, word in wanted:
                k = sum(s == word for s in statuses)
                checks.append(_judged_rate(rows, base, f"{row} / {name}: {metric}", metric, k,
                                           n, bound=bound, high=WRONG_RATE_MAX))
            if truth == "positive":
                k = sum(s == SUPPORTED for s in statuses)
                checks.append(_judged_rate(rows, base, f"{row} / {name}: power", "power", k, n,
                                           bound=bound, low=POWER_MIN))
    checks += _pooled_checks(cfg, results, rows, bound)
    checks += _coverage_checks(cfg, results, rows, bound)
    failed = [r for r in results if r.error]
    checks.append({**BatteryCheck(
        name="simulations: every one ran", kind="end-to-end", measured=float(len(failed)),
        target="0 simulations raised", low=None, high=0.0, passed=not failed, n=len(results),
        detail=("; ".join(f"{r.scenario} #{r.sim}: {r.error}" for r in failed[:5])
                or "none raised")).to_dict(),
        "row": "", "null": "", "metric": "errors", "truth": "", "ci_low": float("nan"),
        "ci_high": float("nan"), "bound_checked": bound})
    return rows, checks


#: The row-level wrong-status rate the nulls may show, pooled over them: the per-unit one-sided
#: level of the rules. With intersection-union (``claims.rules.combine``: "supported" or "not
#: supported" only when every unit says so) the row's rate is at most one unit's.
POOLED_WRONG_MAX = 0.025
#: The band of the enrichment interval's coverage of a planted truth it must meet (95% nominal),
#: and the rate at which the truth may lie above it (the side a false "not supported" needs).
COVERAGE_MIN = 0.93
TRUTH_ABOVE_MAX = 0.035
POOLED = "all nulls (pooled)"


def _check_dict(chk, *, row: str, null: str, metric: str, truth: str, k: int, n: int,
                bound: bool) -> dict[str, Any]:
    lo, hi = _wilson(k, n)
    return {**chk.to_dict(), "row": row, "null": null, "metric": metric, "truth": truth,
            "ci_low": lo, "ci_high": hi, "bound_checked": bound}


def _pooled_checks(cfg: EndToEndConfig, results: Sequence[SimulationResult],
                   rows: list[dict[str, Any]], bound: bool) -> list[dict[str, Any]]:
    """Per row, the wrong "supported" and wrong "not supported" rates pooled over the nulls.

    Each over every scenario whose truth makes the status wrong (null or negative for
    "supported", null for "not supported"), judged by
    :func:`tangentlab.validate.battery.rate_check` against :data:`POOLED_WRONG_MAX` (exact
    binomial 1% tail): a row whose rule keeps its stated level passes at least 99% of the time,
    whatever the number of simulations, and pooling gives the screen the simulations a single
    null lacks.
    """
    from tangentlab.claims.rules import NOT_SUPPORTED, SUPPORTED
    from tangentlab.validate.battery import rate_check
    from tangentlab.validate.planted_scenarios import PREDICTION_ROWS, scenario

    out = []
    for row in PREDICTION_ROWS:
        for metric, word, truths in (("wrong_supported", SUPPORTED, ("null", "negative")),
                                     ("wrong_not_supported", NOT_SUPPORTED, ("null",))):
            nulls = [n for n in cfg.scenarios if scenario(n).truth.get(row) in truths]
            got = [r.statuses.get(row, "not run") for r in results if r.scenario in nulls]
            if not got:
                continue
            k, n = sum(s == word for s in got), len(got)
            lo, hi = _wilson(k, n)
            rows.append({"experiment": _EXPERIMENT, "row": row, "null": POOLED,
                         "truth": "/".join(truths), "n": n, "seed": cfg.seed, "metric": metric,
                         "value": k / n, "ci_low": lo, "ci_high": hi})
            chk = rate_check(f"{row} / {POOLED}: {metric}", "end-to-end", k / n, n,
                             high=POOLED_WRONG_MAX,
                             detail=f"{k}/{n} wrong over {len(nulls)} scenarios; Wilson 95% "
                                    f"[{lo:.3f}, {hi:.3f}]")
            out.append(_check_dict(chk, row=row, null=POOLED, metric=metric,
                                   truth="/".join(truths), k=k, n=n, bound=bound))
    return out


def _coverage_checks(cfg: EndToEndConfig, results: Sequence[SimulationResult],
                     rows: list[dict[str, Any]], bound: bool) -> list[dict[str, Any]]:
    """The enrichment interval against the planted truth, pooled over the scenarios that fix it.

    Every unit's interval at every checkpoint (:attr:`SimulationResult.enrichment_intervals`) in
    a scenario whose enrichment is exact at every step (:func:`~tangentlab.validate.planted_scenarios.
    enrichment_truth`): its coverage must reach :data:`COVERAGE_MIN` and the truth may lie above
    it at most :data:`TRUTH_ABOVE_MAX` of the time, each judged with the exact binomial 1% tail.
    The rows' own checks cannot see an interval that is too narrow: intersection-union asks every
    unit to err at once, and an interval half as wide errs in one unit of a pair.
    """
    from tangentlab.validate.battery import rate_check
    from tangentlab.validate.planted_scenarios import enrichment_truth

    pairs = [(iv, enrichment_truth(r.scenario)) for r in results
             for iv in r.enrichment_intervals]
    pairs = [(iv, t) for iv, t in pairs if t is not None and None not in iv]
    if not pairs:
        return []
    n = len(pairs)
    above = sum(hi < t for (_, _, hi), t in pairs)
    below = sum(lo > t for (_, lo, _), t in pairs)
    covered = n - above - below
    scen = sorted({r.scenario for r in results if enrichment_truth(r.scenario) is not None})
    detail = (f"{covered}/{n} unit intervals (every checkpoint) cover the planted enrichment "
              f"({len(scen)} scenarios); truth above {above}, below {below}")
    out = []
    for metric, k, band in (("coverage", covered, {"low": COVERAGE_MIN}),
                            ("truth_above_interval", above, {"high": TRUTH_ABOVE_MAX})):
        lo, hi = _wilson(k, n)
        rows.append({"experiment": _EXPERIMENT, "row": "enrichment", "null": POOLED,
                     "truth": "1", "n": n, "seed": cfg.seed, "metric": metric,
                     "value": k / n, "ci_low": lo, "ci_high": hi})
        chk = rate_check(f"enrichment / {POOLED}: interval {metric}", "end-to-end", k / n, n,
                         detail=detail, **band)
        out.append(_check_dict(chk, row="enrichment", null=POOLED, metric=metric, truth="1",
                               k=k, n=n, bound=bound))
    return out

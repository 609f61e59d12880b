"""The validation battery: every criterion of issue 10, item 8, as a check in a run directory.

:func:`run_battery` runs the studies of :mod:`tangentlab.validate.studies` (power, null
calibration, interval coverage, the frequency-spread null), turns each measured number into a
tidy results row (rates with Wilson 95% intervals) and each criterion into a
:class:`BatteryCheck`, draws the calibration figures, and writes a run directory with
``results.csv``, ``checks.json``, ``manifest.json`` and ``*.png``. The causal rows are
calibrated by the end-to-end battery (:mod:`tangentlab.validate.end_to_end`), whose scenarios
run the real dose-matched test.

Controls of the null calibration: the protocol's own. Since issue 18 the p-value counts
``"full"``-space controls (Haar rank-r subspaces of R^d, exchangeable with Q_T under the null), and
the enrichment still divides by matched-rank complement controls. The false-positive rate is
checked at every r/d of :data:`NULL_GRID` (1/64, 1/16 and 1/4, the quick preset's rank 8 on
d = 32); the full setting also reports the old complement-control p-value beside it (0.12 at
r/d = 1/4).

Every criterion is a band for the statistic's *true* value (coverage in [0.93, 0.97], a
false-positive rate <= 0.06, ...) judged with its Monte-Carlo error (issue 33): :func:`rate_check`
accepts a rate up to the exact binomial 1% tail at the band's edges, :func:`mean_check` a mean up
to t_0.99 of its own standard errors past the edge: a statistic whose true value lies on an edge
fails at most 1% of the time whatever the number of simulations (one outside, ever more often).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tangentlab.config import Config, check_config, option

__all__ = ["BatteryConfig", "BatteryCheck", "BatteryResult", "run_battery", "write_battery",
           "read_checks", "produce", "wilson_interval", "rate_check", "rate_accept",
           "mean_check", "EDGE_FAIL", "VALIDATE_KIND", "NULL_GRID"]

#: The manifest ``kind`` of a validation run directory.
VALIDATE_KIND = "validate"

#: (d, r) of the null calibration: r/d = 1/64, 1/16, 1/4 (the quick preset is rank 8 on d = 32).
NULL_GRID: tuple[tuple[int, int], ...] = ((64, 1), (64, 4), (32, 8))


@dataclass(frozen=True)
class BatteryConfig(Config):
    """Settings of the battery (``quick()`` for tests, ``full()`` for the reported numbers).

    Attributes:
        seed: master seed of every study.
        power_sims, power_signal: simulations and planted signal (extra gradient variance per
            true-tangent direction, relative to a mean of 1 per direction) of the power check.
        power_curve: further signals measured for the power figure (no criterion).
        null_sims: simulations of the null calibration (>= 200).
        null_full_space: also measure the false-positive rate of the old complement-control
            p-value (the protocol's p-value counts full-space controls at every r/d).
        coverage_sims, coverage_batches, coverage_pool, coverage_boot: coverage simulations,
            batches per measurement (>= 32), control pool size and bootstrap replicates.
        old_batches: batches of the old fixed-control bootstrap compared against (0 = skip).
        freq_sims: simulations of the frequency-spread null.
        alpha: level of the tests.
    """

    seed: int = option(0, ge=0, integer=True)
    power_sims: int = option(400, ge=2, integer=True)
    power_signal: float = option(0.5, ge=0)
    power_curve: tuple[float, ...] = option((0.05, 0.1, 0.25), ge=0)
    null_sims: int = option(2000, ge=200, integer=True,
                            why="a false-positive rate near 0.05 needs at least 200 simulations")
    null_full_space: bool = True
    coverage_sims: int = option(2000, ge=2, integer=True)
    coverage_batches: int = option(32, ge=32, integer=True,
                                   why="the protocol's intervals are validated at >= 32 test batches")
    coverage_pool: int = option(200, ge=1, integer=True)
    coverage_boot: int = option(1000, ge=2, integer=True)
    old_batches: int = option(8, ge=0, integer=True)
    freq_sims: int = option(100, ge=2, integer=True)
    alpha: float = option(0.05, gt=0, lt=1)

    @classmethod
    def full(cls, seed: int = 0) -> BatteryConfig:
        """The full setting (the default field values) with master seed ``seed``."""
        return cls(seed=seed)

    @classmethod
    def quick(cls, seed: int = 0) -> BatteryConfig:
        """The quick setting (about a minute on one core: fewer simulations, no power curve)."""
        return cls(seed=seed, power_sims=60, power_curve=(), null_sims=200,
                   null_full_space=False, coverage_sims=600, coverage_pool=100,
                   coverage_boot=400, old_batches=0, freq_sims=8)

    def validate(self) -> None:
        """Raise ConfigError for settings the criteria cannot judge (:func:`~tangentlab.config.check_config`)."""
        check_config(self)


#: How often a criterion may fail a correct statistic: one whose true value lies exactly on an
#: edge of its band fails at most this often (one-sided, at that edge; issue 33).
EDGE_FAIL = 0.01


@dataclass(frozen=True)
class BatteryCheck:
    """One criterion: a band ``[low, high]`` for the statistic's *true* value, judged on an estimate.

    ``measured`` (from ``n`` simulations) passes inside ``[accept_low, accept_high]``: the band
    widened by its Monte-Carlo error (``se``) so that a statistic whose true value lies on an edge
    fails at most :data:`EDGE_FAIL` of the time (:func:`rate_check`, :func:`mean_check`). The
    end-to-end battery leaves those three None and compares with ``low``/``high`` itself.
    """

    name: str
    kind: str  # "power", "calibration", "coverage" or "null"
    measured: float
    target: str
    low: float | None
    high: float | None
    passed: bool
    n: int
    detail: str = ""
    se: float | None = None
    accept_low: float | None = None
    accept_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict for JSON (NaN becomes null; ``se``, ``accept_*`` where set)."""
        from tangentlab.contract import jsonable

        return {k: v for k, v in jsonable(self).items()
                if v is not None or k not in ("se", "accept_low", "accept_high")}


def _band(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"[{low:g}, {high:g}]"
    return f">= {low:g}" if low is not None else f"<= {high:g}"


def _judged(name, kind, measured, n, low, high, se, acc_lo, acc_hi, ok, detail, tol):
    acc = _band(*(None if a is None else round(a, 4) for a in (acc_lo, acc_hi)))
    return BatteryCheck(
        name=name, kind=kind, measured=float(measured), target=f"{_band(low, high)}, accept {acc}",
        low=low, high=high, passed=bool(ok), n=int(n), se=se, accept_low=acc_lo, accept_high=acc_hi,
        detail=(f"{detail}; " if detail else "") + f"band {_band(low, high)} for the true value, "
        f"n = {n}: {tol}; accept {acc}, so a statistic whose true value lies on an edge fails "
        f"at most {EDGE_FAIL:.0%} of the time, and the tolerance shrinks as 1/sqrt(n)")


def rate_accept(n: int, low: float | None = None, high: float | None = None
                ) -> tuple[float | None, float | None]:
    """The accept range of a binomial rate over ``n`` trials whose true rate must lie in the band.

    ``accept_low = q_low / n`` with q_low the :data:`EDGE_FAIL` quantile of Binomial(n, low) (a
    count below it has probability < EDGE_FAIL at true rate ``low``); ``accept_high`` likewise
    from the 1 - EDGE_FAIL quantile at ``high``. This is the comparison of the observed rate's
    one-sided 99% Clopper-Pearson bound with the band, exact where a normal approximation
    (edge -/+ 2.326 se) fails a correct statistic 2.6% of the time at n = 60 and a 0.06 ceiling.
    """
    from scipy.stats import binom

    lo = None if low is None else float(binom.ppf(EDGE_FAIL, n, low)) / n
    hi = None if high is None else float(binom.ppf(1 - EDGE_FAIL, n, high)) / n
    return lo, hi


def rate_check(name: str, kind: str, measured: float, n: int, *, low: float | None = None,
               high: float | None = None, detail: str = "") -> BatteryCheck:
    """A rate (``measured`` = successes / ``n``) whose true rate must lie in ``[low, high]``.

    Passes when the successes lie inside :func:`rate_accept`'s range; ``se`` is the binomial
    standard error ``sqrt(p (1 - p) / n)`` at the band edge nearest ``measured``.
    """
    from tangentlab.errors import ValidationError

    if low is None and high is None:
        raise ValidationError(f"criterion {name!r} needs a band: low, high or both")
    k = round(measured * n) if n > 0 and math.isfinite(measured) else None  # exact comparison
    acc_lo, acc_hi = rate_accept(n, low, high) if n > 0 else (low, high)
    ok = k is not None and (acc_lo is None or k >= round(acc_lo * n)) and \
        (acc_hi is None or k <= round(acc_hi * n))
    edge = min((e for e in (low, high) if e is not None),
               key=lambda e: abs(e - measured) if k is not None else 0)
    se = math.sqrt(edge * (1 - edge) / n) if n > 0 else float("nan")
    tol = (f"observed {k if k is not None else 'n/a'}/{n}; binomial se at the nearest edge "
           f"sqrt({edge:g} x {1 - edge:g} / {n}) = {se:.4f}; the accept limits are the exact "
           f"binomial {EDGE_FAIL:.0%} tails at the edges (about edge -/+ 2.326 se)")
    return _judged(name, kind, measured, n, low, high, se, acc_lo, acc_hi, ok, detail, tol)


def mean_check(name: str, kind: str, measured: float, n: int, se: float, *, high: float,
               detail: str = "") -> BatteryCheck:
    """A mean over ``n`` sims, true value <= ``high``: passes up to ``high + t_(0.99, n-1) se``."""
    from scipy.stats import t as student

    q = float(student.ppf(1 - EDGE_FAIL, n - 1)) if n > 1 else float("nan")
    acc = high + q * se if math.isfinite(q) and math.isfinite(se) else float("nan")
    ok = math.isfinite(measured) and math.isfinite(acc) and measured <= acc
    tol = (f"se = sd / sqrt(n) over the simulations = {se:.4f}; the accept limit adds "
           f"t_(0.99, {n - 1}) = {q:.3f} se, the one-sided {EDGE_FAIL:.0%} tail of a mean whose "
           f"true value is on the edge")
    return _judged(name, kind, measured, n, None, high, se, None, acc, ok, detail, tol)


def wilson_interval(successes: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial rate (successes out of n)."""
    from scipy.special import ndtri

    if n <= 0:
        return float("nan"), float("nan")
    z = float(ndtri(0.5 + confidence / 2))
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    # the interval holds the observed rate (rounding left 0/n a lower bound of 3e-17)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


@dataclass
class BatteryResult:
    """Rows, checks, figures (PNG bytes by file name), studies (dicts) and timings (s)."""

    rows: list[dict[str, Any]]
    checks: list[BatteryCheck]
    figures: dict[str, bytes]
    studies: dict[str, Any]
    timings: dict[str, float]

    @property
    def passed(self) -> bool:
        """True when every check passed."""
        return all(c.passed for c in self.checks)


def _rate_row(metric: str, rate: float, n: int, seed: int, **extra: Any) -> dict[str, Any]:
    lo, hi = wilson_interval(rate * n, n)
    return {"experiment": "validate", "metric": metric, "value": rate, "ci_low": lo,
            "ci_high": hi, "n": n, "seed": seed, **extra}


def _row(metric: str, value: float, n: int, seed: int, **extra: Any) -> dict[str, Any]:
    return {"experiment": "validate", "metric": metric, "value": value, "n": n, "seed": seed,
            **extra}


def run_battery(cfg: BatteryConfig) -> BatteryResult:
    """Run every study of the battery with ``cfg`` (see :class:`BatteryConfig`)."""
    from tangentlab.validate.studies import (
        calibration_study,
        coverage_study,
        frequency_null_study,
    )

    cfg.validate()
    seed = cfg.seed
    rows: list[dict[str, Any]] = []
    checks: list[BatteryCheck] = []
    studies: dict[str, Any] = {}
    timings: dict[str, float] = {}

    # power
    t0 = time.perf_counter()
    pw = calibration_study(n_sims=cfg.power_sims, signal=cfg.power_signal, seed=seed)
    curve = [calibration_study(n_sims=cfg.power_sims, signal=s, seed=seed)
             for s in cfg.power_curve]
    timings["power"] = time.perf_counter() - t0
    studies["power"] = pw.to_dict()
    for st in [pw, *curve]:
        rows.append(_rate_row("power", st.found_rate, st.n_sims, seed, method=st.control_space,
                              prediction=None, signal=st.signal))
        rows.append(_row("mean_enrichment", st.mean_enrichment, st.n_sims, seed,
                         signal=st.signal))
    rows.append(_row("proxy_max_angle_deg", pw.mean_proxy_angle_deg, pw.n_sims, seed,
                     signal=pw.signal))
    checks.append(rate_check(
        "power: planted tangent signal found", "power", pw.found_rate, pw.n_sims, low=0.8,
        detail=(f"signal {pw.signal} (extra variance per true-tangent direction; mean 1 per "
                f"direction), d={pw.d}, r={pw.r}, 32 batches; found = p <= {cfg.alpha} and "
                f"enrichment CI above 1; mean enrichment {pw.mean_enrichment:.3g}; Q_T = PCA of "
                f"token-model activations, max principal angle to the true tangent "
                f"{pw.mean_proxy_angle_deg:.1f} deg")))

    # null calibration, at every r/d of NULL_GRID, with the protocol's p-value (full-space)
    t0 = time.perf_counter()
    nulls = []
    for d, r in NULL_GRID:
        nl = calibration_study(n_sims=cfg.null_sims, signal=0.0, d=d, m=r, control_space="full",
                               seed=seed + 1)
        nulls.append(nl)
        studies[f"null_d{d}_r{r}"] = nl.to_dict()
        rows.append(_rate_row("false_positive_rate", nl.p_rate, nl.n_sims, seed,
                              method="full-space", d=d, rank=r))
        rows.append(_rate_row("false_positive_rate_found_rule", nl.found_rate, nl.n_sims, seed,
                              method="full-space", d=d, rank=r))
        detail = (f"p-value from full-space controls (the protocol's), enrichment against "
                  f"complement controls; d={d}, r={r} (r/d = {r / d:.3f}), 20 controls: p <= "
                  f"{cfg.alpha} happens only at p = 1/21 (nominal rate 0.0476)")
        if cfg.null_full_space:
            nc = calibration_study(n_sims=cfg.null_sims, signal=0.0, d=d, m=r,
                                   control_space="complement", seed=seed + 1)
            studies[f"null_complement_d{d}_r{r}"] = nc.to_dict()
            rows.append(_rate_row("false_positive_rate", nc.p_rate, nc.n_sims, seed,
                                  method="complement", d=d, rank=r))
            detail += f"; old complement-control p-value: {nc.p_rate:.4f}"
        checks.append(rate_check(f"null calibration: false-positive rate at alpha={cfg.alpha}, "
                                 f"r/d = {r}/{d}", "calibration", nl.p_rate, nl.n_sims,
                                 high=0.06, detail=detail))
    nl = nulls[-1]
    timings["null"] = time.perf_counter() - t0

    # coverage
    t0 = time.perf_counter()
    cv = coverage_study(n_sims=cfg.coverage_sims, n_batches=cfg.coverage_batches,
                        pool=cfg.coverage_pool, n_boot=cfg.coverage_boot,
                        old_batches=cfg.old_batches, seed=seed + 2)
    timings["coverage"] = time.perf_counter() - t0
    studies["coverage"] = cv.to_dict()
    for what in ("energy", "enrichment"):
        rows.append(_rate_row(f"coverage_{what}", getattr(cv, f"coverage_{what}"), cv.n_sims,
                              seed, method=f"{cv.interval}/{cv.n_batches} batches"))
        if cfg.old_batches:
            rows.append(_rate_row(f"coverage_{what}", getattr(cv, f"old_coverage_{what}"),
                                  cv.n_sims, seed,
                                  method=f"old fixed-control percentile/{cv.old_batches} batches"))
        checks.append(rate_check(
            f"interval coverage: {what}", "coverage", getattr(cv, f"coverage_{what}"),
            cv.n_sims, low=0.93, high=0.97,
            detail=(f"nominal {cv.confidence}; {cv.interval} interval over {cv.n_batches} "
                    f"batches (4 windows each, window-shared context, batch scales), controls "
                    f"redrawn from a pool of {cfg.coverage_pool}; true enrichment "
                    f"{cv.true_enrichment:.4g}; replicates dropped {cv.replicates_dropped}"
                    + (f"; old method over {cv.old_batches} batches: "
                       f"{getattr(cv, f'old_coverage_{what}'):.3f}" if cfg.old_batches else ""))))

    # frequency-spread null
    t0 = time.perf_counter()
    fq = frequency_null_study(n_sims=cfg.freq_sims, seed=seed + 3)
    timings["frequency_null"] = time.perf_counter() - t0
    studies["frequency_null"] = fq.to_dict()
    rows.append(_row("frequency_null_mean_abs_rho", fq.mean_abs_rho_fair, fq.n_sims, seed,
                     method="one-per-window, equal-size k"))
    rows.append({**_row("frequency_null_mean_rho", fq.mean_rho_fair, fq.n_sims, seed,
                        method="one-per-window, equal-size k"),
                 "ci_low": fq.mean_rho_fair - 1.96 * fq.se_rho_fair,
                 "ci_high": fq.mean_rho_fair + 1.96 * fq.se_rho_fair})
    rows.append(_row("frequency_null_mean_rho", fq.mean_rho_first_k, fq.n_sims, seed,
                     method="first k in row order (old)"))
    checks.append(mean_check(
        "frequency-spread null: mean |Spearman rho|", "null", fq.mean_abs_rho_fair, fq.n_sims,
        fq.se_abs_rho_fair, high=0.03,
        detail=(f"spread independent of frequency, window-shared context; one occurrence per "
                f"window then k={fq.k}; {fq.mean_tokens:.0f} tokens per simulation; mean rho "
                f"{fq.mean_rho_fair:+.4f} (se {fq.se_rho_fair:.4f}); old first-k rule: mean rho "
                f"{fq.mean_rho_first_k:+.4f}")))

    figures = _figures(pw, curve, nl, cv, fq)
    return BatteryResult(rows=rows, checks=checks, figures=figures, studies=studies,
                         timings=timings)


def _figures(pw, curve, nl, cv, fq) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tangentlab.synthetic.experiments import figure_png

    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    # null p-values
    p = np.asarray(nl.p_values)
    grid = np.arange(1, 22) / 21
    counts = np.array([np.sum(np.isclose(p, g)) for g in grid]) / p.size
    ax[0].bar(grid, counts, width=0.04, color="tab:blue")
    ax[0].axhline(1 / 21, color="k", ls="--", lw=1, label="uniform")
    ax[0].set(title=f"null p-values ({nl.control_space}), FPR {nl.p_rate:.3f}",
              xlabel="p", ylabel="share")
    ax[0].legend(fontsize=8)
    # coverage
    labels, vals = ["energy", "enrichment"], [cv.coverage_energy, cv.coverage_enrichment]
    if cv.old_batches:
        labels += ["energy (old)", "enrichment (old)"]
        vals += [cv.old_coverage_energy, cv.old_coverage_enrichment]
    ax[1].bar(range(len(vals)), vals, color=["tab:green"] * 2 + ["tab:red"] * (len(vals) - 2))
    ax[1].axhspan(0.93, 0.97, color="0.85", zorder=0, label="band for the true coverage 93-97%")
    ax[1].hlines(rate_accept(cv.n_sims, 0.93, 0.97), -0.5, len(vals) - 0.5, colors="k", lw=1,
                 linestyles=":", label=f"accept range at {cv.n_sims} sims (Monte-Carlo error)")
    ax[1].set_xticks(range(len(vals)), labels, fontsize=7)
    ax[1].set(ylim=(0.6, 1.0), title=f"coverage of nominal 95% ({cv.n_sims} sims)")
    ax[1].legend(fontsize=8)
    # frequency null
    ax[2].hist(fq.rho_first_k, bins=15, alpha=0.6, color="tab:red", label="first k (old)")
    ax[2].hist(fq.rho_fair, bins=15, alpha=0.6, color="tab:green", label="one per window")
    ax[2].axvline(0, color="k", lw=1)
    ax[2].set(title="frequency-spread null: Spearman rho", xlabel="rho")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    out = {"validate_calibration.png": figure_png(fig)}
    fig, ax = plt.subplots(1, 1, figsize=(4.5, 3.4))
    pts = sorted([(s.signal, s.found_rate) for s in [pw, *curve]])
    ax.plot([a for a, _ in pts], [b for _, b in pts], "o-", color="tab:blue")
    ax.axhline(0.8, color="k", ls="--", lw=1, label="criterion: true power >= 0.8")
    ax.axhline(rate_accept(pw.n_sims, 0.8)[0], color="k", ls=":", lw=1, label="accept limit")
    ax.set(xlabel="planted signal (extra variance per tangent direction)", ylabel="power",
           ylim=(0, 1.02), title=f"power ({pw.n_sims} sims per point)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out["validate_power.png"] = figure_png(fig)
    return out


def write_battery(out_dir: str | Path, cfg: BatteryConfig, *, quick: bool) -> tuple[Path, bool]:
    """Run the battery and write its run directory atomically; returns (path, all passed).

    Written through the run-directory contract (:func:`tangentlab.contract.write_run`):
    ``out_dir`` must be new, empty or an earlier validation run (which is replaced); a run of
    any other kind is refused with an :class:`~tangentlab.errors.OutputPathError` before the
    battery runs. The CLI also holds the run lock (``tangentlab.commands.writing_run``).
    """
    from tangentlab.contract import RunOutput, run_passed, write_run

    cfg.validate()

    def produce() -> RunOutput:
        res = run_battery(cfg)
        return RunOutput(rows=res.rows, checks=list(res.checks), figures=res.figures,
                         timings=dict(res.timings),
                         extra={"null_control_space": "full",
                                "null_grid": [list(x) for x in NULL_GRID],
                                "studies": res.studies})

    out = write_run(out_dir, kind=VALIDATE_KIND, config=cfg, produce=produce,
                    seeds={"seed": cfg.seed}, quick=quick, timer_name="total")
    return out, run_passed(out)


def produce(out: str | Path, *, seed: int = 0, quick: bool = False) -> Path:
    """The validation producer: the battery (quick or full) with master seed ``seed`` into ``out``.

    What ``tangentlab validate [--quick]`` and the pipeline's ``validate`` stage run.
    """
    cfg = BatteryConfig.quick(seed) if quick else BatteryConfig.full(seed)
    return write_battery(out, cfg, quick=quick)[0]


def read_checks(run_dir: str | Path) -> list[dict[str, Any]]:
    """The criteria of a validation run (``checks.json``), each checked for its fields.

    A file that is not a list of objects with ``name`` (string), ``passed`` (boolean),
    ``measured`` (number or null), ``target`` (string) and ``n`` (whole number) is a
    :class:`~tangentlab.errors.DataError` naming the file and the field
    (:func:`tangentlab.contract.read_checks`).
    """
    from tangentlab.contract import read_checks as read_run_checks

    return read_run_checks(run_dir, fields={"target": str, "n": int},
                           optional={"measured": float, "detail": str},
                           hint="rerun tangentlab validate")

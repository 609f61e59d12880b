"""Reading one measurement's tidy results table: typed estimates, intervals and ranges.

A measurement run (``tangentlab empirical measure``, or a reproduce ``measure/<arch>`` stage)
stores one number per row. :class:`ResultTable` indexes such a table once and answers
"metric M at step S, site X, bucket B" with an :class:`Estimate`.

Intervals and ranges are kept apart:

- ``ci_low``/``ci_high`` are confidence intervals;
- ``band_low``/``band_high`` are min-max spreads (over controls, over the checkpoints of an
  early/late window).

Runs written before the ``band_*`` columns existed stored those spreads in ``ci_*``: for them,
the rows that hold spreads (control means, and the ``early``/``late`` window aggregates) are read
as ranges, never as confidence intervals (:data:`OLD_RANGE_METRIC_SUFFIXES`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tangentlab.claims.rules import Interval
from tangentlab.report.figures import Series

__all__ = ["Estimate", "ResultTable", "WINDOW_CHECKPOINTS", "OLD_RANGE_METRIC_SUFFIXES", "fmt"]

#: Checkpoint labels of the rows that aggregate a window of checkpoints (no step).
WINDOW_CHECKPOINTS: tuple[str, ...] = ("early", "late")
#: In runs without ``band_*`` columns, metrics whose ``ci_*`` columns held a min-max spread.
OLD_RANGE_METRIC_SUFFIXES: tuple[str, ...] = ("_control_mean",)


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def fmt(x: Any) -> str:
    """A number for the report: 4 significant digits, scientific when very large or small."""
    v = _num(x)
    if v is None:
        return "n/a"
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.3g}"
    return f"{v:.4g}"


@dataclass(frozen=True)
class Estimate:
    """One stored number with its confidence interval and its min-max range (either may be absent)."""

    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    band_low: float | None = None
    band_high: float | None = None

    @property
    def present(self) -> bool:
        """True when the value is known."""
        return self.value is not None

    @property
    def has_ci(self) -> bool:
        """True when a confidence interval is stored."""
        return self.ci_low is not None and self.ci_high is not None

    @property
    def has_band(self) -> bool:
        """True when a min-max band (not an interval) is stored."""
        return self.band_low is not None and self.band_high is not None

    def interval_text(self) -> str:
        """``CI [a, b]``, ``range [a, b]`` (min-max), both, or ``no interval stored``."""
        parts = []
        if self.has_ci:
            parts.append(f"CI [{fmt(self.ci_low)}, {fmt(self.ci_high)}]")
        if self.has_band:
            parts.append(f"range [{fmt(self.band_low)}, {fmt(self.band_high)}]")
        return ", ".join(parts) or "no interval stored"

    def text(self) -> str:
        """The estimate as text: value, then the interval or the labelled range."""
        return f"{fmt(self.value)} {self.interval_text()}"

    def interval(self, label: str) -> Interval:
        """For a rule: the value with its *confidence* interval (a range is never passed as one)."""
        return Interval(label, self.value, self.ci_low, self.ci_high)

    def bounds(self) -> tuple[float | None, float | None, str]:
        """The CI if stored, else the range, with its name (``"CI"``, ``"range"`` or ``""``)."""
        if self.has_ci:
            return self.ci_low, self.ci_high, "CI"
        if self.has_band:
            return self.band_low, self.band_high, "range"
        return None, None, ""


_Key = tuple[str, float | None, str, str, str]


class ResultTable:
    """An indexed, read-only view of one measurement's ``results.csv``.

    Only the fixed-proxy rows are read (``proxy`` empty or ``fixed``; ``refit`` rows are the
    per-checkpoint refit variant), and only the rows measured in the full space (``subspace``
    empty; ``constrained`` rows repeat the test inside the space normalization layers leave the
    gradients, and are shown by their own metric names elsewhere). Empty buckets read as ``all``,
    empty sites as ``""``. :meth:`variant` gives the refit-proxy or constrained-space rows of the
    same run (``proxy="refit"``, ``subspace="constrained"``) as a table of their own.
    """

    def __init__(self, df, *, proxy: str = "fixed", subspace: str = "") -> None:
        import pandas as pd

        self._source = df
        self._variants: dict[tuple[str, str], ResultTable] = {}
        df = df.copy()
        if "proxy" in df.columns:
            keep = df["proxy"].astype(str) == proxy
            df = df[keep | df["proxy"].isna()] if proxy == "fixed" else df[keep]
        elif proxy != "fixed":
            df = df.iloc[:0]
        if "subspace" in df.columns:
            df = (df[df["subspace"].isna() | (df["subspace"].astype(str) == "")] if not subspace
                  else df[df["subspace"].astype(str) == subspace])
        elif subspace:
            df = df.iloc[:0]
        for col, default in (("bucket", "all"), ("site", ""), ("checkpoint", "")):
            df[col] = df[col].fillna(default).astype(str) if col in df.columns else default
        df["step"] = pd.to_numeric(df["step"], errors="coerce") if "step" in df.columns else float("nan")
        self.has_band = "band_low" in df.columns and "band_high" in df.columns
        self._index: dict[_Key, Estimate] = {}
        #: metric -> how many rows were ignored because an earlier row had the same
        #: (metric, step, site, bucket, window): rows told apart only by another column (a
        #: variant, a step size) that the report does not select on.
        self.duplicates: dict[str, int] = {}
        cols = ["metric", "step", "site", "bucket", "checkpoint", "value", "ci_low", "ci_high",
                "band_low", "band_high"]
        data = [df[c].tolist() if c in df.columns else [None] * len(df) for c in cols]
        for m, st, si, b, ck, v, lo, hi, blo, bhi in zip(*data):
            step = _num(st)
            window = ck if (step is None and ck in WINDOW_CHECKPOINTS) else ""
            key = (str(m), step, si, b, window)
            if key in self._index:  # the first stored row of each key wins
                self.duplicates[str(m)] = self.duplicates.get(str(m), 0) + 1
                continue
            lo, hi, blo, bhi = _num(lo), _num(hi), _num(blo), _num(bhi)
            if not self.has_band and (window or str(m).endswith(OLD_RANGE_METRIC_SUFFIXES)):
                blo, bhi, lo, hi = lo, hi, None, None  # an old run: these ci_* held a min-max range
            self._index[key] = Estimate(_num(v), lo, hi, blo, bhi)

    def variant(self, *, proxy: str = "fixed", subspace: str = "") -> ResultTable:
        """The same run's rows of another proxy (``refit``) or space (``constrained``), cached."""
        key = (proxy, subspace)
        if key == ("fixed", ""):
            return self
        if key not in self._variants:
            self._variants[key] = ResultTable(self._source, proxy=proxy, subspace=subspace)
        return self._variants[key]

    @classmethod
    def read(cls, path) -> ResultTable:
        """Read a ``results.csv`` (DataError if it is missing or malformed)."""
        from tangentlab.report.inputs import check_results
        from tangentlab.runs import read_results

        return cls(check_results(read_results(path), path))

    # ------------------------------------------------------------------ queries
    def has(self, metric: str) -> bool:
        """True when some row holds ``metric``."""
        return any(k[0] == metric for k in self._index)

    def sites(self, metric: str) -> list[str]:
        """The sites that hold ``metric``, in order of first appearance."""
        return sorted({k[2] for k in self._index if k[0] == metric})

    def steps(self, metric: str, site: str | None = None) -> list[float]:
        """The checkpoint steps that hold ``metric`` (at ``site`` if given), ascending."""
        return sorted({k[1] for k in self._index
                       if k[0] == metric and k[1] is not None and (site is None or k[2] == site)})

    def buckets(self, metric: str, step: float | None, site: str) -> list[str]:
        """The frequency buckets stored for ``metric`` (not ``all``), in stored order."""
        out = [k[3] for k in self._index if k[0] == metric and k[1] == step and k[2] == site
               and k[3] != "all" and not k[4]]
        return list(dict.fromkeys(out))

    def get(self, metric: str, *, site: str, step: float | None = None, bucket: str = "all",
            window: str = "") -> Estimate:
        """The estimate of ``metric`` at a checkpoint (``step``) or a window (``window="late"``).

        A CI missing from the row is read from ``<metric>_ci_low``/``_ci_high`` rows, and a range
        from ``<metric>_band_low``/``_band_high`` rows, where a run stored them that way.
        """
        step = None if step is None else float(step)
        key = (metric, step, site, bucket, window)
        est = self._index.get(key)
        if est is None:
            return Estimate()
        lo, hi, blo, bhi = est.ci_low, est.ci_high, est.band_low, est.band_high
        if lo is None or hi is None:
            lo2 = self._index.get((f"{metric}_ci_low", step, site, bucket, window))
            hi2 = self._index.get((f"{metric}_ci_high", step, site, bucket, window))
            if lo2 is not None and hi2 is not None:
                lo, hi = lo2.value, hi2.value
        if blo is None or bhi is None:
            lo3 = self._index.get((f"{metric}_band_low", step, site, bucket, window))
            hi3 = self._index.get((f"{metric}_band_high", step, site, bucket, window))
            if lo3 is not None and hi3 is not None:
                blo, bhi = lo3.value, hi3.value
        return Estimate(est.value, lo, hi, blo, bhi)

    def last_step(self, metric: str, site: str | None = None) -> float | None:
        """The last step that holds ``metric`` (at ``site`` if given), or None."""
        steps = self.steps(metric, site)
        return steps[-1] if steps else None

    def metrics_with_prefix(self, prefix: str, *, site: str, step: float | None) -> list[str]:
        """The metrics starting with ``prefix`` stored at ``site`` and ``step``."""
        return sorted({k[0] for k in self._index if k[0].startswith(prefix) and k[2] == site
                       and k[1] == (None if step is None else float(step))})

    # ------------------------------------------------------------------ figure data
    def step_series(self, metric: str, site: str, label: str, *, bucket: str = "all",
                    color: int | None = None) -> Series:
        """Measured points over training steps, with their CI bars where stored."""
        xs, ys, los, his = [], [], [], []
        for st in self.steps(metric, site):
            e = self.get(metric, site=site, step=st, bucket=bucket)
            if e.value is None:
                continue
            xs.append(st)
            ys.append(e.value)
            los.append(e.ci_low if e.ci_low is not None else e.value)
            his.append(e.ci_high if e.ci_high is not None else e.value)
        return Series(label, "points", tuple(xs), tuple(ys), tuple(los), tuple(his), color=color)

    def band_series(self, low_metric: str, high_metric: str, site: str, label: str,
                    steps: Iterable[float], *, color: int | None = None) -> Series | None:
        """A shaded min-max band from two per-step metrics (e.g. the control enrichments)."""
        pts = []
        for st in steps:
            lo = self.get(low_metric, site=site, step=st).value
            hi = self.get(high_metric, site=site, step=st).value
            if lo is not None and hi is not None:
                pts.append((st, lo, hi))
        if not pts:
            return None
        return Series(label, "band", tuple(p[0] for p in pts), (), tuple(p[1] for p in pts),
                      tuple(p[2] for p in pts), color=color)

"""The verdict table: one row per prediction of the account, built from stored results.

:func:`build_verdicts` turns a reproduce run directory (:class:`~tangentlab.report.load.RunData`)
into a list of :class:`Verdict` rows. Each row names its prediction, its status word (decided by
a rule in :mod:`tangentlab.report.rules`), the numbers and the test behind it, what the paper
reported, the sources (run directory, config hash, seed) and its figure (as
:class:`~tangentlab.report.figures.Panel` data). Nothing is computed here that is not read from
a stored table, except simple selections (the fixed-proxy rows, the last checkpoint, a bucket).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tangentlab.report import rules as R
from tangentlab.report.figures import Panel, Series
from tangentlab.report.load import RunData, Source
from tangentlab.report.paper import PAPER

__all__ = ["Verdict", "ROWS", "RowSpec", "build_verdicts", "row_keys"]


@dataclass(frozen=True)
class Verdict:
    """One row of the verdict table.

    Attributes:
        key: stable identifier (``"enrichment"``).
        title: short name of the prediction.
        prediction: what the account predicts, in words.
        status: one of :data:`tangentlab.report.rules.STATUS_WORDS`.
        reason: the numbers behind the status, in one or more sentences.
        rule: the rule text (from :data:`tangentlab.report.rules.RULES`).
        test: the test behind the numbers.
        numbers: ``(label, value)`` pairs shown in the table (values formatted).
        paper: what the paper reported for the same quantity.
        sources: where the numbers come from.
        panels: the figure, as data.
        error: set when the rule itself raised (a bug, shown in the report).
    """

    key: str
    title: str
    prediction: str
    status: str
    reason: str
    rule: str
    test: str
    numbers: tuple[tuple[str, str], ...] = ()
    paper: str = ""
    sources: tuple[Source, ...] = ()
    panels: tuple[Panel, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class RowSpec:
    """How to build one verdict row."""

    key: str
    title: str
    prediction: str
    stages: Callable[[RunData], list[str]]
    build: Callable[[RunData, list[str]], dict[str, Any]]
    rule: str
    test: str
    require_all: bool = False  # every stage must be done (else: at least one)


# ------------------------------------------------------------------------------- table helpers

def _nan(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _fmt(x: Any) -> str:
    v = _nan(x)
    if v is None:
        return "n/a"
    if v != 0 and (abs(v) >= 1e4 or abs(v) < 1e-3):
        return f"{v:.3g}"
    return f"{v:.4g}"


def _norm(df):
    """Bucket NaN -> 'all'; numeric step; only the fixed-proxy rows (the protocol's main reading;
    ``proxy == "refit"`` rows are the per-checkpoint refit variant)."""
    import pandas as pd

    df = df.copy()
    if "proxy" in df.columns:
        df = df[df["proxy"].isna() | (df["proxy"].astype(str) == "fixed")]
    if "bucket" in df.columns:
        df["bucket"] = df["bucket"].fillna("all").astype(str)
    else:
        df["bucket"] = "all"
    if "site" in df.columns:
        df["site"] = df["site"].fillna("").astype(str)
    else:
        df["site"] = ""
    if "step" in df.columns:
        df["step"] = pd.to_numeric(df["step"], errors="coerce")
    return df


def _value(df, metric: str, *, step=None, site=None, bucket="all") -> tuple[float | None, float | None, float | None]:
    """(value, ci_low, ci_high) of one metric; CI from the row's ``ci_low``/``ci_high`` columns,
    else from ``<metric>_ci_low/high`` rows. The first stored row of each key wins."""
    index = df.attrs.get("_tl_index")
    if index is None:  # (metric, step, site, bucket) -> (value, ci_low, ci_high), built once
        index = {}
        cols = [df[c].tolist() if c in df.columns else [None] * len(df)
                for c in ("metric", "step", "site", "bucket", "value", "ci_low", "ci_high")]
        for m, st, si, b, v, lo, hi in zip(*cols):
            key = (m, None if st is None or st != st else float(st), si, b)
            index.setdefault(key, (_nan(v), _nan(lo), _nan(hi)))
        df.attrs["_tl_index"] = index

    def pick(m: str):
        if step is not None and site is not None and bucket is not None:
            return index.get((m, float(step), site, bucket))
        for (km, kst, ksi, kb), val in index.items():
            if km == m and (step is None or kst == float(step)) and (site is None or ksi == site) \
                    and (bucket is None or kb == bucket):
                return val
        return None

    got = pick(metric)
    if got is None:
        return None, None, None
    v, lo, hi = got
    if lo is None:
        s = pick(f"{metric}_ci_low")
        lo = s[0] if s else None
    if hi is None:
        s = pick(f"{metric}_ci_high")
        hi = s[0] if s else None
    return v, lo, hi


def _sites(df, metric: str) -> list[str]:
    sel = df[df["metric"] == metric]
    return sorted(set(sel["site"]))


def _steps(df, metric: str) -> list[float]:
    sel = df[df["metric"] == metric]
    return sorted({float(s) for s in sel["step"].dropna()})


def _n_controls(data: RunData, stage: str) -> int | None:
    """The number of matched controls, from the stage's recorded config (``n_controls`` or
    ``controls``, at top level or one table down); None when it is not recorded."""
    try:
        m = data.stage_manifest(stage)
    except Exception:
        return None
    cfg = m.get("config", {}) if isinstance(m, dict) else {}
    if not isinstance(cfg, dict):
        return None
    tables = [cfg] + [v for v in cfg.values() if isinstance(v, dict)]
    for key in ("n_controls", "controls"):
        for table in tables:
            v = table.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def _setup_facts(data: RunData, stage: str) -> str:
    """What the measure stage recorded about the model and the proxy (tied embeddings, fit window,
    checkpoints), which the step-0 comparison needs."""
    try:
        m = data.stage_manifest(stage)
    except Exception:
        return ""
    parts = []
    if "tie_embeddings" in m:
        parts.append(f"tie_embeddings={m['tie_embeddings']}")
    fw = m.get("fit_window")
    if isinstance(fw, dict) and fw.get("steps") is not None:
        parts.append(f"proxy fitted on steps {fw.get('steps')} (fraction {fw.get('fraction')} of "
                     f"step {fw.get('max_step')})")
    ck = m.get("checkpoints")
    if isinstance(ck, list):
        parts.append(f"{len(ck)} checkpoints")
    cfg = m.get("config") if isinstance(m.get("config"), dict) else {}
    for key in ("rank", "proxy", "n_controls"):
        if key in cfg:
            parts.append(f"{key}={cfg[key]}")
    return ", ".join(parts)


def _step_series(df, metric: str, site: str, label: str, bucket: str = "all") -> Series:
    xs, ys, los, his = [], [], [], []
    for st in _steps(df, metric):
        v, lo, hi = _value(df, metric, step=st, site=site, bucket=bucket)
        if v is None:
            continue
        xs.append(st)
        ys.append(v)
        los.append(lo if lo is not None else v)
        his.append(hi if hi is not None else v)
    return Series(label, "points", tuple(xs), tuple(ys), tuple(los), tuple(his))


def _arch_of(stage: str) -> str:
    return stage.split("/", 1)[-1]


def _step_axis(steps: Sequence[float]) -> str:
    pos = [s for s in steps if s > 0]
    return "symlog" if pos and max(pos) / max(min(pos), 1.0) > 20 else "linear"


# ------------------------------------------------------------------------------- theory row

def _theory_stages(data: RunData) -> list[str]:
    return ["theory"]


def _theory_build(data: RunData, stages: list[str]) -> dict[str, Any]:
    ver = data.theory()
    ders = ver.get("derivations", [])
    checks = []
    numbers = []
    xs, ys, labels = [], [], []
    for i, d in enumerate(ders):
        name = str(d.get("name") or d.get("derivation"))
        cs = d.get("checks", [])
        n_pass = sum(1 for c in cs if c.get("passed"))
        numbers.append((name, f"{n_pass}/{len(cs)} checks passed"
                        + (f" in {float(d['seconds']):.1f} s" if _nan(d.get("seconds")) is not None else "")))
        checks.extend({"name": f"{name}: {c.get('name')}", "passed": c.get("passed")} for c in cs)
        for c in cs:
            r = _nan(c.get("residual"))
            tol = _nan(c.get("tolerance"))
            if r is None:
                continue
            xs.append(float(i))
            ratio = abs(r) / tol if tol else abs(r)
            ys.append(min(max(ratio, 1e-17), 1e17))
        labels.append(name)
    out = R.checks_rule(checks)
    panel = Panel(
        title="Every derivation check: residual / tolerance", xlabel="derivation",
        ylabel="|residual| / tolerance (floored at 1e-17)",
        series=(Series("pass threshold (= 1)", "hline", (), (1.0,), style="reference"),
                Series("checks", "points", tuple(xs), tuple(ys))),
        yscale="log", categories=tuple(labels),
    )
    return {"outcome": out, "numbers": numbers, "panels": (panel,)}


# ------------------------------------------------------------------------------- synthetic rows

_X_CANDIDATES = ("t", "spread", "alpha", "pin_alpha", "s", "zipf_s", "kappa", "eta", "step", "rank",
                 "x0", "lam", "n_types")
R_COLS_NUMERIC = ("value", "ci_low", "ci_high", "n", "prediction", "seed", "step")


@dataclass(frozen=True)
class PanelSpec:
    """Which stored rows one synthetic panel draws.

    ``metrics`` (several become groups), ``x`` (a column; the first of :data:`_X_CANDIDATES`
    that varies when None), ``group`` (columns whose values split the series; by default the
    string columns that vary), ``where`` (equality filters; a filter on a column the table lacks
    is ignored). The ``prediction`` column is drawn as a line per group where it is filled;
    ``value`` with ``ci_low``/``ci_high`` as points.
    """

    metrics: tuple[str, ...]
    title: str = ""
    x: str | None = None
    group: tuple[str, ...] | None = None
    where: tuple[tuple[str, Any], ...] = ()
    ylabel: str = ""
    logx: bool | None = None
    logy: bool | None = None
    reference: float | None = None  # a dashed reference line (e.g. the isotropic baseline)
    reference_label: str = ""
    max_groups: int = 8


def _is_text(series) -> bool:
    import pandas as pd

    return not pd.api.types.is_numeric_dtype(series)


def _spec_panel(df, spec: PanelSpec, experiment: str) -> Panel | None:
    import pandas as pd

    sub = df[df["metric"].isin(list(spec.metrics))]
    for col, val in spec.where:
        if col in sub.columns:
            if isinstance(val, (int, float)) and not isinstance(val, bool):
                sub = sub[pd.to_numeric(sub[col], errors="coerce") == float(val)]
            else:
                sub = sub[sub[col].astype(str) == str(val)]
    if len(sub) == 0:
        return None
    xcol = spec.x if spec.x in sub.columns else None
    if xcol is None:
        for c in _X_CANDIDATES:
            if c in sub.columns and pd.to_numeric(sub[c], errors="coerce").nunique() > 1:
                xcol = c
                break
    categories: tuple[str, ...] = ()
    if xcol is not None and _is_text(sub[xcol]):  # categorical x: one tick per value
        categories = tuple(str(v) for v in dict.fromkeys(sub[xcol].dropna()))
        pos = {c: float(i) for i, c in enumerate(categories)}
        sub = sub.assign(**{xcol: sub[xcol].map(lambda v: pos.get(str(v), float("nan")))})
    if spec.group is not None:
        group_cols = [c for c in spec.group if c in sub.columns]
    else:
        group_cols = [c for c in sub.columns if c not in set(R_COLS_NUMERIC) | {xcol, "metric"}
                      and _is_text(sub[c]) and sub[c].nunique() > 1]
    if len(spec.metrics) > 1 and sub["metric"].nunique() > 1:
        group_cols = ["metric", *group_cols]
    series: list[Series] = []
    groups = list(sub.groupby(group_cols, dropna=False, sort=False)) if group_cols else [((), sub)]
    groups = groups[: spec.max_groups]
    theory_labelled = False
    for gi, (key, g) in enumerate(groups):
        parts = key if isinstance(key, tuple) else (key,)
        label = ", ".join(str(k) if (c == "metric" or _is_text(sub[c])) else f"{c}={k}"
                          for c, k in zip(group_cols, parts)) or spec.metrics[0]
        x = pd.to_numeric(g[xcol], errors="coerce") if xcol else pd.Series(range(len(g)), index=g.index, dtype=float)
        g = g.assign(_x=x.values).sort_values("_x")
        val = pd.to_numeric(g["value"], errors="coerce")
        lo = pd.to_numeric(g["ci_low"], errors="coerce").fillna(val) if "ci_low" in g else val
        hi = pd.to_numeric(g["ci_high"], errors="coerce").fillna(val) if "ci_high" in g else val
        if "prediction" in g.columns:
            pred = g.assign(_p=pd.to_numeric(g["prediction"], errors="coerce")).dropna(subset=["_p"])
            if len(pred):
                line = pred.groupby("_x", sort=True)["_p"].mean()
                # one legend entry for all theory lines; each shares its measurement's colour
                theory_label = "_nolegend_" if theory_labelled else (
                    "theory (line; same colour as its measurement)" if len(groups) > 1 else "theory")
                theory_labelled = True
                series.append(Series(theory_label, "line", tuple(float(v) for v in line.index),
                                     tuple(float(v) for v in line.values), color=gi,
                                     style="tick" if categories else ""))
        series.append(Series(label if len(groups) > 1 else "measured", "points", tuple(g["_x"]),
                             tuple(val), tuple(lo), tuple(hi), color=gi))
    if spec.reference is not None:
        series.insert(0, Series(spec.reference_label or "reference", "hline", (), (spec.reference,),
                                style="reference"))
    xs = [v for s in series for v in s.x if v == v] if not categories else []
    ys = [v for s in series if s.kind != "hline" for v in s.y if v == v and abs(v) != float("inf")]
    auto_logx = bool(xs) and min(xs) > 0 and max(xs) / min(xs) > 50
    auto_logy = bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 50
    logx = spec.logx if spec.logx is not None else auto_logx
    logy = spec.logy if spec.logy is not None else auto_logy
    if logx and not (xs and min(xs) > 0):
        logx = False
    if logy and not (ys and min(ys) > 0):
        logy = False
    return Panel(title=spec.title or f"{experiment}: {spec.metrics[0]}", xlabel=xcol or "case",
                 ylabel=spec.ylabel or ", ".join(spec.metrics), series=tuple(series),
                 xscale="log" if logx else "linear", yscale="log" if logy else "linear",
                 categories=categories)


def _prediction_panels(df, experiment: str, specs: Sequence[PanelSpec] | None) -> tuple[Panel, ...]:
    """The panels of a synthetic row: the given specs; when none of them finds its rows (or none
    is given), one panel per metric that has a prediction (at most three)."""
    import pandas as pd

    panels = [p for p in (_spec_panel(df, spec, experiment) for spec in specs or ()) if p is not None]
    if panels or "prediction" not in df.columns:
        return tuple(panels)
    has = df[pd.to_numeric(df["prediction"], errors="coerce").notna()]
    generic = [PanelSpec((m,)) for m in list(dict.fromkeys(has["metric"]))[:3]]
    return tuple(p for p in (_spec_panel(df, spec, experiment) for spec in generic) if p is not None)


def _check_numbers(checks: Sequence[dict]) -> list[tuple[str, str]]:
    out = []
    for c in checks:
        meas = _fmt(c.get("measured"))
        pred = _fmt(c.get("predicted"))
        tol = c.get("tolerance")
        what = "; ".join(str(c[k]) for k in ("description", "detail") if c.get(k))
        out.append((str(c.get("name")),
                    ("PASS" if c.get("passed") else "FAIL")
                    + f": measured {meas} vs predicted {pred}"
                    + (f" (tolerance {_fmt(tol)})" if _nan(tol) is not None else "")
                    + (f" [{what}]" if what else "")))
    return out


def _synthetic_builder(experiment: str, select: Callable[[dict], bool] | None = None,
                       panels: Sequence[PanelSpec] | None = None):
    def stages(data: RunData) -> list[str]:
        return [f"synthetic/{experiment}"]

    def build(data: RunData, stages: list[str]) -> dict[str, Any]:
        stage = stages[0]
        checks = [c for c in data.checks(stage) if select is None or select(c)]
        outcome = R.checks_rule(checks)
        df = data.results(stage)
        return {"outcome": outcome, "numbers": _check_numbers(checks),
                "panels": _prediction_panels(df, experiment, panels)}

    return stages, build


def _is_attenuation(c: dict) -> bool:
    """Checks of the visibility experiment that belong to the attenuation row: those about the
    frequency-biased token model (occurrence/type visibility, attenuation, Zipf s, pinning alpha)."""
    name = str(c.get("name", "")).lower()
    return any(w in name for w in ("atten", "occurrence", "type_visibility", "type visibility",
                                   "alpha", "zipf", "frequency"))


# ------------------------------------------------------------------------------- empirical rows

def _measure_stages(data: RunData) -> list[str]:
    return [f"measure/{a}" for a in ("encoder", "decoder") if f"measure/{a}" in data.records] or [
        "measure/encoder", "measure/decoder"]


def _enrichment_build(data: RunData, stages: list[str]) -> dict[str, Any]:
    units: dict[str, R.Outcome] = {}
    numbers = []
    panels = []
    for stage in stages:
        if data.status(stage) != "done":
            continue
        arch = _arch_of(stage)
        df = _norm(data.results(stage))
        n_ctrl = _n_controls(data, stage)
        steps = _steps(df, "enrichment")
        last = steps[-1] if steps else None
        facts = _setup_facts(data, stage)
        if facts:
            numbers.append((f"{arch} set-up", facts))
        series = []
        for site in _sites(df, "enrichment"):
            e, lo, hi = _value(df, "enrichment", step=last, site=site)
            p, _, _ = _value(df, "p_value", step=last, site=site)
            e0 = _value(df, "enrichment", step=0.0, site=site)[0] if 0.0 in steps else None
            unit = f"{arch} {site}".strip()
            units[unit] = R.enrichment_rule(e, lo, hi, p, n_ctrl, e0)
            pos = _value(df, "position", step=last, site=site)[0]
            numbers.append((f"{unit} @ step {int(last) if last is not None else '?'}",
                            f"enrichment {_fmt(e)} [{_fmt(lo)}, {_fmt(hi)}], p {_fmt(p)}"
                            f" (n_controls {n_ctrl if n_ctrl is not None else '?'}), step 0: {_fmt(e0)},"
                            f" position {_fmt(pos)}"))
            band = [(st, _value(df, "control_enrichment_low", step=st, site=site)[0],
                     _value(df, "control_enrichment_high", step=st, site=site)[0]) for st in steps]
            band = [b for b in band if b[1] is not None and b[2] is not None]
            if band:
                series.append(Series(f"control band (min-max) {site}".strip(), "band",
                                     tuple(b[0] for b in band), (), tuple(b[1] for b in band),
                                     tuple(b[2] for b in band)))
            series.append(_step_series(df, "enrichment", site, f"Q_T enrichment {site}".strip()))
            if e0 is not None:
                series.append(Series(f"step-0 value {site}".strip(), "hline", (), (e0,), style="reference"))
        series.insert(0, Series("null: controls (=1)", "hline", (), (1.0,)))
        panels.append(Panel(title=f"{arch}: tangent enrichment over training", xlabel="training step",
                            ylabel="E_T / mean E_N", series=tuple(series), xscale=_step_axis(steps)))
    return {"outcome": R.combine(units), "numbers": numbers, "panels": tuple(panels)}


def _bucket_order(labels: Sequence[str]) -> list[str]:
    """Frequency buckets from most to least frequent.

    Convention (empirical pillar): buckets are quantiles of log-frequency labelled so that a
    larger index means more frequent (e.g. ``q0`` rarest ... ``q4`` most frequent); labels with
    no number keep their stored order.
    """
    import re

    def num(lbl: str):
        m = re.search(r"(\d+)(?!.*\d)", lbl)
        return int(m.group(1)) if m else None

    if all(num(lbl) is not None for lbl in labels):
        return sorted(labels, key=lambda lbl: -num(lbl))
    return list(labels)


def _bucket_build(data: RunData, stages: list[str]) -> dict[str, Any]:
    units: dict[str, R.Outcome] = {}
    numbers = []
    panels = []
    for stage in stages:
        if data.status(stage) != "done":
            continue
        arch = _arch_of(stage)
        df = _norm(data.results(stage))
        steps = _steps(df, "enrichment")
        last = steps[-1] if steps else None
        series = []
        for site in _sites(df, "enrichment"):
            sel = df[(df["metric"] == "enrichment") & (df["site"] == site) & (df["step"] == last)
                     & (df["bucket"] != "all")]
            order = _bucket_order(list(dict.fromkeys(sel["bucket"])))
            rows = []
            for b in order:
                e, lo, hi = _value(df, "enrichment", step=last, site=site, bucket=b)
                rows.append((b, e, lo, hi))
            unit = f"{arch} {site}".strip()
            units[unit] = R.bucket_rule(rows)
            numbers.append((f"{unit} @ step {int(last) if last is not None else '?'}",
                            "; ".join(f"{b}: {_fmt(e)}" for b, e, _, _ in rows)))
            rev = rows[::-1]  # least frequent on the left
            series.append(Series(f"{site} step {int(last) if last is not None else '?'}".strip(), "points",
                                 tuple(float(i) for i in range(len(rev))),
                                 tuple(r[1] if r[1] is not None else float("nan") for r in rev),
                                 tuple(r[2] if r[2] is not None else (r[1] or float("nan")) for r in rev),
                                 tuple(r[3] if r[3] is not None else (r[1] or float("nan")) for r in rev)))
            if 0.0 in steps:
                s0 = [_value(df, "enrichment", step=0.0, site=site, bucket=r[0])[0] for r in rev]
                series.append(Series(f"{site} step 0".strip(), "points",
                                     tuple(float(i) for i in range(len(rev))),
                                     tuple(v if v is not None else float("nan") for v in s0)))
            cats = tuple(r[0] for r in rev)
        series.insert(0, Series("null: controls (=1)", "hline", (), (1.0,)))
        panels.append(Panel(title=f"{arch}: enrichment by frequency bucket", xlabel="frequency bucket (rare -> frequent)",
                            ylabel="E_T / mean E_N", series=tuple(series),
                            categories=cats if series else ()))
    return {"outcome": R.combine(units), "numbers": numbers, "panels": tuple(panels)}


def _versus_control_build(metric_t: str, metric_n: str, what: str, ylabel: str,
                          labels: tuple[str, str] = ("Q_T removed", "controls (mean)")):
    def build(data: RunData, stages: list[str]) -> dict[str, Any]:
        units: dict[str, R.Outcome] = {}
        numbers = []
        panels = []
        for stage in stages:
            if data.status(stage) != "done":
                continue
            arch = _arch_of(stage)
            df = _norm(data.results(stage))
            steps = _steps(df, metric_t)
            last = steps[-1] if steps else None
            series = []
            for site in _sites(df, metric_t):
                t, tlo, thi = _value(df, metric_t, step=last, site=site)
                n, nlo, nhi = _value(df, metric_n, step=last, site=site)
                unit = f"{arch} {site}".strip()
                units[unit] = R.greater_than_control_rule(t, tlo, thi, n, nlo, nhi, what=what)
                numbers.append((f"{unit} @ step {int(last) if last is not None else '?'}",
                                f"tangent {_fmt(t)} vs controls {_fmt(n)}"))
                series.append(_step_series(df, metric_t, site, f"{labels[0]} {site}".strip()))
                series.append(_step_series(df, metric_n, site, f"{labels[1]} {site}".strip()))
            panels.append(Panel(title=f"{arch}: {what}", xlabel="training step", ylabel=ylabel,
                                series=tuple(series), xscale=_step_axis(steps)))
        return {"outcome": R.combine(units), "numbers": numbers, "panels": tuple(panels)}

    return build


def _freqdist_build(data: RunData, stages: list[str]) -> dict[str, Any]:
    units: dict[str, R.Outcome] = {}
    numbers = []
    panels = []
    for stage in stages:
        if data.status(stage) != "done":
            continue
        arch = _arch_of(stage)
        df = _norm(data.results(stage))
        steps = _steps(df, "freq_distance_spearman")
        last = steps[-1] if steps else None
        series = [Series("no correlation (0)", "hline", (), (0.0,))]
        for site in _sites(df, "freq_distance_spearman"):
            rho, lo, hi = _value(df, "freq_distance_spearman", step=last, site=site)
            r0 = _value(df, "freq_distance_spearman", step=0.0, site=site)[0] if 0.0 in steps else None
            pear = _value(df, "freq_distance_pearson", step=last, site=site)[0]
            unit = f"{arch} {site}".strip()
            units[unit] = R.negative_correlation_rule(rho, lo, hi, r0)
            numbers.append((f"{unit} @ step {int(last) if last is not None else '?'}",
                            f"Spearman {_fmt(rho)} [{_fmt(lo)}, {_fmt(hi)}], Pearson {_fmt(pear)}, "
                            f"step 0: {_fmt(r0)}"))
            series.append(_step_series(df, "freq_distance_spearman", site, f"Spearman rho {site}".strip()))
            if r0 is not None:
                series.append(Series(f"step-0 value {site}".strip(), "hline", (), (r0,), style="reference"))
        panels.append(Panel(title=f"{arch}: log-frequency vs spread", xlabel="training step",
                            ylabel="Spearman rho", series=tuple(series), xscale=_step_axis(steps)))
    return {"outcome": R.combine(units), "numbers": numbers, "panels": tuple(panels)}


# ------------------------------------------------------------------------------- the rows

def _rows() -> tuple[RowSpec, ...]:
    vis_st, vis_b = _synthetic_builder("visibility", lambda c: not _is_attenuation(c), panels=(
        PanelSpec(("visibility_exact_frame",), "visibility vs t (one point per manifold)", x="t",
                  group=("manifold",), where=(("point", 0),), ylabel="normal / tangent variance",
                  logx=True, logy=True),
        PanelSpec(("visibility_ratio_local_pca",), "measured / theory (local-PCA frame)", x="t",
                  group=("manifold",), ylabel="visibility / t^2 ||II||^2 / (2m)"),
    ))
    att_st, att_b = _synthetic_builder("visibility", _is_attenuation, panels=(
        PanelSpec(("attenuation",), "attenuation factor vs pinning alpha", x="alpha", group=("s",),
                  ylabel="occurrence / type visibility", reference=1.0, reference_label="no attenuation"),
        PanelSpec(("occurrence_visibility", "type_visibility"), "pooled visibilities", x="alpha",
                  group=("s",), ylabel="visibility"),
    ))
    gr_st, gr_b = _synthetic_builder("gradient-ratio", panels=(
        PanelSpec(("normal_tangent_ratio",), "||normal|| / ||tangent|| (line: corrected bound)", x="t",
                  group=("case", "manifold"), ylabel="normal / tangent", logx=True, logy=True),
    ))
    am_st, am_b = _synthetic_builder("amplification", panels=(
        PanelSpec(("tangent_share",), "tangent share: closed form (GD) vs toy", x="step",
                  where=(("optimizer", "sgd"), ("head", "chart"), ("weighting", "uniform")),
                  group=(), ylabel="tangent share of variance"),
        PanelSpec(("tangent_share",), "tangent share under SGD, Adam, Muon", x="step",
                  where=(("weighting", "frequency"), ("bucket", "all")), group=("optimizer", "head"),
                  ylabel="tangent share of variance"),
    ))
    pr_st, pr_b = _synthetic_builder("proxy-recovery", panels=(
        PanelSpec(("mean_principal_angle_deg",), "angle to the true tangent space", x="rank",
                  group=("extractor", "manifold"), ylabel="mean principal angle (deg)"),
    ))
    rv_st, rv_b = _synthetic_builder("river-valley", panels=(
        PanelSpec(("hitting_time",), "valley: steps to reach the optimum", x="optimizer",
                  where=(("problem", "valley"),), group=(), ylabel="hitting time (steps)", logy=True),
        PanelSpec(("final_band",), "valley: final oscillation band", x="optimizer",
                  where=(("problem", "valley"),), group=(), ylabel="final |x - x*|", logy=True),
        PanelSpec(("hitting_time",), "matrix sensing: hitting time per component", x="component",
                  where=(("problem", "matrix-sensing"),), group=("optimizer",),
                  ylabel="hitting time (steps)", logy=True),
    ))
    checks = R.RULES["checks"]
    return (
        RowSpec("theory", "Derivations verify",
                "Every derivation's symbolic identities, numeric spot checks and Monte-Carlo checks hold.",
                _theory_stages, _theory_build, checks, "theory verify: symbolic, numeric and Monte-Carlo checks"),
        RowSpec("visibility", "Curvature visibility against t",
                "Visibility V(t) = normal/tangent variance = t^2 ||II||_F^2 / (2m) for Gaussian chart "
                "coordinates: small neighbourhoods look flat.",
                vis_st, vis_b, checks, "synthetic visibility: sampled manifolds vs curvature-visibility"),
        RowSpec("attenuation", "Attenuation under frequency bias",
                "Pooling occurrences (frequency-weighted, pinned frequent tokens) shows less curvature than "
                "pooling types: attenuation factor < 1 whenever alpha > 0.",
                att_st, att_b, checks, "synthetic visibility: Zipf token model vs frequency-attenuation"),
        RowSpec("gradient-ratio", "Gradient ratio and the counterexample",
                "With a lower bound c on the tangent part, ||normal||/||tangent|| <= kappa t / (2c); without it "
                "the O(t) claim fails (parabola with a constant upstream gradient).",
                gr_st, gr_b, checks, "synthetic gradient-ratio vs gradient-components"),
        RowSpec("amplification", "Tangent amplification in toys (SGD, Adam, Muon)",
                "Training moves representations mostly along tangent directions, so the tangent share of "
                "gradient energy and variance grows, under each optimizer.",
                am_st, am_b, checks, "synthetic amplification vs tangent-amplification"),
        RowSpec("proxy-recovery", "Proxy recovery against ground truth",
                "Activation-fitted proxies (PCA, semi-NMF, ICA, TopK SAE) recover the true tangent space "
                "(small principal angles); the control test finds a planted signal and not a null one.",
                pr_st, pr_b, checks, "synthetic proxy-recovery: principal angles, planted and null control tests"),
        RowSpec("enrichment", "Tangent energy enrichment over training",
                "True gradients put more energy into the activation-fitted tangent proxy than into matched-rank "
                "normal controls: enrichment > 1, above its step-0 value, p at its floor; encoder and decoder.",
                _measure_stages, _enrichment_build, R.RULES["enrichment"],
                "control_test of Q_T against matched-rank normal controls on the gradient second moment"),
        RowSpec("frequency-buckets", "Enrichment by frequency bucket",
                "Enrichment is strongest for frequent tokens (small spread t).",
                _measure_stages, _bucket_build, R.RULES["frequency-buckets"],
                "control_test per log-frequency quantile bucket, bootstrap CI"),
        RowSpec("isoscore", "Delta IsoScore* of Q_T against controls",
                "Projecting Q_T out of the gradients raises their isotropy more than projecting out a control.",
                _measure_stages,
                _versus_control_build("delta_isoscore_tangent", "delta_isoscore_control_mean",
                                      "delta IsoScore*", "delta IsoScore* of gradients",
                                      ("Q_T removed", "controls removed (mean, 95% band)")),
                R.RULES["isoscore"], "IsoScore* of gradients before and after projecting out Q_T or a control"),
        RowSpec("frequency-distance", "Frequency-distance correlation",
                "Frequent tokens are pinned near their centroid: log-frequency and occurrence spread correlate "
                "negatively.",
                _measure_stages, _freqdist_build, R.RULES["frequency-distance"],
                "Spearman and Pearson correlation over token types, bootstrap CI, count-corrected spread"),
        RowSpec("ablation", "Causal ablation: Q_T against controls",
                "Ablating the activations along Q_T raises the loss more than ablating along a matched control.",
                _measure_stages,
                _versus_control_build("ablation_loss_tangent", "ablation_loss_control_mean",
                                      "loss increase on ablation", "loss increase",
                                      ("ablate Q_T", "ablate controls (mean, min-max)")),
                R.RULES["ablation"], "ablate along Q_T / each control at the site, run the model forward"),
        RowSpec("river-valley", "River valley: Muon against GD, and the two-stage switch",
                "Sign descent (Muon) advances along the river at a constant rate, beating GD early, then "
                "oscillates in a band of width ~eta; switching Muon -> GD at the derived point is fastest.",
                rv_st, rv_b, checks, "synthetic river-valley vs the river-valley derivation"),
    )


ROWS: tuple[RowSpec, ...] = _rows()


def row_keys() -> list[str]:
    """The keys of the verdict rows, in report order."""
    return [r.key for r in ROWS]


def _one(data: RunData, spec: RowSpec) -> Verdict:
    stages = spec.stages(data)
    base = Verdict(key=spec.key, title=spec.title, prediction=spec.prediction, status=R.NOT_RUN,
                   reason="", rule=spec.rule, test=spec.test, paper=PAPER.get(spec.key, ""),
                   sources=tuple(data.source(s) for s in stages))
    problems = [p for p in (data.problem(s) for s in stages) if p]
    done = [s for s in stages if data.status(s) == "done"]
    if not done or (spec.require_all and problems):
        return replace(base, reason="; ".join(problems) or "no stage ran")
    try:
        built = spec.build(data, done)
    except Exception as exc:  # a rule that raises is a bug: show it, do not hide the row
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())
        return replace(base, reason=f"the rule could not read the stored results ({msg})",
                       error=msg + "\n" + traceback.format_exc(limit=3))
    outcome: R.Outcome = built["outcome"]
    reason = outcome.reason
    status = outcome.status
    if problems:
        reason += "; also " + "; ".join(problems)
        if status == R.SUPPORTED:
            status = R.INCONCLUSIVE
            reason += " (supported only where measured)"
    return replace(base, status=status, reason=reason, numbers=tuple(built.get("numbers", ())),
                   panels=tuple(built.get("panels", ())),
                   sources=tuple(data.source(s) for s in stages))


def build_verdicts(data: RunData, rows: Sequence[RowSpec] | None = None) -> list[Verdict]:
    """One :class:`Verdict` per row spec (default :data:`ROWS`), in order."""
    return [_one(data, spec) for spec in (rows if rows is not None else ROWS)]


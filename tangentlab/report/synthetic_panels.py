"""Figures of the rows decided by synthetic experiments: which stored rows each panel draws.

A :class:`PanelSpec` names the metrics, the x column and the grouping of one panel; the
``prediction`` column is drawn as the theory line and ``value`` with ``ci_low``/``ci_high`` as the
measured points. Axis labels carry units (:data:`X_LABELS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tangentlab.report.figures import Panel, Series

__all__ = ["PanelSpec", "prediction_panels", "X_LABELS"]

#: Axis labels, with units, of the x columns synthetic experiments store.
X_LABELS: dict[str, str] = {
    "t": "local scale t (chart units)",
    "spread": "spread t (chart units)",
    "alpha": "pinning exponent alpha (dimensionless)",
    "pin_alpha": "pinning exponent alpha (dimensionless)",
    "s": "Zipf exponent s (dimensionless)",
    "zipf_s": "Zipf exponent s (dimensionless)",
    "kappa": "curvature kappa (1 / chart units)",
    "eta": "step size eta (learning rate)",
    "step": "step (optimizer updates; symlog axis: 0, then log)",
    "rank": "proxy rank r (dimensions)",
    "optimizer": "optimizer",
    "component": "component",
    "case": "case",
}

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
    n_groups = len(groups)
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
    title = spec.title or f"{experiment}: {spec.metrics[0]}"
    if n_groups > len(groups):  # never drop series silently: the figure states the cap
        title += f"\n(first {len(groups)} of {n_groups} groups drawn; cap {spec.max_groups})"
    xscale = "log" if logx else "linear"
    if xcol == "step":  # the report's one step-axis convention (units.STEP_SCALE)
        xscale = "symlog"
    return Panel(title=title,
                 xlabel=X_LABELS.get(xcol or "case", xcol or "case"),
                 ylabel=spec.ylabel or ", ".join(spec.metrics), series=tuple(series),
                 xscale=xscale, yscale="log" if logy else "linear", categories=categories)


def prediction_panels(df, experiment: str, specs: Sequence[PanelSpec] | None) -> tuple[Panel, ...]:
    """The panels of a synthetic row.

    The given specs; when none of them finds its rows (or none is given), one panel per metric that
    has a prediction (at most three).
    """
    import pandas as pd

    panels = [p for p in (_spec_panel(df, spec, experiment) for spec in specs or ()) if p is not None]
    if panels or "prediction" not in df.columns:
        return tuple(panels)
    has = df[pd.to_numeric(df["prediction"], errors="coerce").notna()]
    generic = [PanelSpec((m,)) for m in list(dict.fromkeys(has["metric"]))[:3]]
    return tuple(p for p in (_spec_panel(df, spec, experiment) for spec in generic) if p is not None)


"""The empirical verdicts, one (model, site) at a time.

A *model* is one measured checkpoint trajectory: our own ``measure/<arch>`` stage or an external
measurement run (``external/<NAME>``). For each empirical prediction there is one builder that
takes a :class:`Model` and a site and returns a frozen :class:`Unit` (status, estimate, interval,
which checkpoints it used), and one that draws the model's panel. The verdict table
(:mod:`tangentlab.report.verdicts`) combines the units of a row with
:func:`tangentlab.report.rules.combine`.

Every number is read from the model's stored table and manifest; nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tangentlab.report import rules as R
from tangentlab.report.figures import Panel, Series
from tangentlab.report.tables import Estimate, ResultTable, fmt

__all__ = [
    "Model",
    "Unit",
    "LateWindow",
    "late_window",
    "EnergySource",
    "energy_source",
    "bucket_order",
    "enrichment_unit",
    "weakens_late_unit",
    "bucket_unit",
    "isoscore_unit",
    "freqdist_unit",
    "ablation_unit",
    "enrichment_panel",
    "weakens_late_panel",
    "bucket_panel",
    "isoscore_panel",
    "freqdist_panel",
    "ablation_panel",
    "comparison_panel",
    "READERS_RHO_STATISTIC",
]

STEP_LABEL = "training step (optimizer updates)"
ENRICH_LABEL = "enrichment E_T / mean E_N (ratio)"
#: The statistic behind the readers' rho of about -0.5 (issue 10 item 7: a Pearson value).
READERS_RHO_STATISTIC = "Pearson"


@dataclass(frozen=True)
class Model:
    """One measured trajectory.

    Attributes:
        name: ``encoder``, ``decoder`` or an external run's NAME.
        stage: ``measure/<arch>`` or ``external/<NAME>``.
        table: its results.
        manifest: its ``manifest.json`` (``{}`` when absent).
    """

    name: str
    stage: str
    table: ResultTable
    manifest: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def config(self) -> dict[str, Any]:
        """The measurement's recorded config (from its manifest)."""
        cfg = self.manifest.get("config")
        return cfg if isinstance(cfg, dict) else {}

    @property
    def n_controls(self) -> int | None:
        """From the recorded config (``n_controls`` or ``controls``, top level or one table down)."""
        tables = [self.config] + [v for v in self.config.values() if isinstance(v, dict)]
        for key in ("n_controls", "controls"):
            for table in tables:
                v = table.get(key)
                if isinstance(v, int) and not isinstance(v, bool):
                    return v
        return None

    def facts(self) -> str:
        """What the measurement recorded about the model and the proxy."""
        m = self.manifest
        parts = []
        for key in ("model", "family", "tie_embeddings", "dtype", "device"):
            if key in m:
                parts.append(f"{key}={m[key]}")
        fw = m.get("fit_window")
        if isinstance(fw, dict) and fw.get("steps") is not None:
            parts.append(f"proxy fitted on steps {fw.get('steps')} (fraction {fw.get('fraction')} of "
                         f"step {fw.get('max_step')})")
        if isinstance(m.get("checkpoints"), list):
            parts.append(f"{len(m['checkpoints'])} checkpoints")
        for key in ("rank", "proxy", "n_controls"):
            if key in self.config:
                parts.append(f"{key}={self.config[key]}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Unit:
    """One (model, site) of a verdict row.

    Attributes:
        model, site: which trajectory and site.
        status, reason: the rule's outcome for this unit alone.
        estimate: the number the rule read, with its interval (``CI`` or ``range``).
        at: which checkpoints it used (``step 60``, ``late window: steps 22, 60``).
        note: anything the reader needs beside it (the other statistic, the old controls).
    """

    model: str
    site: str
    status: str
    reason: str
    estimate: str
    at: str
    note: str = ""

    @property
    def label(self) -> str:
        """The unit's label, ``model / site``."""
        return f"{self.model} {self.site}".strip()

    @property
    def outcome(self) -> R.Outcome:
        """The unit's status, reason and estimate as a rule outcome."""
        return R.Outcome(self.status, self.reason)


def _unit(model: Model, site: str, out: R.Outcome, estimate: str, at: str, note: str = "") -> Unit:
    return Unit(model.name, site, out.status, out.reason, estimate, at, note)


def _step(st: float | None) -> str:
    return "?" if st is None else f"{st:g}"


def _axis(steps: Sequence[float]) -> str:
    pos = [s for s in steps if s > 0]
    return "symlog" if pos and max(pos) / max(min(pos), 1.0) > 20 else "linear"


# ------------------------------------------------------------------------------ enrichment

@dataclass(frozen=True)
class EnergySource:
    """Which stored energy test a verdict reads for one (proxy, site).

    Where normalization layers force gradient directions, the plain enrichment is deflated for a
    reason unrelated to tangents, so the verdicts read the constrained test: the per-row
    reachable one (``enrichment_reachable``, every forced direction) when stored, else the test
    inside the complement of 𝟙 (``subspace="constrained"`` rows), else the plain one.
    """

    table: ResultTable
    enrichment: str
    p_value: str
    kind: str  # "plain", "constrained" (complement of 𝟙) or "reachable" (per-row)

    def note(self) -> str:
        """What the reader needs to know about the source (empty for the plain test)."""
        if self.kind == "plain":
            return ""
        what = ("the per-row reachable space (every direction the norm forces)"
                if self.kind == "reachable" else "the complement of the all-ones direction")
        return (f"gradients here have forced directions: read inside {what} "
                f"({self.enrichment}, {self.p_value})")


def energy_source(model: Model, site: str, proxy: str = "fixed") -> EnergySource:
    """The energy test the verdicts read at ``site`` for ``proxy`` (see :class:`EnergySource`)."""
    plain = model.table.variant(proxy=proxy)
    c = model.table.variant(proxy=proxy, subspace="constrained")
    if site in c.sites("enrichment_reachable"):
        return EnergySource(c, "enrichment_reachable", "p_value_reachable", "reachable")
    if site in c.sites("enrichment"):
        return EnergySource(c, "enrichment", "p_value", "constrained")
    return EnergySource(plain, "enrichment", "p_value", "plain")


def enrichment_unit(model: Model, site: str) -> Unit:
    """Enrichment at the last checkpoint against its controls, step 0 and oracle, for one site."""
    t = model.table
    src = energy_source(model, site)
    last = src.table.last_step(src.enrichment, site)
    e = src.table.get(src.enrichment, site=site, step=last)
    p = src.table.get(src.p_value, site=site, step=last).value
    e0 = src.table.get(src.enrichment, site=site, step=0.0).value
    n = model.n_controls
    out = R.enrichment_rule(e.value, e.ci_low, e.ci_high, p, n, e0)
    note = (f"p {fmt(p)} (n_controls {n if n is not None else '?'}), step 0: {fmt(e0)}, "
            f"position between null and oracle {fmt(t.get('position', site=site, step=last).value)}")
    if src.kind != "plain":
        plain = t.get("enrichment", site=site, step=last)
        note = f"{src.note()}; plain enrichment {plain.text()}; " + note
    cv = t.get("ratio_cv", site=site, step=last)
    if cv.value is not None and cv.band_high is not None and cv.value > cv.band_high:
        note += (f"; per-batch ratio CV {fmt(cv.value)} lies outside the validated range "
                 f"(<= {fmt(cv.band_high)}): the interval may run low (cv_outside_validated_range)")
    return _unit(model, site, out, e.text(), f"step {_step(last)}", note)


def enrichment_panel(model: Model) -> Panel | None:
    """Enrichment against step for one model: every site, controls band, step 0 and oracle."""
    t = model.table
    sites = t.sites("enrichment")
    if not sites:
        return None
    steps = t.steps("enrichment")
    series: list[Series] = [Series("null: controls (= 1)", "hline", (), (1.0,))]
    for i, site in enumerate(sites):
        band = t.band_series("control_enrichment_low", "control_enrichment_high", site,
                             f"controls, min-max {site}", steps, color=i)
        if band is not None:
            series.append(band)
        series.append(t.step_series("enrichment", site, f"Q_T {site}", color=i))
        e0 = t.get("enrichment", site=site, step=0.0).value
        if e0 is not None:
            series.append(Series(f"step 0 {site}", "hline", (), (e0,), style="reference", color=i))
    return Panel(f"{model.name}: tangent enrichment over training", STEP_LABEL, ENRICH_LABEL,
                 tuple(series), xscale=_axis(steps))


def comparison_panel(models: Sequence[Model], *, max_series: int = 8) -> Panel | None:
    """Enrichment against step (log x) for every model and site, with step 0 and control band.

    Each model's step-0 value is dashed and its control band shaded, in the model's colour.
    """
    series: list[Series] = [Series("null: controls (= 1)", "hline", (), (1.0,))]
    steps_all: list[float] = []
    i = 0
    for model in models:
        t = model.table
        for site in t.sites("enrichment"):
            if i >= max_series:
                break
            steps = t.steps("enrichment", site)
            steps_all += steps
            band = t.band_series("control_enrichment_low", "control_enrichment_high", site,
                                 "_nolegend_", steps, color=i)
            if band is not None:
                series.append(band)
            series.append(t.step_series("enrichment", site, f"{model.name} {site}", color=i))
            e0 = t.get("enrichment", site=site, step=0.0).value
            if e0 is not None:
                series.append(Series("_nolegend_", "hline", (), (e0,), style="reference", color=i))
            i += 1
    if i == 0:
        return None
    return Panel("all models: enrichment (dashed: step 0; shaded: controls)",
                 STEP_LABEL + ", log scale", ENRICH_LABEL, tuple(series), xscale="symlog")


# ------------------------------------------------------------------------------ weakens late

@dataclass(frozen=True)
class LateWindow:
    """The late-window checkpoints of one trajectory and where that definition came from."""

    steps: tuple[float, ...]
    source: str
    cut: float | None = None


def _as_steps(v: Any) -> list[float] | None:
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                             for x in v):
        return [float(x) for x in v]
    return None


def late_window(manifest: dict[str, Any], steps: Sequence[float]) -> LateWindow:
    """The late window, from what the measurement recorded.

    The first of these that the measurement recorded wins:

    1. ``late_window`` (or ``windows.late``): ``{"steps": [...], "weights": [...]}``: those steps;
    2. ``early_late_cut_step``: the checkpoints after it;
    3. the config's ``early_fraction`` times the last step: the checkpoints after that cut.
    """
    lw = manifest.get("late_window")
    if lw is None and isinstance(manifest.get("windows"), dict):
        lw = manifest["windows"].get("late")
    if isinstance(lw, dict) and _as_steps(lw.get("steps")) is not None:
        listed = _as_steps(lw["steps"]) or []
        weights = _as_steps(lw.get("weights"))
        if weights and len(weights) == len(listed):  # a checkpoint of zero weight is not in it
            listed = [st for st, w in zip(listed, weights) if w > 0]
        wanted = set(listed)
        chosen = tuple(s for s in steps if s in wanted)
        src = "the late window the measurement recorded"
        if weights:
            src += " (weighted by the steps each checkpoint stands for: " + ", ".join(
                f"{w:.3g}" for w in weights) + ")"
        if lw.get("weighted_median_step") is not None:
            src += f", weighted median step {lw['weighted_median_step']}"
        return LateWindow(chosen, src)
    cut = manifest.get("early_late_cut_step")
    if isinstance(cut, (int, float)) and not isinstance(cut, bool):
        return LateWindow(tuple(s for s in steps if s > cut),
                          f"checkpoints after the recorded early/late cut at step {float(cut):g}", float(cut))
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    frac = cfg.get("early_fraction")
    if isinstance(frac, (int, float)) and not isinstance(frac, bool) and steps:
        cut = float(frac) * max(steps)
        return LateWindow(tuple(s for s in steps if s > cut),
                          f"checkpoints after step {cut:g} = recorded early_fraction {frac} x last step",
                          cut)
    return LateWindow((), "no early/late cut recorded")


def _trajectory(model: Model, site: str, proxy: str) -> tuple[R.ProxyTrajectory | None,
                                                               LateWindow, EnergySource]:
    """One proxy's trajectory for the weakens-late rule (None when it stored no enrichment)."""
    src = energy_source(model, site, proxy)
    t = src.table
    trained = [s for s in t.steps(src.enrichment, site) if s > 0]
    window = late_window(model.manifest, trained)
    if not trained:
        return None, window, src

    def value(st: float) -> float:
        v = t.get(src.enrichment, site=site, step=st).value
        return float("-inf") if v is None else v

    best = max(trained, key=value)
    peak = t.get(src.enrichment, site=site, step=best).interval(f"step {_step(best)}")
    agg = t.get(src.enrichment, site=site, window="late")
    if window.steps and t.has_band and agg.has_ci:
        late = [agg.interval("late-window aggregate")]
    else:
        late = [t.get(src.enrichment, site=site, step=s).interval(f"step {_step(s)}")
                for s in window.steps]
    first_late = min(window.steps) if window.steps else float("inf")
    before = [t.get(src.enrichment, site=site, step=s).interval(f"step {_step(s)}")
              for s in trained if s < first_late]
    return (R.ProxyTrajectory(proxy, peak, best in window.steps, before, late), window, src)


def _late_drift(model: Model, site: str, steps: Sequence[float]) -> float | None:
    """The largest principal angle (radians) between the fixed and refit proxies in the window."""
    refit = model.table.variant(proxy="refit")
    vals = [refit.get("proxy_drift_max_angle", site=site, step=s).value for s in steps]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def weakens_late_unit(model: Model, site: str) -> Unit:
    """Whether enrichment weakens late in training, for one site (the weakens-late rule).

    Read on the fixed and the refit proxy (each from :func:`energy_source`), with the measured
    drift between them over the late window.
    """
    fixed, window, src = _trajectory(model, site, "fixed")
    refit, _, _ = _trajectory(model, site, "refit")
    at = (f"late window: steps {', '.join(_step(s) for s in window.steps) or 'none'} "
          f"({window.source})")
    if fixed is not None and fixed.peak is not None:
        at = f"peak at {fixed.peak.label}; " + at
    drift = _late_drift(model, site, window.steps)
    out = R.weakens_late_rule(fixed, refit, drift_angle=drift)
    est = "; ".join(x.text() for x in fixed.late) if fixed is not None else ""
    est = est or "no late-window value"
    notes = [src.note()] if src.note() else []
    if refit is not None:
        notes.append("refit proxy late window: "
                     + ("; ".join(x.text() for x in refit.late) or "empty"))
    agg = model.table.get("enrichment", site=site, window="late")
    if src.kind == "plain" and agg.present and not agg.has_ci:
        notes.append(f"stored late aggregate {agg.text()} (a range over checkpoints, not a "
                     "bootstrap CI)")
    return _unit(model, site, out, est, at, "; ".join(notes))


def weakens_late_panel(model: Model) -> Panel | None:
    """Enrichment against step with the peak and the late window marked, for one model."""
    t = model.table
    sites = t.sites("enrichment")
    if not sites:
        return None
    steps = t.steps("enrichment")
    window = late_window(model.manifest, [s for s in steps if s > 0])
    series: list[Series] = []
    for i, site in enumerate(sites):
        series.append(t.step_series("enrichment", site, f"Q_T {site}", color=i))
    if window.cut is not None:
        series.append(Series(f"early/late cut (step {_step(window.cut)}): late window to the right",
                             "vline", (window.cut,), (), style="reference"))
    elif window.steps:
        series.append(Series(f"late window starts (step {_step(min(window.steps))})", "vline",
                             (min(window.steps),), (), style="reference"))
    return Panel(f"{model.name}: enrichment and the late window", STEP_LABEL, ENRICH_LABEL,
                 tuple(series), xscale=_axis(steps))


# ------------------------------------------------------------------------------ buckets

def bucket_order(labels: Sequence[str]) -> list[str]:
    """Frequency buckets from most to least frequent.

    Convention (empirical pillar): buckets are quantiles of log-frequency labelled so that a
    larger index means more frequent (``q0``/``f1`` rarest); labels without a number keep their
    stored order.
    """
    import re

    def num(lbl: str) -> int | None:
        m = re.search(r"(\d+)(?!.*\d)", lbl)
        return int(m.group(1)) if m else None

    if all(num(lbl) is not None for lbl in labels):
        return sorted(labels, key=lambda lbl: -(num(lbl) or 0))
    return list(labels)


def _bucket_rows(t: ResultTable, site: str, step: float | None) -> list[tuple[str, Estimate]]:
    return [(b, t.get("enrichment", site=site, step=step, bucket=b))
            for b in bucket_order(t.buckets("enrichment", step, site))]


def bucket_unit(model: Model, site: str) -> Unit:
    """Enrichment by frequency bucket at the last checkpoint, for one site."""
    t = model.table
    last = t.last_step("enrichment", site)
    rows = _bucket_rows(t, site, last)
    out = R.bucket_rule([(b, e.value, e.ci_low, e.ci_high) for b, e in rows])
    est = "; ".join(f"{b}: {e.text()}" for b, e in rows) or "no frequency buckets stored"
    return _unit(model, site, out, est, f"step {_step(last)}", "buckets from most to least frequent")


def bucket_panel(model: Model) -> Panel | None:
    """This model's buckets only (the categories come from its own rows)."""
    t = model.table
    series: list[Series] = []
    categories: tuple[str, ...] = ()
    for i, site in enumerate(t.sites("enrichment")):
        last = t.last_step("enrichment", site)
        rows = _bucket_rows(t, site, last)[::-1]  # least frequent on the left
        if not rows:
            continue
        labels = tuple(b for b, _ in rows)
        if categories and labels != categories:  # a site with other buckets: its own categories
            continue
        categories = labels
        xs = tuple(float(j) for j in range(len(rows)))
        ys = tuple(e.value if e.value is not None else float("nan") for _, e in rows)
        series.append(Series(f"{site} step {_step(last)}", "points", xs, ys,
                             tuple(e.ci_low if e.ci_low is not None else y for (_, e), y in zip(rows, ys)),
                             tuple(e.ci_high if e.ci_high is not None else y for (_, e), y in zip(rows, ys)),
                             color=i))
        s0 = [t.get("enrichment", site=site, step=0.0, bucket=b).value for b in labels]
        if any(v is not None for v in s0):
            series.append(Series(f"{site} step 0", "points", xs,
                                 tuple(v if v is not None else float("nan") for v in s0), color=i,
                                 style="hollow"))
    if not series:
        return None
    series.insert(0, Series("null: controls (= 1)", "hline", (), (1.0,)))
    return Panel(f"{model.name}: enrichment by frequency bucket", "frequency bucket (rare -> frequent)",
                 ENRICH_LABEL, tuple(series), categories=categories)


# ------------------------------------------------------------------------------ isoscore

def isoscore_unit(model: Model, site: str) -> Unit:
    """The change in gradient IsoScore* when Q_T is projected out against controls, for one site."""
    t = model.table
    last = t.last_step("delta_isoscore_tangent", site)
    tt = t.get("delta_isoscore_tangent", site=site, step=last)
    n = t.get("delta_isoscore_control_mean", site=site, step=last)
    nlo, nhi, nkind = n.bounds()
    out = R.greater_than_control_rule(tt.value, tt.ci_low, tt.ci_high, n.value, nlo, nhi,
                                      what="delta IsoScore*")
    est = f"Q_T removed {tt.text()}; controls removed (mean) {n.text()}"
    note = "depends on the enrichment row: removing a subspace that holds more gradient energy " \
           "changes the gradients' isotropy more, so this is not an independent verdict"
    if nkind == "range":
        note += "; the controls' interval is their spread over draws (a range), not a CI"
    return _unit(model, site, out, est, f"step {_step(last)}", note)


def isoscore_panel(model: Model) -> Panel | None:
    """ΔIsoScore* of Q_T and of the controls against step, for one model."""
    t = model.table
    sites = t.sites("delta_isoscore_tangent")
    if not sites:
        return None
    steps = t.steps("delta_isoscore_tangent")
    series: list[Series] = []
    for i, site in enumerate(sites):
        series.append(t.step_series("delta_isoscore_tangent", site, f"Q_T removed {site}", color=2 * i))
        series.append(_range_series(t, "delta_isoscore_control_mean", site,
                                    f"controls removed (mean; bars: range) {site}", color=2 * i + 1))
    return Panel(f"{model.name}: delta IsoScore*", STEP_LABEL,
                 "delta IsoScore* of gradients (IsoScore* units, 0-1)", tuple(series), xscale=_axis(steps))


def _range_series(t: ResultTable, metric: str, site: str, label: str, color: int | None = None) -> Series:
    """Points with their interval bars: the CI where stored, else the range."""
    xs, ys, los, his = [], [], [], []
    for st in t.steps(metric, site):
        e = t.get(metric, site=site, step=st)
        if e.value is None:
            continue
        lo, hi, _ = e.bounds()
        xs.append(st)
        ys.append(e.value)
        los.append(lo if lo is not None else e.value)
        his.append(hi if hi is not None else e.value)
    return Series(label, "points", tuple(xs), tuple(ys), tuple(los), tuple(his), color=color)


# ------------------------------------------------------------------------------ frequency-distance

def freqdist_unit(model: Model, site: str) -> Unit:
    """The frequency-spread correlation at the last checkpoint against step 0, for one site."""
    t = model.table
    last = t.last_step("freq_distance_spearman", site)
    rho = t.get("freq_distance_spearman", site=site, step=last)
    r0 = t.get("freq_distance_spearman", site=site, step=0.0).value
    out = R.negative_correlation_rule(rho.value, rho.ci_low, rho.ci_high, r0)
    pear = t.get("freq_distance_pearson", site=site, step=last)
    p0 = t.get("freq_distance_pearson", site=site, step=0.0).value
    est = f"Spearman {rho.text()}; Pearson {pear.text()}"
    note = (f"step 0: Spearman {fmt(r0)}, Pearson {fmt(p0)}. The readers' rho of about -0.5 is a "
            f"{READERS_RHO_STATISTIC} value: compare it with our Pearson {fmt(pear.value)}, not with "
            "the Spearman statistic the rule uses")
    return _unit(model, site, out, est, f"step {_step(last)}", note)


def freqdist_panel(model: Model) -> Panel | None:
    """The frequency-spread correlation against step, for one model."""
    t = model.table
    sites = t.sites("freq_distance_spearman")
    if not sites:
        return None
    steps = t.steps("freq_distance_spearman")
    series: list[Series] = [Series("no correlation (0)", "hline", (), (0.0,))]
    for i, site in enumerate(sites):
        series.append(t.step_series("freq_distance_spearman", site, f"Spearman {site}", color=2 * i))
        if t.has("freq_distance_pearson"):
            series.append(t.step_series("freq_distance_pearson", site, f"Pearson {site}", color=2 * i + 1))
    return Panel(f"{model.name}: log-frequency vs occurrence spread", STEP_LABEL,
                 "correlation coefficient (-1 to 1)", tuple(series), xscale=_axis(steps))


# ------------------------------------------------------------------------------ causal ablation

MATCHED_METRIC = "ablation_loss_matched_mean"
PER_VARIANCE_PREFIX = "ablation_loss_per_variance_"


def ablation_unit(model: Model, site: str) -> Unit:
    """Loss increase when ablating Q_T against variance-matched controls, for one site."""
    t = model.table
    last = t.last_step("ablation_loss_tangent", site)
    tt = t.get("ablation_loss_tangent", site=site, step=last)
    has_matched = t.has(MATCHED_METRIC)
    m = t.get(MATCHED_METRIC, site=site, step=last)
    out = R.matched_ablation_rule(tt.interval("Q_T"),
                                  m.interval("variance-matched controls") if has_matched else None)
    est = f"Q_T {tt.text()}" + (f"; variance-matched controls {m.text()}" if has_matched else "")
    per = t.metrics_with_prefix(PER_VARIANCE_PREFIX, site=site, step=last)
    old = t.get("ablation_loss_control_mean", site=site, step=last)
    notes = []
    if per:
        notes.append("loss increase per unit of removed variance: " + "; ".join(
            f"{name[len(PER_VARIANCE_PREFIX):]} {t.get(name, site=site, step=last).text()}" for name in per))
    if old.present:
        notes.append(f"complement controls (not variance-matched) {old.text()}")
    return _unit(model, site, out, est, f"step {_step(last)} (last causal checkpoint)", "; ".join(notes))


def ablation_panel(model: Model) -> Panel | None:
    """The ablation loss increases against step, for one model."""
    t = model.table
    sites = t.sites("ablation_loss_tangent")
    if not sites:
        return None
    steps = t.steps("ablation_loss_tangent")
    series: list[Series] = []
    for i, site in enumerate(sites):
        series.append(t.step_series("ablation_loss_tangent", site, f"ablate Q_T {site}", color=3 * i))
        if t.has(MATCHED_METRIC):
            series.append(_range_series(t, MATCHED_METRIC, site, f"variance-matched controls {site}",
                                        color=3 * i + 1))
        if t.has("ablation_loss_control_mean"):
            series.append(_range_series(t, "ablation_loss_control_mean", site,
                                        f"complement controls (bars: range) {site}", color=3 * i + 2))
    return Panel(f"{model.name}: loss increase on ablation", STEP_LABEL,
                 "loss increase (nats per token)", tuple(series), xscale=_axis(steps))

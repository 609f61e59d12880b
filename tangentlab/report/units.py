"""The empirical verdicts, one (model, site) at a time.

A *model* is one measured checkpoint trajectory: our own ``measure/<arch>`` stage or an external
measurement run (``external/<NAME>``). For each empirical prediction there is one builder that
takes a :class:`Model` and a site and returns a frozen :class:`Unit` (status, estimate, interval,
which checkpoints it used), and one that draws the model's panel. The verdict table
(:mod:`tangentlab.report.verdicts`) combines the units of a row with :func:`combine_units`
(:func:`tangentlab.claims.rules.combine`, leaving out units whose rule does not apply). The
weakens-late builders live in :mod:`tangentlab.report.late`; the causal rows' builders (the
ablation excess and the learning arms, issue 18) close this module.

Every number is read from the model's stored table and manifest; nothing is recomputed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tangentlab.claims import causal_rules as CR
from tangentlab.claims import rules as R
from tangentlab.report.figures import Panel, Series
from tangentlab.report.summary import row_notes, test_batches_of
from tangentlab.report.tables import Estimate, ResultTable, fmt

__all__ = [
    "Model",
    "Unit",
    "EnergySource",
    "energy_source",
    "bucket_order",
    "enrichment_unit",
    "bucket_unit",
    "isoscore_unit",
    "freqdist_unit",
    "bucket_panel",
    "comparison_panel",
    "READERS_RHO_STATISTIC",
    "ONE_CHECKPOINT",
    "is_not_applicable",
    "combine_units",
    "ablation_unit",
    "learning_unit",
    "EXCESS_METRIC",
    "MATCHED_METRIC",
    "LEARNING_METRIC",
]

#: Every training-step axis of the report: symlog (linear from 0 to 1, logarithmic above), so step 0
#: sits at the left edge and log-spaced checkpoints spread evenly. The label says so.
STEP_SCALE = "symlog"
STEP_LABEL = "training step (optimizer updates; symlog axis: 0, then log)"
ENRICH_LABEL = "enrichment E_T / mean E_N (ratio)"
#: The statistic behind the readers' rho of about -0.5 (issue 10 item 7: a Pearson value).
READERS_RHO_STATISTIC = "Pearson"
#: The status of a unit whose rule needs a trajectory, on a run with one trained checkpoint. It is
#: not a verdict: such units are left out when a row's units are combined.
ONE_CHECKPOINT = "not applicable (one checkpoint)"


def is_not_applicable(status: str) -> bool:
    """Whether ``status`` says the rule does not apply (e.g. :data:`ONE_CHECKPOINT`)."""
    return status.startswith("not applicable")


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


def _named(sites: Sequence[str]):
    """Labels for one model's panel: the site joins a label only when the panel has several.

    Returns ``(label, who)``: ``label(text, site)`` and the panel title's prefix ``who(name)``
    (the model's name, with the site when it is the only one), so a one-site legend stays short.
    """
    one = len(sites) == 1

    def label(text: str, site: str) -> str:
        return text if one else f"{text} {site}"

    def who(name: str) -> str:
        return f"{name} {sites[0]}" if one else name

    return label, who


def _step(st: float | None) -> str:
    return "?" if st is None else f"{st:g}"


def combine_units(units: Sequence[Unit]) -> R.Outcome:
    """The units' outcomes combined by :func:`tangentlab.claims.rules.combine`.

    Units whose rule does not apply (:data:`ONE_CHECKPOINT`) are left
    out and named; when no unit applies, the row itself reads not applicable.
    """
    applies = [u for u in units if not is_not_applicable(u.status)]
    skipped = [u for u in units if is_not_applicable(u.status)]
    if not applies:
        return R.Outcome(skipped[0].status, "; ".join(f"{u.label}: {u.reason}" for u in skipped))
    out = R.combine({u.label: u.outcome for u in applies})
    if skipped:
        out = R.Outcome(out.status, out.reason + "; not applicable, left out: " + ", ".join(
            f"{u.label} ({u.status})" for u in skipped))
    return out


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
    # the per-batch ratio CV of the test the verdict reads (constrained rows carry their own;
    # the reachable test stores none and shares the plain test's batches)
    cv = src.table.get("ratio_cv", site=site, step=last)
    if cv.value is None:
        cv = t.get("ratio_cv", site=site, step=last)
    # above the validated CV the interval runs low: the rule withholds "not supported" (RULES)
    out = R.enrichment_rule(e.value, e.ci_low, e.ci_high, p, n, e0, ratio_cv=cv.value,
                            cv_limit=cv.band_high)
    note = (f"p {fmt(p)} (n_controls {n if n is not None else '?'}), step 0: {fmt(e0)}, "
            f"position between null and oracle {fmt(t.get('position', site=site, step=last).value)}")
    if src.kind != "plain":
        plain = t.get("enrichment", site=site, step=last)
        note = f"{src.note()}; plain enrichment {plain.text()}; " + note
    if cv.value is not None and cv.band_high is not None and cv.value > cv.band_high:
        note += (f"; per-batch ratio CV {fmt(cv.value)} lies outside the validated range "
                 f"(<= {fmt(cv.band_high)}): the interval may run low (cv_outside_validated_range)")
    # numbers that cannot be right, or an interval from fewer batches than were validated
    flags = row_notes(e.value, e.ci_low, e.ci_high, test_batches=test_batches_of(model.manifest))
    if flags:
        note += "; " + "; ".join(flags)
    return _unit(model, site, out, e.text(), f"step {_step(last)}", note)


def comparison_panel(models: Sequence[Model], *, title: str = "all models",
                     max_series: int | None = None) -> Panel | None:
    """Enrichment against step for every model and site, with step 0 and control band.

    Each (model, site) is one series in its own colour (colours repeat after eight, with another
    marker shape), with its step-0 value dashed and its control band shaded in that colour. Every
    series is drawn unless ``max_series`` caps them; then the title states the cap and how many
    were left out.
    """
    series: list[Series] = [Series("null: controls (= 1)", "hline", (), (1.0,))]
    pairs = [(model, site) for model in models for site in model.table.sites("enrichment")]
    if not pairs:
        return None
    shown = pairs if max_series is None else pairs[:max_series]
    for i, (model, site) in enumerate(shown):
        t = model.table
        steps = t.steps("enrichment", site)
        band = t.band_series("control_enrichment_low", "control_enrichment_high", site,
                             "_nolegend_", steps, color=i)
        if band is not None:
            series.append(band)
        series.append(t.step_series("enrichment", site, f"{model.name} {site}", color=i))
        e0 = t.get("enrichment", site=site, step=0.0).value
        if e0 is not None:
            series.append(Series("_nolegend_", "hline", (), (e0,), style="reference", color=i))
    head = f"{title}: enrichment (dashed: step 0; shaded: controls)"
    if len(shown) < len(pairs):
        head += f"\nfirst {len(shown)} of {len(pairs)} (model, site) series drawn (cap {max_series})"
    return Panel(head, STEP_LABEL, ENRICH_LABEL, tuple(series), xscale=STEP_SCALE)


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
    sites = t.sites("enrichment")
    _, who = _named(sites)
    one = len(sites) == 1
    for i, site in enumerate(sites):
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
        series.append(Series(f"step {_step(last)}" if one else f"{site} step {_step(last)}", "points", xs, ys,
                             tuple(e.ci_low if e.ci_low is not None else y for (_, e), y in zip(rows, ys)),
                             tuple(e.ci_high if e.ci_high is not None else y for (_, e), y in zip(rows, ys)),
                             color=i))
        s0 = [t.get("enrichment", site=site, step=0.0, bucket=b).value for b in labels]
        if any(v is not None for v in s0):
            series.append(Series("step 0" if one else f"{site} step 0", "points", xs,
                                 tuple(v if v is not None else float("nan") for v in s0), color=i,
                                 style="hollow"))
    if not series:
        return None
    series.insert(0, Series("null: controls (= 1)", "hline", (), (1.0,)))
    return Panel(f"{who(model.name)}: enrichment by frequency bucket", "frequency bucket (rare -> frequent)",
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


# ------------------------------------------------------------------------------ causal ablation

MATCHED_METRIC, EXCESS_METRIC = "ablation_loss_matched_mean", "ablation_excess"
DISP_METRIC, PER_VARIANCE_PREFIX = "ablation_loss_matched_displacement_mean", "ablation_loss_per_variance_"
BOTH_METRIC = "ablation_loss_matched_both_mean"


def ablation_unit(model: Model, site: str) -> Unit:
    """The paired excess of ablating Q_T over rank- and variance-matched controls, for one site."""
    t, has = model.table, model.table.has(EXCESS_METRIC)  # a run from before issue 18 has none
    last = t.last_step("ablation_loss_tangent", site)
    tt, ex, m, tm, v, ext, old, dx, dm, bx, bm = (t.get(k, site=site, step=last) for k in (
        "ablation_loss_tangent", EXCESS_METRIC, MATCHED_METRIC, "ablation_loss_tangent_matched",
        "removed_variance_matched", "ablation_excess_extrapolated", "ablation_loss_control_mean",
        f"{EXCESS_METRIC}_displacement", DISP_METRIC, f"{EXCESS_METRIC}_both", BOTH_METRIC))
    out = CR.ablation_excess_rule(ex.interval("paired excess") if has else None, m.value if has else None,
                                 displacement=dx.interval("displacement-matched") if dx.present else None,
                                 control_displacement=dm.value,
                                 both=bx.interval("matched on variance and displacement") if bx.present else None,
                                 control_both=bm.value)
    est = (f"paired excess {ex.text()}; at removed variance {fmt(v.value)}: Q_T {tm.text()}, matched "
           f"controls {m.text()}; displacement-matched excess {dx.text()}" if has else f"Q_T {tt.text()}")
    if bx.present:
        est = f"excess matched on variance and displacement {bx.text()}; variance-only " + est
    notes = [f"full ablation of Q_T {tt.text()}, extrapolated excess {ext.text()} (not the verdict)"] if has else []
    if per := t.metrics_with_prefix(PER_VARIANCE_PREFIX, site=site, step=last):
        notes.append("loss increase per unit of removed variance: " + "; ".join(
            f"{name[len(PER_VARIANCE_PREFIX):]} {t.get(name, site=site, step=last).text()}" for name in per))
    notes += [f"complement controls (not variance-matched) {old.text()}"] if old.present else []
    return _unit(model, site, out, est, f"step {_step(last)} (last causal checkpoint)", "; ".join(notes))


LEARNING_METRIC = "learning_excess"


def learning_unit(model: Model, site: str) -> Unit:
    """The learning-arms excess (away from controls minus away from Q_T), for one site."""
    t = model.table
    last = t.last_step(LEARNING_METRIC, site)
    ex, eo, eh, un, aw, ac, on, oc = (t.get(k, site=site, step=last) for k in (
        LEARNING_METRIC, "learning_excess_onto", "learning_excess_onto_haar",
        "learning_loss_decrease_unmodified", "learning_loss_decrease_away",
        "learning_loss_decrease_away_control_mean", "learning_loss_decrease_onto",
        "learning_loss_decrease_onto_control_mean"))
    out = CR.learning_arms_rule(ex.interval("away excess") if ex.present else None, un.value,
                                onto=eo.interval("onto excess") if eo.present else None,
                                haar=eh.interval("Haar excess") if eh.present else None)
    haar = f"; Haar excess {eh.text()}" if eh.present else ""
    est = (f"away excess {ex.text()}; onto excess {eo.text()}{haar}; held-out loss decrease: "
           f"unmodified {un.text()}, away from Q_T {aw.text()}, away from controls {ac.text()}, "
           f"onto Q_T {on.text()}, onto controls {oc.text()}")
    return _unit(model, site, out, est, f"step {_step(last)} (last causal checkpoint)", "")

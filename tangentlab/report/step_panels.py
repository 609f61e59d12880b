"""The per-model panels against the training step, as one table of :class:`StepPanel` frames.

Every step panel of the report (enrichment, IsoScore*, frequency-distance, ablation here; the
late window in :mod:`tangentlab.report.late`) is a :class:`StepPanel`: the metric whose sites it
draws, its title and y label, and the series of one site; the frame (sites, colours, the symlog
step axis, the title) is written once. :data:`STEP_PANELS` lists them by key, like
``verdicts.ROWS`` lists the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tangentlab.report.figures import Panel, Series
from tangentlab.report.tables import ResultTable
from tangentlab.report.units import (
    ENRICH_LABEL,
    LEARNING_METRIC,
    MATCHED_METRIC,
    STEP_LABEL,
    STEP_SCALE,
    Model,
    _named,
)

__all__ = ["StepPanel", "STEP_PANELS", "enrichment_panel", "isoscore_panel", "freqdist_panel",
           "ablation_panel", "learning_panel"]


@dataclass(frozen=True)
class StepPanel:
    """A per-model panel against the training step: the frame every step panel shares.

    The sites are those of ``metric``; each site gets its colour group from ``per_site(table,
    site, label, steps, i) -> [Series]`` (``label(text, site)`` names a series, ``steps`` are
    ``metric``'s steps); ``head`` series come first, ``tail(model, steps)`` after the sites. The
    title is ``"<model>: <title>"``; the x axis is :data:`STEP_LABEL` on :data:`STEP_SCALE`.
    Calling it with a :class:`Model` gives its :class:`Panel` (``None`` without the metric).
    """

    metric: str
    title: str
    ylabel: str
    per_site: Any
    head: tuple[Series, ...] = ()
    tail: Any = None

    def __call__(self, model: Model) -> Panel | None:
        """The panel of ``model`` (None when it stores no ``metric`` rows)."""
        t = model.table
        sites = t.sites(self.metric)
        if not sites:
            return None
        lbl, who = _named(sites)
        steps = t.steps(self.metric)
        series = list(self.head)
        for i, site in enumerate(sites):
            series += self.per_site(t, site, lbl, steps, i)
        if self.tail is not None:
            series += self.tail(model, steps)
        return Panel(f"{who(model.name)}: {self.title}", STEP_LABEL, self.ylabel, tuple(series),
                     xscale=STEP_SCALE)


def _enrichment_series(t: ResultTable, site: str, lbl, steps, i: int) -> list[Series]:
    """Controls band, Q_T and the step-0 value of one site."""
    out = []
    band = t.band_series("control_enrichment_low", "control_enrichment_high", site,
                         lbl("controls, min-max", site), steps, color=i)
    if band is not None:
        out.append(band)
    out.append(t.step_series("enrichment", site, lbl("Q_T", site), color=i))
    e0 = t.get("enrichment", site=site, step=0.0).value
    if e0 is not None:
        out.append(Series(lbl("step 0", site), "hline", (), (e0,), style="reference", color=i))
    return out


#: Enrichment against step for one model: every site, controls band, step 0 and oracle.
enrichment_panel = StepPanel("enrichment", "tangent enrichment over training", ENRICH_LABEL,
                             _enrichment_series,
                             head=(Series("null: controls (= 1)", "hline", (), (1.0,)),))

def _isoscore_series(t: ResultTable, site: str, lbl, steps, i: int) -> list[Series]:
    return [t.step_series("delta_isoscore_tangent", site, lbl("Q_T removed", site), color=2 * i),
            _range_series(t, "delta_isoscore_control_mean", site,
                          lbl("controls removed (mean; bars: range)", site), color=2 * i + 1)]


#: ΔIsoScore* of Q_T and of the controls against step, for one model.
isoscore_panel = StepPanel("delta_isoscore_tangent", "delta IsoScore*",
                           "delta IsoScore* of gradients (IsoScore* units, 0-1)", _isoscore_series)


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


def _freqdist_series(t: ResultTable, site: str, lbl, steps, i: int) -> list[Series]:
    out = [t.step_series("freq_distance_spearman", site, lbl("Spearman", site), color=2 * i)]
    if t.has("freq_distance_pearson"):
        out.append(t.step_series("freq_distance_pearson", site, lbl("Pearson", site), color=2 * i + 1))
    return out


#: The frequency-spread correlation against step, for one model.
freqdist_panel = StepPanel("freq_distance_spearman", "log-frequency vs occurrence spread",
                           "correlation coefficient (-1 to 1)", _freqdist_series,
                           head=(Series("no correlation (0)", "hline", (), (0.0,)),))


def _ablation_series(t: ResultTable, site: str, lbl, steps, i: int) -> list[Series]:
    out = [t.step_series("ablation_loss_tangent", site, lbl("ablate Q_T", site), color=3 * i)]
    if t.has(MATCHED_METRIC):
        out.append(_range_series(t, MATCHED_METRIC, site, lbl("variance-matched controls", site),
                                 color=3 * i + 1))
    if t.has("ablation_loss_control_mean"):
        out.append(_range_series(t, "ablation_loss_control_mean", site,
                                 lbl("complement controls (bars: range)", site), color=3 * i + 2))
    return out


#: The ablation loss increases against step, for one model.
ablation_panel = StepPanel("ablation_loss_tangent", "loss increase on ablation",
                           "loss increase (nats per token)", _ablation_series)


def _learning_series(t: ResultTable, site: str, lbl, steps, i: int) -> list[Series]:
    arms = (("unmodified", "unmodified"), ("away", "away from Q_T"),
            ("away_control_mean", "away from controls"), ("onto", "onto Q_T"),
            ("onto_control_mean", "onto controls"))
    return [t.step_series(f"learning_loss_decrease_{arm}", site, lbl(name, site), color=5 * i + j)
            for j, (arm, name) in enumerate(arms) if t.has(f"learning_loss_decrease_{arm}")]


#: The held-out loss decrease of each learning arm against step, for one model.
learning_panel = StepPanel(LEARNING_METRIC, "held-out loss decrease per training arm",
                           "loss decrease (nats per token)", _learning_series)


#: The step panels by key (the late-window panel lives with its rule in ``late``).
STEP_PANELS: dict[str, StepPanel] = {"enrichment": enrichment_panel, "isoscore": isoscore_panel,
                                     "freqdist": freqdist_panel, "ablation": ablation_panel,
                                     "learning-arms": learning_panel}

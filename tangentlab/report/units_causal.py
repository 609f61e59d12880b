"""Unit builders of the causal rows: the ablation excess and the learning arms (issue 18).

Kept apart from :mod:`tangentlab.report.units` (as :mod:`tangentlab.report.late` is) so that
module stays within its line budget; the row specs in :mod:`tangentlab.report.verdicts` name
these builders.
"""

from __future__ import annotations

from tangentlab.claims import causal_rules as CR
from tangentlab.report.tables import fmt
from tangentlab.report.units import (
    Model,
    Unit,
    _step,
    _unit,
)

__all__ = ["ablation_unit", "learning_unit",
           "EXCESS_METRIC", "MATCHED_METRIC", "LEARNING_METRIC"]


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
    ex, un, aw, ac, on = (t.get(k, site=site, step=last) for k in (
        LEARNING_METRIC, "learning_loss_decrease_unmodified", "learning_loss_decrease_away",
        "learning_loss_decrease_away_control_mean", "learning_loss_decrease_onto"))
    out = CR.learning_arms_rule(ex.interval("excess") if ex.present else None, un.value)
    est = (f"excess {ex.text()}; held-out loss decrease: unmodified {un.text()}, away from Q_T "
           f"{aw.text()}, away from controls {ac.text()}, onto Q_T {on.text()}")
    return _unit(model, site, out, est, f"step {_step(last)} (last causal checkpoint)", "")

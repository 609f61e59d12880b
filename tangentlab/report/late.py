"""The weakens-late verdict, one (model, site) at a time: the late window, its unit and panel.

The late window is read from what the measurement recorded (:func:`late_window`); a trajectory of
fewer than two trained checkpoints reads :data:`tangentlab.report.units.ONE_CHECKPOINT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tangentlab.claims import rules as R
from tangentlab.report.figures import Series
from tangentlab.report.step_panels import StepPanel
from tangentlab.report.units import (
    ENRICH_LABEL,
    ONE_CHECKPOINT,
    EnergySource,
    Model,
    Unit,
    _step,
    _unit,
    energy_source,
)

__all__ = ["LateWindow", "late_window", "weakens_late_unit", "weakens_late_panel"]


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
    points = [t.get(src.enrichment, site=site, step=s).interval(f"step {_step(s)}")
              for s in sorted(window.steps)]
    first_late = min(window.steps) if window.steps else float("inf")
    before = [t.get(src.enrichment, site=site, step=s).interval(f"step {_step(s)}")
              for s in trained if s < first_late]
    return (R.ProxyTrajectory(proxy, peak, best in window.steps, before, late, points), window,
            src)


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
    t = model.table
    trained = [s for s in t.steps("enrichment", site) if s > 0]
    if len(trained) < 2:  # a late weakening needs a trajectory: one checkpoint cannot show it
        at = f"step {_step(trained[0])}" if trained else "no trained checkpoint"
        return Unit(model.name, site, ONE_CHECKPOINT,
                    f"{len(trained)} trained checkpoint{'s' if len(trained) != 1 else ''} "
                    f"({at}); a late weakening needs a trajectory of at least two",
                    t.get("enrichment", site=site, step=trained[0]).text() if trained
                    else "no trained checkpoint", at)
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


def _late_markers(model: Model, steps) -> list[Series]:
    """The early/late cut (or the first late step) as a vertical line."""
    window = late_window(model.manifest, [s for s in steps if s > 0])
    if window.cut is not None:
        return [Series(f"early/late cut (step {_step(window.cut)}): late window to the right",
                       "vline", (window.cut,), (), style="reference")]
    if window.steps:
        return [Series(f"late window starts (step {_step(min(window.steps))})", "vline",
                       (min(window.steps),), (), style="reference")]
    return []


#: Enrichment against step with the peak and the late window marked, for one model.
weakens_late_panel = StepPanel(
    "enrichment", "enrichment and the late window", ENRICH_LABEL,
    lambda t, site, lbl, steps, i: [t.step_series("enrichment", site, lbl("Q_T", site), color=i)],
    tail=_late_markers)

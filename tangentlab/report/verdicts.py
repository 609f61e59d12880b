"""The verdict table: a table of row specifications, each decided from stored results.

:data:`ROWS` lists one :class:`RowSpec` per claim of :data:`tangentlab.claims.table.CLAIMS`, in
report order; its section is the claim's kind:

- ``instrument``: does the method measure what it claims (synthetic agreement with theory,
  proxy recovery, the validation battery)? A failure here says the instrument is off;
- ``argument``: the theory's own argument (derivations verify, the gap in the gradient step and
  its counterexample, Muon against exact sign descent): a failure is a finding about the
  argument, not a fault of the instrument;
- ``prediction``: the paper's claims, measured on trained Transformers, one unit per
  (model, site) (:mod:`tangentlab.report.units`).

A row's ``build`` is one of three typed builders: :class:`TheoryRow`, :class:`ChecksRow` (a
stage's ``checks.json``) or :class:`EmpiricalRow` (one unit builder per (model, site) and one
panel per model). :func:`build_verdicts` runs them on the opened run's plain stage records
(:class:`~tangentlab.report.load.Stage`: a builder never reads the run directory) and returns
frozen :class:`Verdict` records, the one row model both pages lay out.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tangentlab.claims import rules as R
from tangentlab.claims.table import CLAIMS, KIND_TITLES, claim
from tangentlab.contract import THEORY, measure_stage, synthetic_stage
from tangentlab.report import late as L
from tangentlab.report import step_panels as SP
from tangentlab.report import units as U
from tangentlab.report.checks import CheckLine, check_lines, theory_check_lines
from tangentlab.report.figures import Panel, Series
from tangentlab.report.gating import gate
from tangentlab.report.load import EXTERNAL_PREFIX, VALIDATE_STAGE, RunData, Source, Stage, Stages
from tangentlab.report.synthetic_panels import PanelSpec, prediction_panels

__all__ = [
    "Verdict",
    "Built",
    "RowSpec",
    "TheoryRow",
    "ChecksRow",
    "EmpiricalRow",
    "ROWS",
    "SECTION_TITLES",
    "build_verdicts",
    "row_keys",
    "models",
    "measure_stages",
]

#: The three verdict tables, in order: kind -> title (the claims' kinds,
#: :data:`tangentlab.claims.table.KIND_TITLES`).
SECTION_TITLES: dict[str, str] = dict(KIND_TITLES)


@dataclass(frozen=True)
class Built:
    """What a row's builder read: the overall outcome and everything shown beside it."""

    outcome: R.Outcome
    numbers: tuple[tuple[str, str], ...] = ()
    panels: tuple[Panel, ...] = ()
    units: tuple[U.Unit, ...] = ()
    checks: tuple[CheckLine, ...] = ()
    figures: tuple[Path, ...] = ()  # PNGs a stage stored itself (the validation battery)
    external_units: tuple[U.Unit, ...] = ()  # external runs, shown apart (not pooled)
    external_outcome: R.Outcome | None = None  # the external runs' units combined, on their own
    external_panels: tuple[Panel, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """One row of a verdict table.

    Attributes:
        key: stable identifier (``"enrichment"``).
        title: short name of the prediction.
        prediction: what the account predicts (or what the calibration checks), in words.
        section: ``calibration`` or ``prediction``.
        status: one of :data:`tangentlab.claims.rules.STATUS_WORDS`.
        reason: the numbers behind the status.
        rule: the rule text (from :data:`tangentlab.claims.rules.RULES`).
        test: the test behind the numbers.
        numbers: ``(label, value)`` facts shown with the row (set-up, counts).
        paper: what the paper reported for the same quantity.
        sources: where the numbers come from.
        panels: the figure, as data.
        units: one record per (model, site) (empirical rows).
        checks: every recorded check, with its kind of error (calibration rows).
        figures: PNGs the stage stored (shown as they are).
        depends_on: the key of the row this one is not independent of (``None``: independent).
        error: set when the builder itself raised (a bug, shown in the report).
        external_units: the (model, site) units of external measurement runs, shown in their own
            sub-table; they do not enter ``status`` unless the run is rendered with ``pool``.
        external_status, external_reason: the external units combined on their own.
        external_panels: their figure, as data (kept apart from ``panels``).
        pooled: whether external runs were pooled into ``status`` (``--pool``).
        gated: why the row's raw "supported"/"not supported" was gated to "inconclusive (not
            validated)" (:mod:`tangentlab.report.gating`); empty when it was not.
        raw_status: the status the rules gave before gating (empty when not gated).
        certified: the certificate that validated the row when the run's own end-to-end run
            did not (:mod:`tangentlab.claims.certificates`), in words; empty otherwise.
    """

    key: str
    title: str
    prediction: str
    section: str
    status: str
    reason: str
    rule: str
    test: str
    numbers: tuple[tuple[str, str], ...] = ()
    paper: str = ""
    sources: tuple[Source, ...] = ()
    panels: tuple[Panel, ...] = ()
    units: tuple[U.Unit, ...] = ()
    checks: tuple[CheckLine, ...] = ()
    figures: tuple[Path, ...] = ()
    depends_on: str | None = None
    error: str | None = None
    external_units: tuple[U.Unit, ...] = ()
    external_status: str | None = None
    external_reason: str = ""
    external_panels: tuple[Panel, ...] = ()
    pooled: bool = False
    gated: str = ""
    raw_status: str = ""
    certified: str = ""


@dataclass(frozen=True)
class RowSpec:
    """How to build one verdict row.

    ``stages(names)`` chooses, from the run's stage names (the recorded stages, then the
    external runs), the stages whose outputs it reads; ``build(stages, pool)`` reads the done
    ones (:class:`~tangentlab.report.load.Stage` records; ``pool``: external runs pooled in).
    """

    key: str
    title: str
    prediction: str
    section: str
    rule: str
    test: str
    stages: Callable[[Sequence[str]], list[str]]
    build: Callable[[list[Stage], bool], Built]
    depends_on: str | None = None
    require_all: bool = False  # every stage must be done (else: at least one)


# ------------------------------------------------------------------------------- calibration

@dataclass(frozen=True)
class TheoryRow:
    """Every derivation's checks, from ``theory/verify.json``."""

    def stages(self, names: Sequence[str]) -> list[str]:
        """The stage this row reads (``theory``)."""
        return [THEORY]

    def __call__(self, stages: list[Stage], pool: bool = False) -> Built:
        """Build the row from the derivations' checks."""
        ver = stages[0].verify
        lines = theory_check_lines(ver)
        numbers = []
        xs, ys, labels = [], [], []
        for i, d in enumerate(ver.get("derivations", [])):
            name = str(d.get("name") or d.get("derivation"))
            cs = d.get("checks", [])
            secs = d.get("seconds")
            numbers.append((name, f"{sum(1 for c in cs if c.get('passed'))}/{len(cs)} checks passed"
                            + (f" in {float(secs):.1f} s" if isinstance(secs, (int, float)) else "")))
            labels.append(name)
            for c in cs:
                r, tol = c.get("residual"), c.get("tolerance")
                if not isinstance(r, (int, float)):
                    continue
                ratio = abs(r) / tol if isinstance(tol, (int, float)) and tol else abs(r)
                xs.append(float(i))
                ys.append(min(max(ratio, 1e-17), 1e17))
        panel = Panel("Every derivation check: residual / tolerance", "derivation",
                      "|residual| / tolerance (ratio; floored at 1e-17)",
                      (Series("pass threshold (= 1)", "hline", (), (1.0,), style="reference"),
                       Series("checks", "points", tuple(xs), tuple(ys))),
                      yscale="log", categories=tuple(labels))
        outcome = R.checks_rule([{"name": c.name, "passed": c.passed} for c in lines])
        failed = tuple(c for c in lines if not c.passed)
        numbers.append(("every check", f"{len(lines)} checks, each with its kind of error, are listed in "
                                       "the Theory checks section" + ("; failed ones below" if failed else "")))
        return Built(outcome, tuple(numbers), (panel,), checks=failed)


def _is_attenuation(c: Mapping[str, Any]) -> bool:
    """Checks of the visibility experiment that belong to the attenuation row.

    Those about the frequency-biased token model (occurrence/type visibility, attenuation, Zipf s,
    pinning alpha).
    """
    name = str(c.get("name", "")).lower()
    return any(w in name for w in ("atten", "occurrence", "type_visibility", "type visibility",
                                   "alpha", "zipf", "frequency"))


def _not_attenuation(c: Mapping[str, Any]) -> bool:
    return not _is_attenuation(c)


@dataclass(frozen=True)
class ChecksRow:
    """A row decided by the ``checks.json`` a stage recorded (synthetic experiments, validation).

    Attributes:
        stage: the stage whose directory holds ``checks.json``.
        select: which of its checks belong to this row (all when None).
        panels: what its ``results.csv`` figure draws (synthetic experiments).
        stored_figures: also show the PNGs the stage stored itself.
    """

    stage: str
    select: Callable[[Mapping[str, Any]], bool] | None = None
    panels: tuple[PanelSpec, ...] = ()
    stored_figures: bool = False

    def stages(self, names: Sequence[str]) -> list[str]:
        """The stage, or its sub-stages where the run split it (``validate/quick``, ...)."""
        subs = [s for s in names if s.startswith(self.stage + "/")]
        return subs or [self.stage]

    def __call__(self, stages: list[Stage], pool: bool = False) -> Built:
        """Build the row from the stage's ``checks.json``."""
        checks: list[Mapping[str, Any]] = []
        panels: list[Panel] = []
        figures: list[Path] = []
        for stage in stages:
            checks += [c for c in stage.checks if self.select is None or self.select(c)]
            if stage.has_results:
                panels += prediction_panels(stage.results, stage.name.split("/")[-1], self.panels)
            if self.stored_figures:
                figures += stage.figures
        return Built(R.checks_rule(checks), panels=tuple(panels), checks=check_lines(checks),
                     figures=tuple(figures))


# ------------------------------------------------------------------------------- predictions

def _measure_stages(names: Sequence[str]) -> list[str]:
    own = ([s for s in names if s.startswith(measure_stage(""))]
           or [measure_stage("encoder"), measure_stage("decoder")])
    return own + [s for s in names if s.startswith(EXTERNAL_PREFIX)]


def measure_stages(data: RunData) -> list[str]:
    """Our own measure stages (those recorded; both by default) then the external runs."""
    return _measure_stages(data.names)


def _models(stages: Sequence[Stage]) -> list[U.Model]:
    return [U.Model(st.name.split("/", 1)[-1], st.name, st.table, st.manifest)
            for st in stages if st.done]


def models(data: RunData, stages: Sequence[str]) -> list[U.Model]:
    """One :class:`~tangentlab.report.units.Model` per done stage, each with its own table."""
    return _models([data.stages[s] for s in stages])


@dataclass(frozen=True)
class EmpiricalRow:
    """A prediction measured per (model, site).

    Attributes:
        metric: the metric whose sites are this row's units.
        unit: builds one (model, site) unit.
        panel: draws one model's panel (None when it has nothing to draw).
        comparison: also draw every model on one panel (enrichment against step).
    """

    metric: str
    unit: Callable[[U.Model, str], U.Unit]
    panel: Callable[[U.Model], Panel | None]
    comparison: bool = False

    def stages(self, names: Sequence[str]) -> list[str]:
        """The measurement stages this row reads (ours and external ones)."""
        return _measure_stages(names)

    def _units(self, ms: Sequence[U.Model]) -> tuple[U.Unit, ...]:
        return tuple(self.unit(m, site) for m in ms for site in m.table.sites(self.metric))

    def _panels(self, ms: Sequence[U.Model], compare: Sequence[U.Model], title: str) -> list[Panel]:
        panels = [p for p in (self.panel(m) for m in ms) if p is not None]
        if self.comparison and len(compare) > 1:
            cmp = U.comparison_panel(compare, title=title)
            if cmp is not None:
                panels.insert(0, cmp)
        return panels

    def __call__(self, stages: list[Stage], pool: bool = False) -> Built:
        """Build the row: one unit per (model, site), then the overall rule.

        External measurement runs get units and panels of their own, combined apart, unless the
        run is rendered with ``pool`` (then every model's units decide the row together).
        """
        ms = _models(stages)
        own = [m for m in ms if not m.stage.startswith(EXTERNAL_PREFIX)]
        ext = [m for m in ms if m.stage.startswith(EXTERNAL_PREFIX)]
        judged, apart = (ms, []) if pool else (own, ext)
        units = self._units(judged)
        ext_units = self._units(apart)
        panels = self._panels(judged, judged, "all models" if pool else "our models")
        ext_panels = self._panels(apart, ms, "all models (ours and external)") if apart else []
        numbers = tuple((f"{m.name} set-up", m.facts()) for m in ms if m.facts())
        for m in ms:
            dup = m.table.duplicates.get(self.metric, 0)
            if dup:
                numbers += ((f"{m.name}: duplicate rows",
                             f"{dup} {self.metric} rows repeat an earlier row's step, site and bucket "
                             "(told apart only by a column the report does not select on); the first "
                             "stored row of each is read"),)
        missing = [m.name for m in ms if not m.table.has(self.metric)]
        if missing:
            numbers += (("not measured", f"no {self.metric} rows in: {', '.join(missing)}"),)
        if ext and pool:
            numbers += (("pooled", "the external measurements (" + ", ".join(m.name for m in ext)
                         + ") are pooled into this verdict (--pool)"),)
        elif ext:
            numbers += (("external measurements", "shown apart below (" + ", ".join(m.name for m in ext)
                         + "); they do not enter this verdict (render with --pool to judge by them)"),)
        if not units:  # an optional measurement nobody stored (e.g. causal checks switched off)
            who = ", ".join(m.name for m in judged) or "no model of our own"
            outcome = R.Outcome(R.NOT_RUN, f"no measured model stored {self.metric} rows ({who})")
        else:
            outcome = U.combine_units(units)
        ext_outcome = U.combine_units(ext_units) if ext_units else None
        return Built(outcome, numbers, tuple(panels), units, external_units=ext_units,
                     external_outcome=ext_outcome, external_panels=tuple(ext_panels))


# ------------------------------------------------------------------------------- the rows

def _builders() -> dict[str, Any]:
    """How each claim's row is drawn from a run, keyed by claim key."""
    return {
        "theory": TheoryRow(),
        "visibility": ChecksRow(synthetic_stage("visibility"), _not_attenuation, (
             PanelSpec(("visibility_exact_frame",), "visibility vs t (one point per manifold)", x="t",
                       group=("manifold",), where=(("point", 0),),
                       ylabel="normal / tangent variance (ratio)", logx=True, logy=True),
             PanelSpec(("visibility_ratio_local_pca",), "measured / theory (local-PCA frame)", x="t",
                       group=("manifold",), ylabel="visibility / (t^2 ||II||^2 / (2m)) (ratio)"),
         )),
        "attenuation": ChecksRow(synthetic_stage("visibility"), _is_attenuation, (
             PanelSpec(("attenuation",), "attenuation factor vs pinning alpha", x="alpha", group=("s",),
                       ylabel="occurrence / type visibility (ratio)", reference=1.0,
                       reference_label="no attenuation"),
             PanelSpec(("occurrence_visibility", "type_visibility"), "pooled visibilities", x="alpha",
                       group=("s",), ylabel="visibility (normal / tangent variance)"),
         )),
        "gradient-ratio": ChecksRow(synthetic_stage("gradient-ratio"), None, (
             PanelSpec(("normal_tangent_ratio",), "||normal|| / ||tangent|| (line: corrected bound)",
                       x="t", group=("case", "manifold"), ylabel="normal / tangent (ratio)",
                       logx=True, logy=True),
         )),
        "amplification": ChecksRow(synthetic_stage("amplification"), None, (
             PanelSpec(("tangent_share",), "tangent share: closed form (GD) vs toy", x="step",
                       where=(("optimizer", "sgd"), ("head", "chart"), ("weighting", "uniform")),
                       group=(), ylabel="tangent share of variance (fraction)"),
             PanelSpec(("tangent_share",), "tangent share under SGD, Adam, Muon", x="step",
                       where=(("weighting", "frequency"), ("bucket", "all")), group=("optimizer", "head"),
                       ylabel="tangent share of variance (fraction)"),
         )),
        "proxy-recovery": ChecksRow(synthetic_stage("proxy-recovery"), None, (
             PanelSpec(("mean_principal_angle_deg",), "angle to the true tangent space", x="rank",
                       group=("extractor", "manifold"), ylabel="mean principal angle (degrees)"),
         )),
        "river-valley": ChecksRow(synthetic_stage("river-valley"), None, (
             PanelSpec(("hitting_time",), "valley: steps to reach the optimum", x="optimizer",
                       where=(("problem", "valley"),), group=(), ylabel="hitting time (steps)", logy=True),
             PanelSpec(("final_band",), "valley: final oscillation band", x="optimizer",
                       where=(("problem", "valley"),), group=(), ylabel="final |x - x*| (chart units)",
                       logy=True),
             PanelSpec(("hitting_time",), "matrix sensing: hitting time per component", x="component",
                       where=(("problem", "matrix-sensing"),), group=("optimizer",),
                       ylabel="hitting time (steps)", logy=True),
         )),
        "validation": ChecksRow(VALIDATE_STAGE, None, (), stored_figures=True),
        "enrichment": EmpiricalRow("enrichment", U.enrichment_unit, SP.enrichment_panel, comparison=True),
        "weakens-late": EmpiricalRow("enrichment", L.weakens_late_unit, L.weakens_late_panel),
        "frequency-buckets": EmpiricalRow("enrichment", U.bucket_unit, U.bucket_panel),
        "isoscore": EmpiricalRow("delta_isoscore_tangent", U.isoscore_unit, SP.isoscore_panel),
        "frequency-distance": EmpiricalRow("freq_distance_spearman", U.freqdist_unit, SP.freqdist_panel),
        "ablation": EmpiricalRow("ablation_loss_tangent", U.ablation_unit, SP.ablation_panel),
        "learning-arms": EmpiricalRow(U.LEARNING_METRIC, U.learning_unit, SP.learning_panel),
    }


def _rows() -> tuple[RowSpec, ...]:
    """One row per claim of :data:`~tangentlab.claims.table.CLAIMS`, with its builder."""
    builders = _builders()
    return tuple(RowSpec(c.key, c.title, c.statement, c.kind, c.rule_text, c.test,
                         builders[c.key].stages, builders[c.key], depends_on=c.depends_on)
                 for c in CLAIMS)


ROWS: tuple[RowSpec, ...] = _rows()


def row_keys() -> list[str]:
    """The keys of the verdict rows, in report order."""
    return [r.key for r in ROWS]


def _one(spec: RowSpec, stages: Stages, names: Sequence[str], pool: bool) -> Verdict:
    read = [stages[s] for s in spec.stages(names)]
    base = Verdict(key=spec.key, title=spec.title, prediction=spec.prediction, section=spec.section,
                   status=R.NOT_RUN, reason="", rule=spec.rule, test=spec.test,
                   paper=claim(spec.key).paper, sources=tuple(st.source for st in read),
                   depends_on=spec.depends_on)
    problems = [st.problem for st in read if st.problem]
    done = [st for st in read if st.done]
    if not done or (spec.require_all and problems):
        return replace(base, reason="; ".join(problems) or "no stage ran")
    try:
        built = spec.build(done, pool)
    except Exception as exc:  # a builder that raises is a bug: show it, do not hide the row
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())
        return replace(base, reason=f"the rule could not read the stored results ({msg})",
                       error=msg + "\n" + traceback.format_exc(limit=3))
    reason, status = built.outcome.reason, built.outcome.status
    if problems:
        reason += "; also " + "; ".join(problems)
        if status == R.SUPPORTED:
            status = R.INCONCLUSIVE
            reason += " (supported only where measured)"
    ext = built.external_outcome
    return replace(base, status=status, reason=reason, numbers=built.numbers, panels=built.panels,
                   units=built.units, checks=built.checks, figures=built.figures,
                   external_units=built.external_units,
                   external_status=ext.status if ext is not None else None,
                   external_reason=ext.reason if ext is not None else "",
                   external_panels=built.external_panels,
                   pooled=pool and any(st.external for st in done))


def build_verdicts(data: RunData, rows: Sequence[RowSpec] | None = None) -> list[Verdict]:
    """One :class:`Verdict` per row spec (default :data:`ROWS`), in order, from the opened run.

    The prediction rows of a run opened with :meth:`RunData.open
    <tangentlab.report.load.RunData.open>` are gated on their end-to-end validation
    (:func:`tangentlab.report.gating.gate`).
    """
    names = data.names
    verdicts = [_one(spec, data.stages, names, data.pool)
                for spec in (rows if rows is not None else ROWS)]
    return (gate(verdicts, data.end_to_end, data.stages, data.certificates_read) if data.gate
            else verdicts)


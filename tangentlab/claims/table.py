"""The claims table: every claim the project tests is one row, read by every part that needs it.

One :class:`Claim` per row of the report, in report order (:data:`CLAIMS`). A claim holds what the
report, the gate, the end-to-end battery and the docs each used to keep a copy of:

- ``key``, ``title``, ``statement`` (what is claimed), ``paper`` (what the paper reported for the
  same quantity, :data:`tangentlab.claims.paper.PAPER`) and ``test`` (how it is measured);
- ``kind``: ``instrument`` (calibration of the instrument: a failure says the method is off),
  ``argument`` (the theory's own argument: derivations, the gap in the gradient step, the river
  valley; a failure is a finding about the argument, not a fault of the instrument) or
  ``prediction`` (a prediction of the account, measured on trained Transformers);
- ``rule``: the key of its rule text in :data:`tangentlab.claims.rules.RULES`;
- ``metrics``: the results metrics the rule reads (a test checks the measurement writes them);
- for a prediction, its end-to-end truth in every planted scenario of the battery
  (:meth:`Claim.truth`: ``null``, ``positive`` or ``negative``; :mod:`tangentlab.validate.
  planted_scenarios` plants the scenarios and reads their truths here), or ``not_validated``:
  why the battery plants no truth for it (the gate then says so).

The report's builders (how a row is drawn from a run) stay in :mod:`tangentlab.report.verdicts`,
keyed by claim key; a test keeps the two key lists equal. This module imports nothing but the
standard library and the other claims modules.

**Truths.** ``null``: neither "supported" nor "not supported" is true (both are wrong statuses);
``positive``: the claim holds ("not supported" is wrong; power = P("supported")); ``negative``:
it fails ("supported" is wrong). A row whose "not supported" asserts the opposite effect
(enrichment below 1, a late rise, rho > 0) has no true answer where nothing is planted: its
unplanted truth is ``null``. A row whose "not supported" is an equivalence claim (``ablation``,
``learning-arms``) makes a true claim where no direction-specific cost is planted: its unplanted
truth is ``negative``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tangentlab.claims.paper import PAPER

__all__ = ["KINDS", "KIND_TITLES", "TRUTHS", "Claim", "CLAIMS", "claim", "claim_keys",
           "validated_keys"]

#: The three kinds of claim, in report order.
KINDS: tuple[str, ...] = ("instrument", "argument", "prediction")
#: The report's section title of each kind.
KIND_TITLES: Mapping[str, str] = MappingProxyType({
    "instrument": "Calibration of the instrument",
    "argument": "The theory's own argument",
    "prediction": "Predictions of the account",
})
#: The end-to-end truths a prediction can have in a scenario.
TRUTHS: tuple[str, ...] = ("null", "positive", "negative")


@dataclass(frozen=True)
class Claim:
    """One claim (see the module docstring for each field).

    ``unplanted``: a prediction's truth in every scenario that does not plant its effect;
    ``planted``: scenario name → truth where it differs (the scenario plants the effect, or
    plants one that decides the claim's answer).
    """

    key: str
    kind: str
    title: str
    statement: str
    rule: str
    test: str
    metrics: tuple[str, ...] = ()
    unplanted: str | None = None
    planted: Mapping[str, str] = field(default_factory=dict)
    not_validated: str = ""
    depends_on: str | None = None

    @property
    def paper(self) -> str:
        """What the paper reported for the same quantity ("" where it reported nothing)."""
        return PAPER.get(self.key, "")

    @property
    def rule_text(self) -> str:
        """The rule behind each status word (:data:`tangentlab.claims.rules.RULES`)."""
        from tangentlab.claims.rules import RULES

        return RULES[self.rule]

    @property
    def validated_end_to_end(self) -> bool:
        """Whether the end-to-end battery plants a truth for this claim."""
        return self.kind == "prediction" and self.unplanted is not None

    def truth(self, scenario: str) -> str | None:
        """The claim's truth in ``scenario`` (None: not validated end to end)."""
        if not self.validated_end_to_end:
            return None
        return self.planted.get(scenario, self.unplanted)


_CHECKS = "checks"


def _instrument(key: str, title: str, statement: str, test: str) -> Claim:
    return Claim(key, "instrument", title, statement, _CHECKS, test)


def _argument(key: str, title: str, statement: str, test: str) -> Claim:
    return Claim(key, "argument", title, statement, _CHECKS, test)


#: Where the ``effect`` scenario's enrichment holds, so do these scenarios' (k > 1 at the end).
_ENRICHED = ("effect", "drift", "flat", "plateau", "slow-rise")

CLAIMS: tuple[Claim, ...] = (
    _argument(
        "theory", "Derivations verify",
        "Every derivation's symbolic identities, numeric spot checks and Monte-Carlo checks hold.",
        "theory verify: symbolic, numeric and Monte-Carlo checks"),
    _instrument(
        "visibility", "Curvature visibility against t",
        "Visibility V(t) = normal/tangent variance = t^2 ||II||_F^2 / (2m) for Gaussian chart "
        "coordinates: small neighbourhoods look flat.",
        "synthetic visibility: sampled manifolds vs curvature-visibility"),
    _instrument(
        "attenuation", "Attenuation under frequency bias",
        "Pooling occurrences (frequency-weighted, pinned frequent tokens) shows less curvature "
        "than pooling types: attenuation factor < 1 whenever alpha > 0.",
        "synthetic visibility: Zipf token model vs frequency-attenuation"),
    _argument(
        "gradient-ratio", "Gradient ratio and the counterexample",
        "With a lower bound c on the tangent part, ||normal||/||tangent|| <= kappa t / (2c); "
        "without it the O(t) claim fails (parabola with a constant upstream gradient).",
        "synthetic gradient-ratio vs gradient-components"),
    _instrument(
        "amplification", "Tangent amplification in toys (SGD, Adam, Muon)",
        "Training moves representations mostly along tangent directions, so the tangent share "
        "of gradient energy and variance grows, under each optimizer.",
        "synthetic amplification vs tangent-amplification"),
    _instrument(
        "proxy-recovery", "Proxy recovery against ground truth",
        "Activation-fitted proxies (PCA, semi-NMF, ICA, TopK SAE) recover the true tangent space "
        "(small principal angles); the control test finds a planted signal and not a null one.",
        "synthetic proxy-recovery: principal angles, planted and null control tests"),
    _argument(
        "river-valley", "River valley: Muon against exact sign descent and GD",
        "Sign descent (Muon) advances along the river at a constant rate, beating GD early, then "
        "oscillates in a band of width ~eta; switching Muon -> GD at the derived point is "
        "fastest.",
        "synthetic river-valley vs the river-valley derivation"),
    _instrument(
        "validation", "Validation battery",
        "The measurement statistics, fed streams whose truth is known, find a planted tangent "
        "signal, keep the false-positive rate at its level, cover at their nominal rate, and "
        "show no frequency-spread effect under the null.",
        "tangentlab validate: power, null calibration, coverage and frequency-spread null"),
    Claim(
        "enrichment", "prediction", "Tangent energy enrichment over training",
        "True gradients put more energy into the activation-fitted tangent proxy than into "
        "matched-rank normal controls: enrichment > 1, above its step-0 value, p at its floor; "
        "every model and site.",
        "enrichment",
        "control_test of Q_T against matched-rank normal controls on the gradient second moment",
        metrics=("enrichment",), unplanted="null",
        planted={s: "positive" for s in _ENRICHED}),
    Claim(
        "weakens-late", "prediction", "Enrichment weakens late in training",
        "The enrichment rises early and weakens late in training: the late window ends below "
        "the trajectory's peak.",
        "weakens-late",
        "enrichment per checkpoint with its bootstrap CI; late window from the measurement's "
        "record",
        metrics=("enrichment",), unplanted="null",
        planted={"effect": "positive", "slow-rise": "negative"}),
    Claim(
        "frequency-buckets", "prediction", "Enrichment by frequency bucket",
        "Enrichment is strongest for frequent tokens (small spread t).",
        "frequency-buckets", "control_test per log-frequency quantile bucket, bootstrap CI",
        metrics=("enrichment",), unplanted="null", planted={"effect": "positive"}),
    Claim(
        "isoscore", "prediction", "Delta IsoScore* of Q_T against controls",
        "Projecting Q_T out of the gradients raises their isotropy more than projecting out a "
        "control. Depends on the enrichment: not an independent verdict.",
        "isoscore", "IsoScore* of gradients before and after projecting out Q_T or a control",
        metrics=("delta_isoscore_tangent",), depends_on="enrichment",
        not_validated=(
            "not validated end to end: the battery plants no truth for Delta IsoScore*; it reads "
            "the gradients the enrichment row reads (projecting out an enriched Q_T raises their "
            "isotropy), so it depends on that row and is not certified on its own")),
    Claim(
        "frequency-distance", "prediction", "Frequency-distance correlation",
        "Frequent tokens are pinned near their centroid: log-frequency and occurrence spread "
        "correlate negatively.",
        "frequency-distance",
        "Spearman (the rule) and Pearson (the readers' statistic) over token types, bootstrap "
        "CI, count-corrected spread",
        metrics=("freq_distance_spearman",), unplanted="null", planted={"effect": "positive"}),
    Claim(
        "ablation", "prediction", "Causal ablation: Q_T against dose-matched controls",
        "Ablating the activations along Q_T raises the loss more than ablating along "
        "rank-matched controls at the same dose (the same removed variance, and the same mean "
        "squared displacement), on the same positions.",
        "ablation",
        "partial mean-ablation of Q_T / each control at a common dose, run the model forward",
        metrics=("ablation_loss_tangent", "ablation_excess_both"), unplanted="negative",
        planted={"effect": "positive"}),
    # learning arms: the learnable part is the gradient's shared mean, enriched along the
    # measured proxy wherever the enrichment is planted at the last checkpoint, except under
    # drift (the proxy fitted early misses the rotated subspace: an excess of about 1.5% of the
    # unmodified learning, far below the rule's 10% margin; docs/validation.md): negative there
    Claim(
        "learning-arms", "prediction", "Learning needs the tangent directions",
        "Continuing training with the site's activation gradient projected away from Q_T lowers "
        "the held-out loss less than projecting away from rank-matched controls, and projected "
        "onto Q_T lowers it more than projected onto the controls.",
        "learning-arms",
        "SGD arms from the last causal checkpoint with the site gradient projected onto / away "
        "from Q_T or onto / away from controls (Song, Ahn & Yun 2025; the onto-control arms "
        "answer arXiv 2604.25143's random-subspace finding)",
        metrics=("learning_excess", "learning_excess_onto", "learning_excess_onto_haar"),
        unplanted="negative",
        planted={s: "positive" for s in _ENRICHED if s != "drift"}),
)

_BY_KEY: Mapping[str, Claim] = MappingProxyType({c.key: c for c in CLAIMS})


def claim(key: str) -> Claim:
    """The claim called ``key`` (UnknownNameError lists the others)."""
    from tangentlab.errors import UnknownNameError

    try:
        return _BY_KEY[key]
    except KeyError:
        raise UnknownNameError(f"unknown claim {key!r}; the claims are {', '.join(_BY_KEY)}"
                               ) from None


def claim_keys(kind: str | None = None) -> tuple[str, ...]:
    """The claim keys in report order (of one ``kind`` when given)."""
    return tuple(c.key for c in CLAIMS if kind is None or c.kind == kind)


def validated_keys() -> tuple[str, ...]:
    """The predictions the end-to-end battery plants a truth for, in report order."""
    return tuple(c.key for c in CLAIMS if c.validated_end_to_end)

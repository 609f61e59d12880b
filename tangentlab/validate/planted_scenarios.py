"""The end-to-end battery's scenarios: what each planted trajectory plants, and the true answer per row.

Every scenario is a :class:`~tangentlab.validate.planted_trajectories.PlantedSpec` (the planted
model and its trajectory), measure overrides, and the truth of each prediction row it assesses:

- ``null``: neither "supported" nor "not supported" is true (both are wrong statuses);
- ``positive``: the prediction holds ("not supported" is wrong; power = P("supported"));
- ``negative``: the prediction fails ("supported" is wrong).

**The truth of each row in each scenario** is the claim's, in the claims table
(:meth:`tangentlab.claims.table.Claim.truth`): each prediction states its truth where nothing is
planted (``null``, or ``negative`` where its "not supported" is an equivalence claim) and in the
scenarios that plant what decides it. :func:`scenario` fills :attr:`Scenario.truth` from there,
so the rows the battery measures (:data:`PREDICTION_ROWS`) and their truths live in one place.

**Effect sizes, fixed before the first run** (:data:`EFFECT`), the power rows of the ``effect``
scenario:

- enrichment: planted factor k = 3 at the last checkpoint (1 at step 0);
- weakens late: k rises to 6 at 30% of training, then falls linearly to 3 at the end;
- frequency buckets: the gradient's planted part scales with gain² ∝ f^0.25 (frequent tokens more
  enriched; about 2× between the rarest and the most frequent quintile);
- frequency–distance: pinning exponent α = 0.5 at the last checkpoint, none at step 0 (spread
  ∝ f^(-α x), clipped to 1/4–4× t_ref). Changed after a run (issue 33): until then α = 0.25
  from step 0 on; once each checkpoint drew its contexts afresh, that static pinning left
  "not above step 0" a coin flip, and with the ramp α = 0.25 gave power 1/6 at the standard
  setting (ρ ≈ −0.2, CI half-width ≈ 0.2), α = 0.5 gave 7/8;
- causal: ablating the planted directions costs 4× more loss per unit of removed activation
  variance than any other direction (linear φ);
- learning arms: the enrichment's k = 3 at the last checkpoint, with the gradient's shared
  offset b = 1 (``grad_bias``): removing S from the site gradient removes 30% of the mean
  gradient's energy, a rank-matched control about 10%.

The nulls (issue 18): no effect; overlapping windows with short eval text (half the budget);
bursty document vocabulary (a window-mean topic vector); convex (x + 0.5x²) and concave
(log(1 + 0.5x)/0.5) loss–variance relations; a rogue dimension; a 150× position 0 excluded with
``exclude_positions = (0,)``; subspace drift (35°) at a constant relation; flat, plateau and slowly
rising trajectories; r/d = 1/64, 1/16 and 1/4 (d = 64); heavy-tailed rows (a lognormal(0.5)
scale per position), alone and with a convex or concave per-row cost (issue 33); training inside
any rank-r subspace learns, with no direction preferred (``onto-anything``, issue 36: a 4x shared
gradient offset learned at 10x the step; the learning-arms row's truth there is negative).
Our planted family does not reproduce the regime of arXiv 2604.25143 in which training inside a
random low-rank subspace learns *more* than unmodified training: on the planted model, steps of
0.0005 to 0.2 nats never let an onto arm beat the unmodified one (docs/validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tangentlab.claims.table import CLAIMS, validated_keys

__all__ = ["PREDICTION_ROWS", "EFFECT", "Scenario", "SCENARIOS", "QUICK_SCENARIOS", "scenario",
           "enrichment_truth"]

#: The predictions the battery measures: the claims it plants a truth for, in report order.
PREDICTION_ROWS: tuple[str, ...] = validated_keys()

#: The planted effects of the power scenario (see the module docstring), fixed before any run.
EFFECT: dict[str, Any] = {"curve": "weaken", "k_peak": 6.0, "k_end": 3.0, "x_peak": 0.3,
                          "gain_exponent": 0.25, "alpha": 0.5, "cost_ratio": 4.0}

#: The per-position lognormal scale of the heavy-tailed nulls (ς; E[s²] = 1).
HEAVY_SIGMA = 0.5

#: The shared gradient offset b and the learning arms' step (nats) of the ``onto-anything``
#: null: with b = 4 on the default planted model (d = 32, r = 4) training onto a control learns
#: about a tenth of what unmodified training learns (tests/validate/test_planted_scenarios.py).
ANY_SUBSPACE_BIAS = 4.0
ANY_SUBSPACE_STEP = 0.005

#: The position-0 offset of the massive-activation null: 300 √m ≈ 150× the typical row norm
#: (about 4 at the default spec: √(m (1 + t²) + d σ²)).
POS0_SCALE = 300.0


@dataclass(frozen=True)
class Scenario:
    """One null or power setting.

    Attributes:
        name: short identifier (``no-effect``).
        text: what it plants, in words.
        spec: :class:`PlantedSpec` overrides.
        measure: ``measure`` overrides (beside the setting's own).
        truth: row key → ``null`` | ``positive`` | ``negative``, from the claims table (filled
            by :func:`scenario`; rows absent: not assessed).
        eval_budget_fraction: > 0 cuts the eval text to this fraction of the tokens the eval
            windows read per checkpoint (n_batches × batch_size × seq_len).
    """

    name: str
    text: str
    spec: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)
    truth: dict[str, str] = field(default_factory=dict)
    eval_budget_fraction: float = 0.0

    def planted(self, **extra: Any):
        """The :class:`~tangentlab.validate.planted_trajectories.PlantedSpec` it plants (``extra`` on top)."""
        from tangentlab.validate.planted_trajectories import PlantedSpec

        return PlantedSpec(**{**self.spec, **extra})


def _rd(r: int) -> Scenario:
    return Scenario(f"rd-1/{64 // r}", f"no effect at r/d = {r}/64 (d = 64, planted and measured "
                    f"rank {r})", spec={"d": 64, "m": r}, measure={"rank": r})


_LIST = (
    Scenario("effect", "every planted effect at its stated size (power)", spec=dict(EFFECT)),
    Scenario("no-effect", "k = 1 everywhere, no pinning, no bucket gain, an isotropic linear "
             "loss-variance relation"),
    Scenario("short-eval", "no effect; the eval text is only 1.25x the tokens the windows read "
             "(random-offset windows overlapped heavily here; since issue 18 the windows are "
             "disjoint, and text shorter than the windows is refused)",
             eval_budget_fraction=1.25),
    Scenario("bursty", "no effect; a document-level topic vector (bursty vocabulary)",
             spec={"topic": 2.0}),
    Scenario("convex", "no directional effect; loss = x + 0.5 x^2 of the removed variance",
             spec={"cost_shape": "convex", "cost_curvature": 0.5}),
    Scenario("concave", "no directional effect; loss = log(1 + 0.5 x) / 0.5 of the removed "
             "variance", spec={"cost_shape": "concave", "cost_curvature": 0.5}),
    Scenario("rogue", "no effect; a rogue standard axis with offset 20 (std 10)",
             spec={"rogue_scale": 20.0}),
    Scenario("pos0-excluded", "no effect; position 0 at about 150x the typical norm, measured "
             "with exclude_positions = 0", spec={"pos0_scale": POS0_SCALE},
             measure={"exclude_positions": (0,)}),
    # learning arms: the learnable part is the gradient's *mean*, a coherent vector, so its
    # projection on the fixed proxy adds amplitudes, not energies: per direction
    # (2 cos 30° − sin 30°)² ≈ 1.5 against a control's ≈ 1.35, an excess of about 1.5% of the
    # unmodified learning, far below the rule's 10% margin (docs/validation.md): negative
    Scenario("drift", "k = 4 in the current subspace from step 1 on while it rotates 35 degrees",
             spec={"curve": "flat", "k_end": 4.0, "drift_deg": 35.0}),
    Scenario("flat", "k = 4 from step 1 on (flat)", spec={"curve": "flat", "k_end": 4.0}),
    Scenario("plateau", "k rises to 4 at 30% of training, then stays",
             spec={"curve": "plateau", "k_end": 4.0}),
    Scenario("slow-rise", "k rises linearly to 4 at the last step",
             spec={"curve": "slow_rise", "k_end": 4.0}),
    _rd(1),
    _rd(4),
    _rd(16),
    # issue 33: residual streams of trained models are heavy-tailed; a per-row lognormal scale
    # (E s^2 = 1) on activations and gradient directions, alone and with a per-row convex or
    # concave cost: the double match must not read the tails as a direction-specific effect
    Scenario("heavy-tails", "no effect; a lognormal(0.5) scale per position on activations and "
             "gradients", spec={"row_scale_sigma": HEAVY_SIGMA}),
    Scenario("heavy-convex", "no directional effect; heavy-tailed rows and loss = x + 0.5 x^2 "
             "of each row's displacement", spec={"row_scale_sigma": HEAVY_SIGMA,
                                                 "cost_shape": "convex", "cost_curvature": 0.5}),
    Scenario("heavy-concave", "no directional effect; heavy-tailed rows and loss = log(1 + "
             "0.5 x) / 0.5 of each row's displacement",
             spec={"row_scale_sigma": HEAVY_SIGMA, "cost_shape": "concave",
                   "cost_curvature": 0.5}),
    # issue 36: training inside *any* rank-r subspace learns (a random one included), and no
    # direction is preferred: the learning-arms row must not read it as "needs Q_T"
    Scenario("onto-anything", "no preferred direction; a 4x shared gradient offset (b = 4) "
             "learned at 10x the setting's step: training inside any rank-r subspace lowers the "
             "held-out loss, inside Q_T no more than inside a control",
             spec={"grad_bias": ANY_SUBSPACE_BIAS},
             measure={"learning_step_loss": ANY_SUBSPACE_STEP}),
)

def _with_truths(sc: Scenario) -> Scenario:
    """``sc`` with every measured row's truth in it, from the claims table."""
    return replace(sc, truth={c.key: c.truth(sc.name) for c in CLAIMS if c.validated_end_to_end})


#: Every scenario by name, in battery order (read-only), with its truths.
SCENARIOS: MappingProxyType = MappingProxyType({s.name: _with_truths(s) for s in _LIST})
#: The quick setting's scenarios (the power one and the two nulls that fail most visibly today).
QUICK_SCENARIOS = ("effect", "no-effect", "short-eval")


def scenario(name: str) -> Scenario:
    """The scenario called ``name`` (UnknownNameError lists the others)."""
    from tangentlab.errors import UnknownNameError

    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownNameError(f"unknown end-to-end scenario {name!r}; choose from "
                               f"{', '.join(SCENARIOS)}") from None


def enrichment_truth(name: str) -> float | None:
    """The enrichment every unit of scenario ``name`` has at every checkpoint, where it is exact.

    1.0 where the planted gradient is isotropic at every step (k = 1 all along and no token
    gain): then every subspace, the fitted proxy included, holds the same expected energy per
    dimension as its controls, whatever the fit. None elsewhere: a planted k > 1 is the
    enrichment of S, and the fitted proxy's enrichment depends on how well it found S.
    """
    from tangentlab.validate.planted_trajectories import enrichment_curve

    spec = scenario(name).planted()
    flat_one = all(enrichment_curve(spec, x) == 1.0 for x in (0.0, 0.1, 0.3, 0.5, 0.9, 1.0))
    return 1.0 if flat_one and spec.gain_exponent == 0.0 else None

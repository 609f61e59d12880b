"""What the paper (and its two citing papers) reported, quoted per verdict row.

Embedded text, so the report never reads files outside the package. Source: the project's
summary of *Revisiting Anisotropy in Language Transformers: The Geometry of Learning Dynamics*
(Bernas, Jourdan, Poché, Hudelot; arXiv 2604.08764), rebuilt from its abstract and readers'
notes; no table values survive, so every statement here is qualitative.
"""

from __future__ import annotations

__all__ = ["PAPER", "PAPER_CITATION"]

PAPER_CITATION = (
    "Bernas, Jourdan, Poché, Hudelot, Revisiting Anisotropy in Language Transformers: "
    "The Geometry of Learning Dynamics (arXiv 2604.08764, 2026); river valley: arXiv 2606.21514; "
    "causal tests: Observable Patterns Are Not Explanations, arXiv 2606.12689"
)

#: Per verdict row: what the paper (or the cited paper) reported for the same quantity.
PAPER: dict[str, str] = {
    "theory": (
        "The paper's argument is on paper only. Its gradient step (eqs. 9-11) concludes "
        "normal/tangent = O(t) from two upper bounds, which do not bound a ratio; a lower bound "
        "on the tangent part is needed."
    ),
    "visibility": (
        "A small neighbourhood of a curved manifold looks flat: visible curvature grows with "
        "the local scale t (qualitative; no measured curve survives)."
    ),
    "attenuation": (
        "Frequency-biased sampling attenuates curvature visibility: frequent tokens are pinned "
        "near their centroid, so what the model sees most often looks flat (qualitative)."
    ),
    "gradient-ratio": (
        "Eqs. 9-11: tangent part O(G_rms t), normal part O(G_rms kappa t^2), hence a "
        "normal/tangent ratio O(t). Stated without the lower bound that the ratio needs."
    ),
    "amplification": (
        "Training preferentially amplifies tangent directions: updates move representations "
        "mostly along the tangent space and variance piles up there, which is anisotropy."
    ),
    "proxy-recovery": (
        "The tangent proxy is fitted from activations by concept extraction (PCA, semi-NMF); "
        "the paper had no ground truth to score it against."
    ),
    "enrichment": (
        "Enrichment above 1 with p at its floor, often by orders of magnitude in decoders; "
        "the effect weakens late in training and is weaker in encoders."
    ),
    "weakens-late": (
        "The effect weakens late in training (qualitative; no checkpoint values survive)."
    ),
    "frequency-buckets": "Frequent tokens show the strongest tangent enrichment.",
    "isoscore": "Removing Q_T raises isotropy more than removing a control.",
    "frequency-distance": (
        "The readers report rho of about -0.5 between log-frequency and distance to the "
        "centroid for decoders, weaker for encoders. That is a Pearson correlation: compare it "
        "with our Pearson value, not with the Spearman statistic the rule uses."
    ),
    "ablation": (
        "Not measured in the paper. The citing paper (arXiv 2606.12689) asks for causal tests "
        "against controls before a pattern counts as an explanation."
    ),
    "validation": (
        "Not in the paper. The citing paper (arXiv 2606.12689) asks that statistics be "
        "calibrated under a null and shown to recover a planted signal before they are read."
    ),
    "river-valley": (
        "Muon paper (arXiv 2606.21514): Muon advances fast along flat river directions where "
        "gradient descent crawls, then oscillates near the optimum; a two-stage schedule (Muon, "
        "then gradient descent) combines both."
    ),
}

"""tangentlab.measure: the shared measurement core, used by synthetic and empirical alike.

Conventions: point clouds are ``(n_samples, dim)``; moment matrices ``(d, d)``; a subspace basis
is ``(d, r)`` with orthonormal columns. Inputs may be numpy or torch; outputs are numpy or floats;
moments accumulate in float64. Bad input raises a typed :mod:`tangentlab.errors` error.

- subspaces: :func:`orthonormalize`, :func:`projector`, :func:`complement_basis`,
  :func:`principal_angles`, :func:`random_subspace`, :func:`normal_controls`,
  :func:`subspace_drift`;
- moments: :class:`MomentAccumulator`, :func:`outer_product_sum`;
- energy: :func:`energy_fraction`, :func:`control_test`, :func:`oracle_energy`, ...;
- batch tests: :func:`batch_energies`, :func:`batch_control_test` (intervals that cover);
- frequency geometry: :func:`one_per_window`, :func:`one_per_group`, :func:`equal_size_spread`,
  :func:`equal_size_picks`, :func:`equal_size_centroids`, :func:`correlation_with_ci`,
  :func:`document_jackknife_correlation`;
- mean-ablation and the variance it removes: :func:`removed_variance`, :func:`mean_ablate`;
- causal dose-response (rank- and variance-matched): :func:`spectrum_weighted_controls`,
  :func:`strength_for`, :func:`dose_plan`, :func:`paired_excess`, :func:`curve_at`;
- constrained gradients: :func:`forced_direction_cosines`, :func:`complement_space`,
  :func:`restrict_to_complement`, :func:`reachable_baseline`, :func:`normalised_enrichment`;
- isotropy: :func:`isoscore`, :func:`isoscore_star`, :func:`mean_cosine`,
  :func:`effective_rank`, :func:`participation_ratio`, :func:`top_variance_share`;
- proxies: :class:`PCAProxy`, :class:`SemiNMFProxy`, :class:`ICAProxy`, :class:`TopKSAEProxy`,
  :func:`make_proxy`, ``PROXY_NAMES``;
- curvature: :func:`local_tangent`, :func:`fit_second_fundamental_form`,
  :func:`empirical_visibility`, :func:`visibility_in_frame`; with standard errors and a "not
  measurable here" marker: :func:`local_curvature`, :func:`local_dimension`,
  :func:`neighbourhood_size`; per token and pooled: :func:`per_token_curvature`,
  :func:`pooled_visibility`, :func:`measured_attenuation`;
- closed-form inputs: :func:`fit_zipf` (Zipf s), :func:`pinning_exponent` (beta = s alpha, with a
  norm null);
- peer baselines: :func:`rankme`, :func:`alpha_req`, :func:`intrinsic_dimension` (TwoNN, GRIDE).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure import MomentAccumulator, make_proxy, control_test
    >>> rng = np.random.default_rng(0)
    >>> acts = rng.standard_normal((400, 16)) * np.r_[np.full(2, 6.0), np.ones(14)]
    >>> grads = rng.standard_normal((400, 16)) * np.r_[np.full(2, 4.0), np.ones(14)]
    >>> Q = make_proxy("pca", n_components=2).fit(acts).basis()        # (16, 2)
    >>> acc = MomentAccumulator(16)
    >>> acc.update(grads)
    >>> res = control_test(Q, acc.second_moment(), n_controls=20, seed=0, rows=grads)
    >>> bool(res.enrichment > 3 and res.p_value == 1 / 21)
    True
"""

from __future__ import annotations

from tangentlab.measure._validate import check_positive_int
from tangentlab.measure.batch_energy import (
    BatchEnergies,
    EnergyStream,
    EnergyStreamGroup,
    batch_energies,
    grouped_batch_energies,
)
from tangentlab.measure.batch_test import BatchControlTestResult, batch_control_test
from tangentlab.measure.buckets import (
    PooledRatio,
    measured_attenuation,
    per_token_curvature,
    pooled_visibility,
)
from tangentlab.measure.causal_controls import (
    DOSE_LEVELS,
    DosePlan,
    DoseResponse,
    curve_at,
    dose_plan,
    paired_excess,
    spectrum_weighted_controls,
    strength_for,
)
from tangentlab.measure.constrained import (
    ComplementSpace,
    complement_space,
    forced_direction_cosines,
    normalised_enrichment,
    reachable_baseline,
    restrict_to_complement,
)
from tangentlab.measure.controls import (
    mean_ablate,
    removed_variance,
)
from tangentlab.measure.curvature import (
    SecondFundamentalFormFit,
    empirical_visibility,
    fit_second_fundamental_form,
    local_tangent,
    nearest_neighbours,
    visibility_in_frame,
)
from tangentlab.measure.curvature_stats import (
    LocalCurvature,
    LocalDimension,
    local_curvature,
    local_curvature_at,
    local_dimension,
    n_quadratic_parameters,
    neighbourhood_size,
)
from tangentlab.measure.energy import (
    ControlTestResult,
    bootstrap_ci,
    control_test,
    energy_fraction,
    energy_fractions,
    oracle_basis,
    oracle_energy,
)
from tangentlab.measure.geometry import (
    correlation_with_ci,
    document_jackknife_correlation,
    equal_size_centroids,
    equal_size_picks,
    equal_size_spread,
    first_k_indices,
    one_per_group,
    one_per_window,
)
from tangentlab.measure.isotropy import (
    covariance_of,
    effective_rank,
    isoscore,
    isoscore_from_spectrum,
    isoscore_star,
    isoscore_star_after_removal,
    mean_cosine,
    participation_ratio,
    top_variance_share,
)
from tangentlab.measure.moments import MomentAccumulator, outer_product_sum
from tangentlab.measure.pinning import (
    PinningFit,
    pinning_exponent,
    pinning_with_norm_null,
    token_ranks,
)
from tangentlab.measure.proxies import (
    PROXY_NAMES,
    ICAProxy,
    PCAProxy,
    SemiNMFProxy,
    TopKSAEProxy,
    make_proxy,
)
from tangentlab.measure.spectrum import (
    ID_METHODS,
    RANKME_CONVENTIONS,
    AlphaReQ,
    OptionalDependencyError,
    alpha_req,
    intrinsic_dimension,
    rankme,
)
from tangentlab.measure.subspace import (
    SubspaceDrift,
    complement_basis,
    full_space_controls,
    normal_controls,
    orthonormalize,
    principal_angles,
    projector,
    random_subspace,
    random_subspaces,
    subspace_drift,
)
from tangentlab.measure.tails import VALIDATED_RATIO_CV, outside_validated_range, ratio_cv
from tangentlab.measure.zipf import ZIPF_METHODS, ZipfFit, fit_zipf, plot_zipf_fit, zipf_mle

__all__ = [
    # input checks shared with the validation battery
    "check_positive_int",
    # subspace
    "orthonormalize",
    "projector",
    "complement_basis",
    "principal_angles",
    "random_subspace",
    "normal_controls",
    "random_subspaces",
    "full_space_controls",
    # heavy-tailed batches
    "ratio_cv",
    "VALIDATED_RATIO_CV",
    "outside_validated_range",
    "SubspaceDrift",
    "subspace_drift",
    # moments
    "MomentAccumulator",
    "outer_product_sum",
    # energy
    "energy_fraction",
    "energy_fractions",
    "oracle_energy",
    "oracle_basis",
    "bootstrap_ci",
    "ControlTestResult",
    "control_test",
    "BatchEnergies",
    "EnergyStream",
    "EnergyStreamGroup",
    "batch_energies",
    "grouped_batch_energies",
    "BatchControlTestResult",
    "batch_control_test",
    # mean-ablation and the variance it removes
    "removed_variance",
    "mean_ablate",
    # causal dose-response: controls matched on rank and removed variance
    "DOSE_LEVELS",
    "spectrum_weighted_controls",
    "strength_for",
    "DosePlan",
    "dose_plan",
    "DoseResponse",
    "paired_excess",
    "curve_at",
    # constrained gradient space
    "forced_direction_cosines",
    "ComplementSpace",
    "complement_space",
    "restrict_to_complement",
    "reachable_baseline",
    "normalised_enrichment",
    # frequency geometry
    "one_per_window",
    "one_per_group",
    "equal_size_picks",
    "document_jackknife_correlation",
    "first_k_indices",
    "equal_size_spread",
    "equal_size_centroids",
    "correlation_with_ci",
    # isotropy
    "covariance_of",
    "isoscore",
    "isoscore_from_spectrum",
    "isoscore_star",
    "isoscore_star_after_removal",
    "mean_cosine",
    "effective_rank",
    "participation_ratio",
    "top_variance_share",
    # proxies
    "PCAProxy",
    "SemiNMFProxy",
    "ICAProxy",
    "TopKSAEProxy",
    "PROXY_NAMES",
    "make_proxy",
    # curvature
    "nearest_neighbours",
    "local_tangent",
    "SecondFundamentalFormFit",
    "fit_second_fundamental_form",
    "empirical_visibility",
    "visibility_in_frame",
    # curvature with standard errors (issue 20)
    "n_quadratic_parameters",
    "neighbourhood_size",
    "LocalDimension",
    "local_dimension",
    "LocalCurvature",
    "local_curvature",
    "local_curvature_at",
    "per_token_curvature",
    "pooled_visibility",
    "PooledRatio",
    "measured_attenuation",
    # Zipf exponent and pinning (issue 20)
    "ZIPF_METHODS",
    "ZipfFit",
    "fit_zipf",
    "zipf_mle",
    "plot_zipf_fit",
    "PinningFit",
    "pinning_exponent",
    "pinning_with_norm_null",
    "token_ranks",
    # peer baselines (issue 20)
    "RANKME_CONVENTIONS",
    "rankme",
    "AlphaReQ",
    "alpha_req",
    "ID_METHODS",
    "OptionalDependencyError",
    "intrinsic_dimension",
]

"""tangentlab.validate: the validation battery, and the end-to-end battery on planted models.

The protocol's statistics (:mod:`tangentlab.measure`) fed with streams whose truth is known, to
measure power, null calibration, interval coverage and the frequency-spread null.
``tangentlab validate [--quick]`` runs it and writes a run directory.
``tangentlab validate --end-to-end [--quick]`` drives planted-truth trajectories (the ``planted``
model family) through ``measure`` and the report's rules, and writes the wrong-verdict rates;
its scenarios run the real dose-matched causal test, which calibrates the causal rows.
"""

from __future__ import annotations

from tangentlab._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "streams": ("GradientModel", "make_gradient_model", "TokenWindows", "token_windows",
                "true_enrichment"),
    "studies": ("CoverageStudy", "coverage_study", "CalibrationStudy", "calibration_study",
                "FrequencyNullStudy", "frequency_null_study"),
    "planted": ("PlantedConfig", "PlantedForCausalLM", "PlantedMaskedConfig", "PlantedForMaskedLM"),
    "planted_trajectories": ("PlantedSpec", "write_trajectory", "shared_text"),
    "planted_scenarios": ("Scenario", "SCENARIOS", "EFFECT"),
    "end_to_end": ("EndToEndConfig", "write_end_to_end"),
    "end_to_end_config": ("EndToEndMeasure", "SETTINGS"),
    "stage": ("write_validation",),
})

"""tangentlab.validate: the validation battery.

The protocol's statistics (:mod:`tangentlab.measure`) fed with streams whose truth is known, to
measure power, null calibration, interval coverage, the frequency-spread null and the causal
null. ``tangentlab validate [--quick]`` runs it and writes a run directory.
"""

from __future__ import annotations

from tangentlab._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "streams": ("GradientModel", "make_gradient_model", "TokenWindows", "token_windows",
                "true_enrichment"),
    "studies": ("CoverageStudy", "coverage_study", "CalibrationStudy", "calibration_study",
                "FrequencyNullStudy", "frequency_null_study", "CausalNullStudy",
                "causal_null_study"),
})

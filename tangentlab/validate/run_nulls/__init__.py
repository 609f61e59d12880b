"""Nulls on a run's own activations (issue 35, item 6): the report's rules where the truth is
"no effect" by construction, without a planted model.

:mod:`~tangentlab.validate.run_nulls.frequency_table`: the frequency-distance row under
permuted frequency tables (``tangentlab validate frequency-null RUN``).
"""

from __future__ import annotations

from tangentlab._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "frequency_table": ("FrequencyNull", "frequency_table_null", "write_frequency_table_null",
                        "permuted_counts"),
})

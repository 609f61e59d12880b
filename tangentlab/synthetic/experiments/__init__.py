"""The six synthetic experiments and :func:`run_experiment`.

``names()`` lists them (``visibility``, ``gradient-ratio``, ``amplification``,
``proxy-recovery``, ``river-valley``); ``get(name)`` returns the experiment object (frozen
``config_cls`` whose ``quick()`` is the ``--quick`` variant, ``default_config()``,
``run(config) -> ExperimentResult``).
"""

from __future__ import annotations

from tangentlab.synthetic.experiments._base import (
    AgreementCheck,
    Experiment,
    ExperimentResult,
    figure_png,
    get,
    names,
    resolve_config,
    run_experiment,
)

__all__ = ["AgreementCheck", "Experiment", "ExperimentResult", "figure_png", "get", "names",
           "resolve_config", "run_experiment"]

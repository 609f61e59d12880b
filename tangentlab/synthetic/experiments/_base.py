"""The experiment contract, the registry and :func:`run_experiment` (writes a run directory).

An experiment is an object with a frozen ``config_cls`` (whose ``quick()`` classmethod is the
``--quick`` variant), ``default_config()``, ``validate(config)`` (raises :class:`~tangentlab.errors.ConfigError`) and
``run(config) -> ExperimentResult``. ``run`` returns tidy rows (one per measured number, with the
theory's ``prediction`` where there is one), :class:`AgreementCheck` objects (theory-vs-measurement
agreement, each with its tolerance from the config) and PNG figures (bytes by file name).
"""

from __future__ import annotations

import abc
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tangentlab.registry import Registry

__all__ = [
    "AgreementCheck",
    "ExperimentResult",
    "Experiment",
    "names",
    "get",
    "run_experiment",
    "figure_png",
]


@dataclass(frozen=True)
class AgreementCheck:
    """One theory-vs-measurement agreement check (a row of ``checks.json``; compare
    :class:`tangentlab.theory.DerivationCheck`, a check of a derivation itself)."""

    name: str
    description: str
    measured: float | None
    predicted: float | None
    tolerance: float | None
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The check as ``checks.json`` stores it (NaN as null, infinities as text)."""
        from tangentlab.contract import jsonable

        return jsonable(self)


@dataclass
class ExperimentResult:
    """What ``run`` returns: tidy rows, checks, and PNG figures by file name."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    checks: list[AgreementCheck] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)


class Experiment(abc.ABC):
    """Abstract base of the synthetic experiments.

    A concrete experiment sets ``name``, ``description`` and ``config_cls`` (a frozen
    :class:`tangentlab.config.Config` whose ``quick()`` classmethod gives the ``--quick`` settings),
    and implements :meth:`run`.
    """

    name: str = ""
    description: str = ""
    config_cls: type = object

    def default_config(self):
        """The full-setting config (the config class's defaults)."""
        return self.config_cls()

    def validate(self, config) -> None:
        """Raise ConfigError for a config that cannot run because of what it would build (e.g. a
        manifold of dimension >= D); called before any output is made. Field bounds and relations
        between fields are declared on the config class and checked on creation
        (:func:`tangentlab.config.check_config`). The default has nothing to build-check."""
        return None

    @abc.abstractmethod
    def run(self, config) -> ExperimentResult:
        """Run the experiment: tidy rows, agreement checks and figures (no files written)."""


#: name -> "module:Class", in the canonical order of :func:`names` (one instance each, built on
#: first use).
_REGISTRY = Registry("synthetic experiment", {
    "visibility": "tangentlab.synthetic.experiments.visibility:VisibilityExperiment",
    "gradient-ratio": "tangentlab.synthetic.experiments.gradient_ratio:GradientRatioExperiment",
    "amplification": "tangentlab.synthetic.experiments.amplification:AmplificationExperiment",
    "proxy-recovery": "tangentlab.synthetic.experiments.proxy_recovery:ProxyRecoveryExperiment",
    "river-valley": "tangentlab.synthetic.experiments.river_valley:RiverValleyExperiment",
    "estimator-calibration": "tangentlab.synthetic.experiments.calibration:CalibrationExperiment",
}, make=lambda cls: cls())


def names() -> list[str]:
    """The experiment names, in their canonical order."""
    return list(_REGISTRY.names())


def get(name: str) -> Experiment:
    """The experiment registered as ``name`` (UnknownNameError otherwise)."""
    return _REGISTRY.get(name)


def figure_png(fig, dpi: int = 80) -> bytes:
    """Render a matplotlib figure to PNG bytes (deterministic metadata) and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def resolve_config(exp: Experiment, *, quick: bool = False, config_path: str | Path | None = None,
                   overrides: Mapping[str, Any] | None = None, seed: int | None = None):
    """Quick or default config, then the TOML file, then overrides, then ``seed``."""
    from tangentlab.config import load_config

    base = exp.config_cls.quick() if quick else exp.default_config()
    ov = dict(overrides or {})
    if seed is not None:
        ov["seed"] = seed
    cfg = load_config(exp.config_cls, config_path, ov, base=base, section=exp.name)
    exp.validate(cfg)
    return cfg


def run_experiment(name: str, out_dir: str | Path, *, quick: bool = False,
                   config_path: str | Path | None = None,
                   overrides: Mapping[str, Any] | None = None, seed: int | None = None) -> Path:
    """Resolve the config, run the experiment and write its run directory atomically.

    Writes ``results.csv``, ``checks.json``, ``manifest.json`` and the PNG figures to ``out_dir``
    through the run-directory contract (:func:`tangentlab.contract.write_run`: built under a
    temporary name, nothing left behind on error; a run of another kind is refused). Returns
    ``out_dir``.
    """
    from tangentlab.contract import RunOutput, synthetic_stage, write_run

    exp = get(name)
    cfg = resolve_config(exp, quick=quick, config_path=config_path, overrides=overrides, seed=seed)

    def produce() -> RunOutput:
        result = exp.run(cfg)
        return RunOutput(rows=[{"experiment": name, **r} for r in result.rows],
                         checks=list(result.checks), figures=dict(result.figures))

    return write_run(out_dir, kind=synthetic_stage(name), config=cfg, produce=produce,
                     seeds={"seed": int(getattr(cfg, "seed", 0))}, quick=quick)

"""The end-to-end battery's settings: :class:`EndToEndConfig` and its measure settings.

Both are :class:`~tangentlab.config.Config` classes with declared bounds (a bad value is a
ConfigError naming the key, the bound and the value). The named settings (:data:`SETTINGS`):
``quick`` (in the test suite, inside the quick reproduce), ``standard`` (a default reproduce's
validate stage), ``full`` (the defaults: the one that certifies). :meth:`EndToEndConfig.setting`
is what a run's manifest records and the report compares against a run's own measure settings
(:mod:`tangentlab.report.gating`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tangentlab.config import Config, check_config, config_from_mapping, config_to_dict, option
from tangentlab.errors import ConfigError

__all__ = ["EndToEndConfig", "EndToEndMeasure", "SETTINGS", "Shard", "Extension", "jobs",
           "merged_jobs"]

_MEASURE_KEYS = ("sites", "n_batches", "batch_size", "seq_len", "n_boot", "rank", "sample_rows",
                 "control_pool", "n_controls", "causal_checkpoints", "causal_controls",
                 "causal_batches", "interval", "early_fraction", "threads", "bridge")


@dataclass(frozen=True)
class EndToEndMeasure(Config, Mapping):
    """The ``measure`` settings every simulation of an end-to-end run shares.

    A field left at ``None`` is not overridden: the measurement's own default applies (for
    ``rank``: the scenario's planted rank). The object reads as a mapping of the fields that
    are set (``{**cfg.measure}`` gives the measure overrides), so it goes straight to
    :func:`tangentlab.empirical.measurement.protocol.measure_trajectory`. The bounds are those of
    :class:`tangentlab.empirical.measurement.measure_config.MeasureConfig`.

    Attributes:
        sites: the sites measured.
        n_batches, batch_size, seq_len: the eval windows per checkpoint (``seq_len`` 0 or None:
            the planted model's 64).
        n_boot: bootstrap replicates of every interval.
        rank: the proxy rank (None: each scenario's planted rank).
        sample_rows, control_pool, n_controls: rows and controls of the energy test.
        causal_checkpoints, causal_controls, causal_batches: the causal check.
        interval: the interval method.
        early_fraction: where the early/late cut falls, as a fraction of the last step (the
            measurement's 0.3 when None).
        threads: torch threads per measurement.
        bridge: write ``bridge.csv`` (theory against measurement) in every simulation. Off by
            default: the bridge decides no prediction row, so the battery has nothing to check in
            it, and it would re-forward the fit half at three phases of every trajectory.
    """

    sites: tuple[str, ...] | None = option(("blocks.-1.resid_post",), min_len=1, unique=True)
    n_batches: int | None = option(64, ge=4, integer=True)
    batch_size: int | None = option(4, ge=1, integer=True)
    seq_len: int | None = option(None, ge=0, integer=True)
    n_boot: int | None = option(1000, ge=2, integer=True)
    rank: int | None = option(None, ge=1, integer=True)
    sample_rows: int | None = option(4096, ge=16, integer=True)
    control_pool: int | None = option(None, ge=1, integer=True)
    n_controls: int | None = option(None, ge=1, integer=True)
    causal_checkpoints: int | None = option(2, ge=1, integer=True)
    causal_controls: int | None = option(None, ge=1, integer=True)
    causal_batches: int | None = option(8, ge=1, integer=True)
    interval: str | None = option(None, choices=(None, "studentized", "bootstrap", "bca",
                                                 "jackknife"))
    early_fraction: float | None = option(None, gt=0.0, lt=1.0)
    threads: int | None = option(1, ge=0, integer=True)
    bridge: bool | None = option(False)

    def _set(self) -> list[str]:
        return [k for k in _MEASURE_KEYS if getattr(self, k) is not None]

    def __getitem__(self, key: str) -> Any:
        """The value of a set field (KeyError for a field left at None or an unknown key)."""
        if key not in _MEASURE_KEYS or getattr(self, key) is None:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        """The names of the fields that are set."""
        return iter(self._set())

    def __len__(self) -> int:
        """How many fields are set."""
        return len(self._set())


def _scenario_names() -> tuple[str, ...]:
    from tangentlab.validate.planted_scenarios import SCENARIOS

    return tuple(SCENARIOS)


@dataclass(frozen=True)
class EndToEndConfig(Config):
    """Settings of the end-to-end battery (the defaults are the full setting, :meth:`full`).

    ``quick()`` runs in the test suite (inside the quick reproduce), ``standard()`` in a default
    reproduce, ``full()`` (the defaults) certifies. Bounds are declared on the fields; a bad
    value is a ConfigError naming the key, the bound and the value.

    Attributes:
        seed: master seed.
        scenarios: names from :data:`tangentlab.validate.planted_scenarios.SCENARIOS`.
        sims: simulations per scenario.
        units: independent planted trajectories per simulation (the units a row combines).
        steps: checkpoint steps of every trajectory (increasing, from 0).
        measure: the measure settings shared by every simulation (:class:`EndToEndMeasure`).
        vocab_size, corpus, max_train_tokens: the shared text (BPE size, built-in corpus,
            training-split tokens counted).
        keep_measures: keep every measure folder under ``simulations/`` (for re-deciding).
        mutant: a deliberate break of the verdict path (:data:`tangentlab.validate.mutants.
            MUTANTS`; "" = none): a run with one must fail some check.
        planted_d, planted_m: the planted width and rank of every scenario that does not set
            its own (the r/d nulls do); 0 = the planted family's defaults (a planted twin,
            :func:`tangentlab.validate.twin.twin_setting`, sets them to the run's r/d).
        archs: the planted head of each unit, ``decoder`` (causal LM) or ``encoder`` (masked
            LM): one name for every unit, or one per unit (a twin of a run that measured an
            encoder and a decoder plants both, unit by unit, as the row combines them).
        effect_k_peak, effect_k_end, effect_x_peak: the ``effect`` scenario's enrichment curve
            (its peak, its last value, where the peak falls) where set (0: the stated
            :data:`~tangentlab.validate.planted_scenarios.EFFECT`); a twin sets them to the
            magnitudes the run measured (:func:`tangentlab.validate.twin.run_effect`).
    """

    seed: int = option(0, ge=0, integer=True)
    scenarios: tuple[str, ...] = option(_scenario_names(), min_len=1, unique=True,
                                        choices=_scenario_names())
    sims: int = option(50, ge=1, integer=True)
    units: int = option(2, ge=1, integer=True)
    steps: tuple[int, ...] = option((0, 10, 20, 30, 45, 60, 80, 100), ge=0, integer=True,
                                    min_len=2, unique=True)
    measure: EndToEndMeasure = dataclasses.field(default_factory=EndToEndMeasure)
    vocab_size: int = option(512, ge=64, integer=True)
    corpus: str = option("wikipedia", choices=("wikipedia", "bible", "shakespeare"))
    max_train_tokens: int = option(400_000, ge=1000, integer=True)
    keep_measures: bool = False
    mutant: str = option("", choices=("", "combine-first-unit", "late-fixed-only",
                                      "narrow-intervals", "causal-variance-only"))
    planted_d: int = option(0, ge=0, integer=True)
    planted_m: int = option(0, ge=0, integer=True)
    archs: tuple[str, ...] = option(("decoder",), min_len=1, choices=("decoder", "encoder"))
    effect_k_peak: float = option(0.0, ge=0.0)
    effect_k_end: float = option(0.0, ge=0.0)
    effect_x_peak: float = option(0.0, ge=0.0, lt=1.0)

    def __post_init__(self) -> None:
        if isinstance(self.measure, Mapping) and not isinstance(self.measure, EndToEndMeasure):
            object.__setattr__(self, "measure", config_from_mapping(
                EndToEndMeasure, {**config_to_dict(EndToEndMeasure()), **self.measure},
                where="measure"))
        super().__post_init__()

    def relations(self) -> list[tuple[bool, str]]:
        """The steps start at 0 and increase."""
        steps = list(self.steps)
        return [(steps[0] == 0 and steps == sorted(steps),
                 f"config key 'steps' must start at 0 and increase; got {steps}"),
                (len(self.archs) in (1, self.units),
                 f"config key 'archs' names one head for every unit or one per unit ({self.units}"
                 f"); got {list(self.archs)}"),
                (not (self.effect_k_peak or self.effect_k_end)
                 or 1.0 < self.effect_k_end < self.effect_k_peak,
                 f"config keys 'effect_k_peak' and 'effect_k_end' plant an enrichment that "
                 f"weakens late (1 < k_end < k_peak); got {self.effect_k_peak}, "
                 f"{self.effect_k_end}")]

    def arch(self, unit: int) -> str:
        """The planted head of unit ``unit`` (0-based): ``decoder`` or ``encoder``."""
        return self.archs[0] if len(self.archs) == 1 else self.archs[unit]

    @classmethod
    def full(cls, seed: int = 0) -> EndToEndConfig:
        """Every scenario, 50 simulations of 2 units each, 64 eval batches of 4 × 64 tokens."""
        return cls(seed=seed)

    @classmethod
    def standard(cls, seed: int = 0) -> EndToEndConfig:
        """Every scenario, 4 simulations of two units, 6 checkpoints, the quick measure settings.

        Wide intervals (4 simulations per scenario): a screen of which (row, null) pairs fail,
        not a certificate. Two units per simulation, as a row combines them, so that a broken
        ``combine()`` is visible (issue 33: each mutant of :mod:`tangentlab.validate.mutants`
        fails a check at this setting).
        """
        quick = cls.quick(seed)
        return dataclasses.replace(quick, scenarios=_scenario_names(), sims=4, units=2,
                                   steps=(0, 10, 20, 30, 60, 100), keep_measures=False)

    @classmethod
    def quick(cls, seed: int = 0) -> EndToEndConfig:
        """Three scenarios, one simulation of one unit, 3 checkpoints, 16 eval batches.

        Its rates rest on one simulation each: their Wilson intervals are wide, and its checks
        judge the point rates only (nothing is certified).
        """
        from tangentlab.validate.planted_scenarios import QUICK_SCENARIOS

        return cls(seed=seed, scenarios=QUICK_SCENARIOS, sims=1, units=1, steps=(0, 30, 100),
                   max_train_tokens=100_000, keep_measures=True, measure=EndToEndMeasure(
                       n_batches=16, batch_size=4, n_boot=200, sample_rows=1024,
                       control_pool=100, causal_checkpoints=2, causal_batches=4, threads=1))

    @classmethod
    def preset(cls, name: str, seed: int = 0) -> EndToEndConfig:
        """The named setting: ``quick``, ``standard`` or ``full`` (ConfigError for another)."""
        if name not in SETTINGS:
            raise ConfigError(f"end-to-end setting must be one of {', '.join(SETTINGS)}; "
                              f"got {name!r}")
        return getattr(cls, name)(seed)

    def setting_name(self) -> str:
        """``quick``, ``standard`` or ``full`` when this is that preset (any seed), else ``custom``."""
        for name in SETTINGS:
            if dataclasses.replace(self, seed=0) == getattr(type(self), name)(0):
                return name
        return "custom"

    def check(self) -> None:
        """ConfigError for settings that cannot run (the bounds are checked on creation)."""
        check_config(self)

    def planted_spec(self, name: str, **extra: Any):
        """Scenario ``name``'s :class:`~tangentlab.validate.planted_trajectories.PlantedSpec`.

        This config's planted width and rank (where set), then the scenario's own spec (for
        ``effect``, with this config's curve overrides), then ``extra``; the windows are this
        config's :meth:`seq_len`.
        """
        from tangentlab.validate.planted_scenarios import scenario

        base = {k: v for k, v in (("d", self.planted_d), ("m", self.planted_m)) if v}
        own = {**scenario(name).spec, **(self.effect_curve() if name == "effect" else {})}
        return scenario(name).planted(**{**base, **own, "seq_len": self.seq_len(), **extra})

    def effect_curve(self) -> dict[str, float]:
        """The ``effect`` scenario's curve overrides this config sets (empty: the stated one)."""
        return {k: v for k, v in (("k_peak", self.effect_k_peak), ("k_end", self.effect_k_end),
                                   ("x_peak", self.effect_x_peak)) if v}

    def seq_len(self) -> int:
        """The eval window length (the measure's ``seq_len``, else the planted model's 64)."""
        from tangentlab.validate.planted_trajectories import PlantedSpec

        return int(self.measure.seq_len or PlantedSpec().seq_len)

    def budget_tokens(self) -> int:
        """Tokens the eval windows read per checkpoint (n_batches × batch_size × seq_len)."""
        m = self.measure
        return int(m.get("n_batches", 64)) * int(m.get("batch_size", 4)) * self.seq_len()

    def setting(self) -> dict[str, Any]:
        """What the report compares against a run's measure settings (the manifest's ``setting``).

        The eval batches, tokens per checkpoint and bootstrap replicates every simulation used,
        the range of r/d its scenarios measured at, the simulations and units, the planted heads
        (``archs``) and how many units each planted (``units_per_arch``), the scenarios run and
        the scenarios known.
        """
        from tangentlab.validate.planted_scenarios import scenario

        rds = []
        for name in self.scenarios:
            sc = scenario(name)
            spec = self.planted_spec(name)
            rank = sc.measure.get("rank", self.measure.rank or spec.m)
            rds.append(rank / spec.d)
        return {"name": self.setting_name(), "sims": self.sims, "units": self.units,
                "n_batches": int(self.measure.get("n_batches", 64)),
                "batch_size": int(self.measure.get("batch_size", 4)), "seq_len": self.seq_len(),
                "tokens_per_checkpoint": self.budget_tokens(),
                "n_boot": int(self.measure.get("n_boot", 1000)),
                "rank_over_dim": [min(rds), max(rds)], "steps": list(self.steps),
                "early_fraction": float(self.measure.early_fraction or 0.3),
                "archs": sorted(set(self.archs)), "effect_curve": self.effect_curve(),
                "units_per_arch": {a: sum(self.arch(u) == a for u in range(self.units))
                                   for a in sorted(set(self.archs))},
                "scenarios": list(self.scenarios),
                "scenarios_known": list(_scenario_names()), "bound_checked": self.sims >= 45}


#: The named end-to-end settings, weakest first.
SETTINGS = ("quick", "standard", "full")


# -- which simulations a run runs: its jobs, and the slice --shard K/N takes ------------------
#
# The jobs of a config are its (scenario, simulation index) pairs, in the config's scenario order
# and then by index: the order every summary file lists them in, whatever order they finished in.
# Shard K of N takes the jobs whose position i in that list has i % N == K - 1: the N shards are
# disjoint, cover every job, and each mixes the scenarios (the slow rd-* ones are spread).

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``k`` of ``n`` (1 <= k <= n), written ``"K/N"``."""

    k: int
    n: int

    def __post_init__(self) -> None:
        if not (isinstance(self.k, int) and isinstance(self.n, int) and 1 <= self.k <= self.n):
            raise ConfigError(f"--shard K/N needs whole numbers with 1 <= K <= N; got "
                              f"{self.k}/{self.n}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"`` → Shard; ConfigError naming the text for anything else."""
        m = _SHARD.fullmatch(str(text))
        if m is None:
            raise ConfigError(f"--shard takes K/N (shard K of N, 1 <= K <= N, e.g. 2/8); got "
                              f"{text!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    def take(self, items: list) -> list:
        """The items at positions i with ``i % n == k - 1``, in their order."""
        return [x for i, x in enumerate(items) if i % self.n == self.k - 1]


def jobs(cfg) -> list[tuple[str, int]]:
    """Every (scenario, simulation index) of ``cfg``, in scenario order, then by index."""
    return [(name, sim) for name in cfg.scenarios for sim in range(cfg.sims)]


# -- more simulations for some scenarios (issue 35, item 3: 50 per null first; a null in which a
# row got any wrong status goes on to 200). An extension runs indices FIRST <= i < LAST of the
# named scenarios under the base run's own config: a simulation's seed depends on its scenario
# and index only, so an extended run equals one run with LAST simulations of those scenarios.

_EXTENSION = re.compile(r"\s*(\d+)\s*:\s*(\d+)\s*@\s*([^@:]+?)\s*")  # names hold "/": rd-1/64


@dataclass(frozen=True)
class Extension:
    """Simulations ``first`` <= i < ``last`` of each of ``scenarios``, written ``"FIRST:LAST@A,B"``."""

    first: int
    last: int
    scenarios: tuple[str, ...]

    def __post_init__(self) -> None:
        if not (isinstance(self.first, int) and isinstance(self.last, int)
                and 1 <= self.first < self.last):
            raise ConfigError(f"an extension runs simulations FIRST <= i < LAST with "
                              f"1 <= FIRST < LAST; got {self.first}:{self.last}")
        if not self.scenarios or len(set(self.scenarios)) != len(self.scenarios):
            raise ConfigError(f"an extension names each scenario once and at least one; got "
                              f"{list(self.scenarios)}")
        # one spelling per extension (sorted names), so a resume matches however it was written
        object.__setattr__(self, "scenarios", tuple(sorted(self.scenarios)))

    @classmethod
    def parse(cls, text: str) -> Extension:
        """``"50:200@no-effect,bursty"`` → Extension; ConfigError naming the text otherwise."""
        m = _EXTENSION.fullmatch(str(text))
        if m is None:
            raise ConfigError(f"an extension is written FIRST:LAST@SCENARIO,... (e.g. "
                              f"50:200@no-effect,bursty); got {text!r}")
        names = tuple(n.strip() for n in m.group(3).split(",") if n.strip())
        return cls(int(m.group(1)), int(m.group(2)), names)

    def __str__(self) -> str:
        return f"{self.first}:{self.last}@{','.join(self.scenarios)}"

    def jobs(self, cfg) -> list[tuple[str, int]]:
        """The extension's (scenario, index) pairs, in ``cfg``'s scenario order, then by index.

        ConfigError for a scenario ``cfg`` does not run, or a FIRST below ``cfg.sims`` (those
        simulations belong to the base run).
        """
        unknown = [n for n in self.scenarios if n not in cfg.scenarios]
        if unknown:
            raise ConfigError(f"the extension names {unknown}, which the run does not simulate "
                              f"(its scenarios: {', '.join(cfg.scenarios)})")
        if self.first < cfg.sims:
            raise ConfigError(f"the extension starts at simulation {self.first}, below the run's "
                              f"{cfg.sims} (already simulated); start it at {cfg.sims} or later")
        return [(n, i) for n in cfg.scenarios if n in self.scenarios
                for i in range(self.first, self.last)]


def merged_jobs(cfg, extensions) -> list[tuple[str, int]]:
    """The base run's jobs and every extension's, each once, in scenario order, then by index.

    ConfigError where a scenario's simulations would not run from 0 without a gap (an
    extension that starts past the base run or a previous extension's end).
    """
    by: dict[str, set[int]] = {n: set(range(cfg.sims)) for n in cfg.scenarios}
    for ext in extensions:
        for n, i in ext.jobs(cfg):
            by[n].add(i)
    for n, idx in by.items():
        if idx and max(idx) != len(idx) - 1:
            gap = min(set(range(max(idx))) - idx)
            raise ConfigError(f"scenario {n}'s simulations have a gap at #{gap}: merge the "
                              "extension that runs it too")
    return [(n, i) for n in cfg.scenarios for i in sorted(by[n])]

"""``tangentlab reproduce``: theory, synthetic, empirical and the report, in one resumable job.

The stage graph (see :func:`build_stages`), listed with the critical path first:

1. ``train/<arch>``: train the encoder and the decoder (preset ``small``; ``tiny`` with --quick).
2. ``measure/<arch>``: the empirical protocol on each checkpoint trajectory (depends on 1).
3. ``validate``: the validation battery (the protocol's statistics on known-truth streams).
4. ``theory``: ``verify(seed)`` of every derivation, saved as ``theory/verify.json``.
5. ``synthetic/<name>``: every registered synthetic experiment, one run directory each.
6. ``report``: ``report.html``, ``report.md`` and ``figures/`` at the top of the run directory,
   from the stored results (always rerun, after every other stage, whatever their status).

Independent stages run at once in up to ``jobs`` worker processes (default: the usable cores);
each writes ``logs/<stage>.log``. The run directory's ``manifest.json`` records each stage (see
:mod:`tangentlab.pipeline.stages`); rerunning on the same directory reuses what is done and still
valid. The results do not depend on ``jobs``: every stage runs in a fresh process with its own
seed and thread settings.

Config: :class:`ReproduceConfig` (embedded defaults), :data:`QUICK` (the ``--quick`` variant),
either of them overridden by a TOML file and ``--set key=value``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.config import (
    Config,
    config_hash,
    config_to_dict,
    load_config,
    option,
    parse_overrides,
)
from tangentlab.errors import ConfigError, DataError, StageError
from tangentlab.pipeline.stages import (
    REPRODUCE_KIND,
    RunSummary,
    Stage,
    StageContext,
    run_stages,
    usable_cores,
)
from tangentlab.progress import log
from tangentlab.runs import VERIFY_NAME

__all__ = [
    "ReproduceConfig",
    "DEFAULT",
    "QUICK",
    "QUICK_MEASURE_OVERRIDES",
    "ARCHS",
    "resolve_config",
    "config_toml",
    "build_stages",
    "new_run_dir",
    "check_external_measures",
    "reproduce",
]

#: The two architectures trained and measured.
ARCHS: tuple[str, ...] = ("encoder", "decoder")


def _split_scoped(item: str, key: str, *, required_scope: bool = False) -> tuple[str | None, str, str]:
    """Split ``"scope:k=v"`` or ``"k=v"`` into (scope, k, v)."""
    scope = None
    body = item
    head = item.split("=", 1)[0]
    if ":" in head:
        scope, body = item.split(":", 1)
        scope = scope.strip()
    elif required_scope:
        raise ConfigError(f"{key} entry {item!r} must look like 'experiment:key=value'")
    if "=" not in body:
        raise ConfigError(f"{key} entry {item!r} must look like '[scope:]key=value'")
    k, v = body.split("=", 1)
    if not k.strip():
        raise ConfigError(f"{key} entry {item!r} has an empty key")
    return scope, k.strip(), v.strip()


def _scoped_problem(item: str, key: str, required_scope: bool) -> str | None:
    """None when ``item`` is a well-formed override, else the ConfigError message."""
    try:
        _split_scoped(item, key, required_scope=required_scope)
    except ConfigError as exc:
        return str(exc)
    return None


def _scoped(items: tuple[str, ...], scope: str, key: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        s, k, v = _split_scoped(item, key)
        if s is None or s == scope:
            out[k] = v
    return out


@dataclass(frozen=True)
class ReproduceConfig(Config):
    """Everything ``tangentlab reproduce`` runs, with its defaults.

    Attributes:
        seed: the one seed handed to every stage (theory verify, synthetic, training, measure).
        quick: run each synthetic experiment at its ``--quick`` settings.
        device: ``auto``, ``cpu`` or ``cuda`` for training and measurement.
        derivations: theory derivations to verify; empty means all of ``theory.names()``.
        synthetic: synthetic experiments to run; empty means every registered experiment
            (``tangentlab.synthetic.names()``), in registry order.
        synthetic_overrides: ``"experiment:key=value"`` overrides for single experiments.
        archs: architectures to train and measure (``encoder``, ``decoder``).
        preset: training preset (``tiny``, ``small``, ``base``).
        corpus: training corpus name (the empirical default is the Wikipedia sample).
        train_overrides: ``"key=value"`` or ``"arch:key=value"`` overrides for training.
        measure_overrides: ``"key=value"`` or ``"arch:key=value"`` overrides for measurement.
        validate: run the validation battery (``tangentlab validate``; quick settings with
            ``quick``) as a stage and show it in the report's calibration table.
        external_measures: ``"NAME=DIR"`` measurement run directories (``tangentlab empirical
            measure`` outputs, e.g. a public checkpoint suite) that the report shows beside ours.
    """

    seed: int = 0
    quick: bool = False
    device: str = "auto"
    derivations: tuple[str, ...] = ()
    synthetic: tuple[str, ...] = option((), unique=True)
    synthetic_overrides: tuple[str, ...] = ()
    archs: tuple[str, ...] = option(ARCHS, choices=ARCHS, unique=True, min_len=1)
    preset: str = option("small", choices=("tiny", "small", "base"))
    corpus: str = "wikipedia"
    train_overrides: tuple[str, ...] = ()
    measure_overrides: tuple[str, ...] = ()
    external_measures: tuple[str, ...] = option((), unique=True)
    validate: bool = True

    def relations(self) -> list[tuple[bool, str]]:
        """The device spelling and the ``[scope:]key=value`` form of every override."""
        out = [(self.device in ("auto", "cpu", "cuda", "mps") or self.device.startswith("cuda:"),
                f"config key 'device' must be auto, cpu, cuda[:N] or mps; got {self.device!r}")]
        for key, required in (("synthetic_overrides", True), ("train_overrides", False),
                              ("measure_overrides", False)):
            for item in getattr(self, key):
                out.append((_scoped_problem(item, key, required) is None,
                            _scoped_problem(item, key, required) or ""))
        for item in self.external_measures:
            name, _, folder = item.partition("=")
            out.append((bool(name.strip()) and bool(folder.strip()) and "/" not in name,
                        f"external_measures entry {item!r} must look like NAME=DIR "
                        "(e.g. pythia-160m=runs/pythia)"))
        return out


#: The embedded default: the full reproduction (``small`` models, full synthetic settings).
DEFAULT = ReproduceConfig()


def _quick_measure_overrides() -> tuple[str, ...]:
    """The empirical pillar's quick measure preset as ``key=value`` overrides.

    The list lives once, in the empirical pillar; spelled out here so that ``--print-config``
    shows it and the stage's config hash covers it.
    """
    from tangentlab.config import config_diff
    from tangentlab.empirical.protocol import QUICK_MEASURE, MeasureConfig

    quick = QUICK_MEASURE if isinstance(QUICK_MEASURE, MeasureConfig) else \
        dataclasses.replace(MeasureConfig(), **QUICK_MEASURE)
    return tuple(f"{k}={_override_text(v)}" for k, v in config_diff(MeasureConfig(), quick).items())


def _override_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


#: The measure overrides of the quick variant (derived from ``empirical.protocol.QUICK_MEASURE``).
QUICK_MEASURE_OVERRIDES: tuple[str, ...] = _quick_measure_overrides()
#: The ``--quick`` variant: ``tiny`` models, quick synthetic settings, a lighter measurement
#: (a smoke run of a few minutes).
QUICK = dataclasses.replace(DEFAULT, quick=True, preset="tiny",
                            measure_overrides=QUICK_MEASURE_OVERRIDES)


def resolve_config(
    *, quick: bool = False, path: str | Path | None = None, overrides: Any = None
) -> ReproduceConfig:
    """The embedded default (or :data:`QUICK`), then the TOML file, then ``--set`` overrides.

    ``overrides`` is a mapping or a list of ``"key=value"`` strings. A TOML file may hold the
    keys at top level or under a ``[reproduce]`` table.
    """
    if overrides is not None and not isinstance(overrides, dict):
        overrides = parse_overrides(overrides)
    return load_config(ReproduceConfig, path, overrides, base=QUICK if quick else DEFAULT,
                       section="reproduce")


def config_toml(cfg: ReproduceConfig) -> str:
    """The config as a TOML ``[reproduce]`` table (what ``--print-config`` shows)."""
    lines = ["[reproduce]"]
    for key, value in config_to_dict(cfg).items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- checks

def _check_theory(out: Path) -> None:
    from tangentlab.readers import read_json

    data = read_json(out / VERIFY_NAME, fields={"passed": bool, "derivations": list})
    if not data["derivations"]:
        raise DataError(f"{str(out / VERIFY_NAME)!r} lists no derivation")


def _check_results_dir(out: Path) -> None:
    from tangentlab.runs import read_manifest, read_results

    read_manifest(out)
    table = read_results(out)
    if len(table) == 0:
        raise DataError(f"{out}/results.csv has no rows")


def _check_train(out: Path) -> None:
    from tangentlab.readers import read_json

    ckpts = out / "checkpoints"
    steps = sorted(p for p in ckpts.glob("step_*") if p.is_dir()) if ckpts.is_dir() else []
    if not steps:
        raise DataError(f"{out} holds no checkpoints/step_* directory")
    for step in steps:
        if not (step / "config.json").is_file():
            raise DataError(f"checkpoint {step.name} has no config.json")
        read_json(step / "config.json", expect=dict)
        if not any(step.glob("*.safetensors")):
            raise DataError(f"checkpoint {step.name} has no safetensors weights")


def _check_report(out: Path) -> None:
    for path in (out, out.with_name("report.md")):
        if not path.is_file() or path.stat().st_size == 0:
            raise DataError(f"{path.name} was not written")


# --------------------------------------------------------------------------------------- stages

def _run_theory(cfg: ReproduceConfig, ctx: StageContext) -> None:
    from tangentlab import theory
    from tangentlab.runs import atomic_write_json, build_manifest, write_manifest

    names = list(cfg.derivations) or list(theory.names())
    entries = []
    for name in names:
        derivation = theory.get(name)
        start = time.perf_counter()
        rep = derivation.verify(seed=cfg.seed)
        seconds = time.perf_counter() - start
        d = dict(rep.to_dict())
        d.setdefault("name", name)
        d["passed"] = bool(rep.passed)
        d["seconds"] = round(seconds, 3)
        entries.append(d)
        n_fail = sum(1 for c in d.get("checks", []) if not c.get("passed", False))
        log(f"    theory {name}: {'passed' if rep.passed else f'{n_fail} check(s) FAILED'} ({seconds:.1f} s)")
    ctx.output.mkdir(parents=True, exist_ok=True)
    atomic_write_json(ctx.output / VERIFY_NAME,
                      {"seed": cfg.seed, "passed": all(e["passed"] for e in entries), "derivations": entries})
    write_manifest(ctx.output, build_manifest(kind="theory/verify", config={"derivations": names},
                                              seeds={"seed": cfg.seed}))


def _run_synthetic(cfg: ReproduceConfig, name: str, ctx: StageContext) -> None:
    from tangentlab.synthetic.experiments import run_experiment

    overrides = _scoped(cfg.synthetic_overrides, name, "synthetic_overrides")
    run_experiment(name, ctx.output, quick=cfg.quick, overrides=overrides or None, seed=cfg.seed)


def _run_train(cfg: ReproduceConfig, arch: str, ctx: StageContext) -> None:
    from tangentlab import empirical
    from tangentlab.runs import TRAIN_CONFIG_NAME

    overrides = _scoped(cfg.train_overrides, arch, "train_overrides")
    # an interrupted attempt that wrote its config resumes (from step 0 if it saved no checkpoint)
    resume = ctx.resume and (ctx.output / TRAIN_CONFIG_NAME).is_file()
    empirical.train_model(arch, ctx.output, preset=cfg.preset, corpus=cfg.corpus, device=cfg.device,
                          seed=cfg.seed, overrides=overrides or None, resume=resume)


def _run_measure(cfg: ReproduceConfig, arch: str, ctx: StageContext) -> None:
    from tangentlab import empirical

    overrides = _scoped(cfg.measure_overrides, arch, "measure_overrides")
    trajectory = ctx.run_dir / "train" / arch / "checkpoints"
    empirical.measure_trajectory(trajectory, ctx.output, device=cfg.device, seed=cfg.seed,
                                 overrides=overrides or None)


def _run_validate(cfg: ReproduceConfig, ctx: StageContext) -> None:
    from tangentlab.validate.battery import BatteryConfig, write_battery

    battery = BatteryConfig.quick(cfg.seed) if cfg.quick else BatteryConfig.full(cfg.seed)
    battery.validate()
    write_battery(ctx.output, battery, quick=cfg.quick)


def _check_validate(out: Path) -> None:
    from tangentlab.runs import CHECKS_NAME
    from tangentlab.validate.battery import read_checks

    _check_results_dir(out)
    if not read_checks(out):
        raise DataError(f"{out}/{CHECKS_NAME} lists no criterion")


def _run_report(ctx: StageContext) -> None:
    from tangentlab.report.render import render_report

    result = render_report(ctx.run_dir)
    if result.row_errors:
        raise StageError("the report was written, but these verdict rules raised: "
                         + "; ".join(result.row_errors))


def build_stages(cfg: ReproduceConfig) -> list[Stage]:
    """The stage graph ``tangentlab reproduce`` runs for ``cfg``.

    Listed critical path first (the runner starts ready stages in list order): the trainings,
    the measurements that depend on them, then theory, synthetic and the report. Each stage's
    ``params`` are the parts of ``cfg`` that decide its result.
    """
    from functools import partial

    from tangentlab.synthetic.experiments import get as get_experiment
    from tangentlab.synthetic.experiments import names as experiment_names

    synthetic = list(cfg.synthetic) or experiment_names()
    for name in synthetic:
        get_experiment(name)  # an unknown name is a typed error before anything runs
    stages: list[Stage] = []
    for arch in cfg.archs:
        stages.append(Stage(
            name=f"train/{arch}", func=partial(_run_train, cfg, arch), check=_check_train,
            params={"seed": cfg.seed, "preset": cfg.preset, "corpus": cfg.corpus,
                    "overrides": _scoped(cfg.train_overrides, arch, "train_overrides")},
            resumable=True,
            description=f"train the {cfg.preset} {arch} on {cfg.corpus}",
        ))
    for arch in cfg.archs:
        stages.append(Stage(
            name=f"measure/{arch}", func=partial(_run_measure, cfg, arch),
            check=_check_results_dir, depends=(f"train/{arch}",),
            params={"seed": cfg.seed,
                    "overrides": _scoped(cfg.measure_overrides, arch, "measure_overrides")},
            description=f"measure the {arch} trajectory",
        ))
    if cfg.validate:
        stages.append(Stage(
            name="validate", func=partial(_run_validate, cfg), check=_check_validate,
            params={"seed": cfg.seed, "quick": cfg.quick},
            description="validation battery: the protocol's statistics on known-truth streams"
                        + (" (quick)" if cfg.quick else ""),
        ))
    stages.append(Stage(
        name="theory", func=partial(_run_theory, cfg), check=_check_theory,
        params={"seed": cfg.seed, "derivations": list(cfg.derivations)},
        description="verify every derivation",
    ))
    for name in synthetic:
        stages.append(Stage(
            name=f"synthetic/{name}", func=partial(_run_synthetic, cfg, name),
            check=_check_results_dir,
            params={"seed": cfg.seed, "quick": cfg.quick,
                    "overrides": _scoped(cfg.synthetic_overrides, name, "synthetic_overrides")},
            description=f"synthetic experiment {name}" + (" (quick)" if cfg.quick else ""),
        ))
    from tangentlab.empirical import bridge_pretrained as BP  # optional stage (issue 20)

    if (smol := BP.configured_path()) is not None:  # SmolLM2 through the bridge, when named
        stages.append(Stage(name="pretrained/smollm2", check=BP.check_pretrained,
                            func=partial(BP.run_stage, smol, cfg.device, cfg.seed),
                            params={"seed": cfg.seed, "model": smol, "measure": BP.PRETRAINED_MEASURE},
                            description="SmolLM2-135M through the theory-against-measurement table"))
    stages.append(Stage(name="report", func=_run_report, output="report.html", check=_check_report,
                        after=tuple(s.name for s in stages), always=True,
                        description="render report.html and report.md"))
    return stages


def check_external_measures(cfg: ReproduceConfig, run_dir: str | Path) -> None:
    """Refuse an ``external_measures`` entry whose DIR holds no measurement run, up front.

    DIR is read as the report reads it: an absolute path, or a path relative to the run
    directory. It must hold ``results.csv`` (a ``tangentlab empirical measure`` output).

    Raises:
        ConfigError: naming the entry and the folder looked in.
    """
    from tangentlab.runs import RESULTS_NAME

    for item in cfg.external_measures:
        name, _, folder = item.partition("=")
        d = Path(folder.strip())
        d = d if d.is_absolute() else Path(run_dir) / d
        if not (d / RESULTS_NAME).is_file():
            where = "does not exist" if not d.exists() else f"holds no {RESULTS_NAME}"
            raise ConfigError(
                f"config key 'external_measures' entry {item!r}: {str(d)!r} {where}; pass "
                "NAME=DIR with DIR a directory written by `tangentlab empirical measure` "
                "(absolute, or relative to the run directory)"
            )


def new_run_dir(root: str | Path = "runs") -> Path:
    """A fresh ``root/<UTC timestamp>`` directory name (not created), unique within ``root``."""
    root = Path(root)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    candidate = root / stamp
    i = 1
    while candidate.exists():
        candidate = root / f"{stamp}-{i}"
        i += 1
    return candidate


def _link_latest(run_dir: Path) -> None:
    """Point ``<parent>/latest`` at ``run_dir`` (a relative symlink, replaced atomically)."""
    link = run_dir.parent / "latest"
    if link.exists() and not link.is_symlink():
        log(f"not updating {link}: it exists and is not a symlink")
        return
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(run_dir.name, tmp)
    os.replace(tmp, link)


def reproduce(
    cfg: ReproduceConfig | None = None,
    out: str | Path | None = None,
    *,
    runs_root: str | Path = "runs",
    jobs: int | None = None,
    stages: list[Stage] | None = None,
) -> RunSummary:
    """Run the whole reproduction into ``out`` (default: a new ``runs_root/<timestamp>``).

    When ``out`` is not given, ``runs_root/latest`` is pointed at the new run directory.
    ``jobs`` is the number of stages run at once in worker processes (default: the usable
    cores; the results do not depend on it). ``stages`` replaces the real stage list (for tests
    only; its functions must be picklable); by default it is :func:`build_stages` of ``cfg``.

    Returns the :class:`~tangentlab.pipeline.stages.RunSummary`; a failed stage does not raise.
    """
    from tangentlab import crash
    from tangentlab.runs import check_output_dir, run_lock

    cfg = cfg if cfg is not None else DEFAULT
    check_output_dir(out if out is not None else new_run_dir(runs_root), kind=REPRODUCE_KIND,
                     existing="resume")  # the path as given: '' is refused, not read as '.'
    run_dir = Path(out) if out is not None else new_run_dir(runs_root)
    check_external_measures(cfg, run_dir)  # before any stage runs, not in the report at the end
    stage_list = stages if stages is not None else build_stages(cfg)
    jobs = jobs if jobs is not None else usable_cores()
    log(f"tangentlab reproduce -> {run_dir} ({len(stage_list)} stages, config {config_hash(cfg)}"
        + (", quick" if cfg.quick else "") + f", {jobs} jobs)")
    start = time.perf_counter()
    with run_lock(run_dir, command="reproduce"):
        check_output_dir(run_dir, kind=REPRODUCE_KIND, existing="resume")  # again, under the lock
        run_dir.mkdir(parents=True, exist_ok=True)
        crash.remember_run_dir(run_dir)
        if out is None:
            _link_latest(run_dir)
        summary = run_stages(run_dir, stage_list, jobs=jobs, config=cfg,
                             seeds={"seed": cfg.seed}, device=cfg.device,
                             extra={"quick": cfg.quick})
    total = time.perf_counter() - start
    done = sum(r.status == "done" for r in summary.records)
    log(f"reproduce finished in {total:.1f} s: {done}/{len(summary.records)} stages done"
        + "".join(f"; {r.name} {r.status}" for r in summary.problems()))
    report = run_dir / "report.html"
    if report.is_file():
        log(f"report: {report}")
    return summary

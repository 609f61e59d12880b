"""``tangentlab reproduce``: theory, synthetic, empirical and the report, in one resumable job.

The stage table (see :func:`producers`: one row per stage, naming the pillar's producer
function, its params and inputs; :func:`build_stages` turns it into the runner's graph), listed
with the critical path first:

1. ``train/<arch>``: train the encoder and the decoder (preset ``small``; ``tiny`` with --quick).
2. ``measure/<arch>``: the empirical protocol on each checkpoint trajectory (depends on 1).
3. ``validate``: the validation battery (the protocol's statistics on known-truth streams), then
   the end-to-end battery (planted truths through the real pipeline) in ``validate/end-to-end``.
4. ``theory``: ``verify(seed)`` of every derivation (``theory/verify.json``, with its checks in
   ``checks.json`` and residuals in ``results.csv``).
5. ``synthetic/<name>``: every registered synthetic experiment, one run directory each.
6. ``bridge/<arch>``: three checkpoints measured again on ``bridge_text`` (default the Bible's
   chapters), so that the closed forms meet numbers in a default run (depends on 1; not with
   --quick; :mod:`tangentlab.empirical.bridge.text_stage`). ``pretrained/smollm2`` when named.
   ``arms/<arch>`` with ``arms_steps`` > 0: the learning arms over a training horizon (depends
   on 1; :mod:`tangentlab.empirical.training.arms_study`).
7. ``report``: ``report.html``, ``report.md`` and ``figures/`` at the top of the run directory,
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
from tangentlab.errors import ConfigError
from tangentlab.pipeline.producers import Producer, stage
from tangentlab.pipeline.stages import (
    REPRODUCE_KIND,
    RunSummary,
    Stage,
    run_stages,
    usable_cores,
)
from tangentlab.progress import log
from tangentlab.runs import VERIFY_NAME

__all__ = [
    "ReproduceConfig", "DEFAULT", "QUICK", "QUICK_MEASURE_OVERRIDES", "ARCHS",
    "resolve_config", "config_toml", "producers", "build_stages", "new_run_dir",
    "check_external_measures", "bridge_text_stages", "check_bridge_text", "reproduce"
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
            ``quick``) and the end-to-end battery (standard setting; quick with ``quick``) as
            a stage, shown in the report's calibration section (the predictions are gated on
            the end-to-end run).
        external_measures: ``"NAME=DIR"`` measurement run directories (``tangentlab empirical
            measure`` outputs, e.g. a public checkpoint suite) that the report shows beside ours.
        bridge_text: the eval text of the ``bridge/<arch>`` stages (a corpus name or a path,
            as ``measure``'s ``eval_text`` takes it), which measure three checkpoints of each
            trajectory again on enough documents for the closed forms' per-token fits
            (:mod:`tangentlab.empirical.bridge.text_stage`); empty: no such stage (``--quick``);
            none either when it is the training ``corpus`` (:func:`bridge_text_stages`).
        arms_steps: > 0 adds an ``arms/<arch>`` stage per architecture: the learning arms over
            a training horizon (:mod:`tangentlab.empirical.training.arms_study`), that many
            steps from the last checkpoint, onto and away from Q_T and 2 rank-matched random
            subspaces, read on the held-out loss curve; 0 (the default): none (500 steps of
            the small decoder cost about 30 minutes on 2 cores).
        arms_optimizer: ``adamw`` or ``sgd`` for those arms.
        arms_lr: their learning rate; 0: 1e-4 for AdamW, 0.05 for SGD.
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
    bridge_text: str = "bible"
    arms_steps: int = option(0, ge=0, integer=True)
    arms_optimizer: str = option("adamw", choices=("adamw", "sgd"))
    arms_lr: float = option(0.0, ge=0)

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
    from tangentlab.empirical.measurement.measure_config import MeasureConfig

    diff = config_diff(MeasureConfig(), MeasureConfig.quick())
    return tuple(f"{k}={_override_text(v)}" for k, v in diff.items())


def _override_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


#: The measure overrides of the quick variant (derived from ``MeasureConfig.quick()``).
QUICK_MEASURE_OVERRIDES: tuple[str, ...] = _quick_measure_overrides()
#: The ``--quick`` variant: ``tiny`` models, quick synthetic settings, a lighter measurement
#: (a smoke run of a few minutes).
QUICK = dataclasses.replace(DEFAULT, quick=True, preset="tiny",
                            measure_overrides=QUICK_MEASURE_OVERRIDES, bridge_text="")


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


# --------------------------------------------------------------------------------------- stages

def producers(cfg: ReproduceConfig) -> list[Producer]:
    """The stage table of ``cfg``: one :class:`~tangentlab.pipeline.producers.Producer` per stage.

    Listed critical path first (the runner starts ready stages in list order): the trainings,
    the measurements that depend on them, then the battery, theory, synthetic and the report.
    Each row's ``params`` are the parts of ``cfg`` that decide its result.
    """
    from tangentlab.contract import (
        END_TO_END_DIR,
        REPORT,
        THEORY,
        VALIDATE,
        measure_stage,
        synthetic_stage,
        train_stage,
    )
    from tangentlab.runs import TRAIN_CONFIG_NAME
    from tangentlab.synthetic.experiments import get as get_experiment
    from tangentlab.synthetic.experiments import names as experiment_names
    from tangentlab.synthetic.experiments import run_experiment

    synthetic = list(cfg.synthetic) or experiment_names()
    for name in synthetic:
        get_experiment(name)  # an unknown name is a typed error before anything runs
    device = {"device": cfg.device}
    quick = " (quick)" if cfg.quick else ""
    table = [Producer(
        name=train_stage(arch), target="tangentlab.empirical.training.train:train_model", out_arg="out_dir",
        params={"arch": arch, "seed": cfg.seed, "preset": cfg.preset, "corpus": cfg.corpus,
                "overrides": _scoped(cfg.train_overrides, arch, "train_overrides")},
        runtime=device, resume_marker=TRAIN_CONFIG_NAME,
        check={"kind": "empirical/train", "rows": False,
               "needs": ("checkpoints/step_*/config.json", "checkpoints/step_*/*.safetensors")},
        description=f"train the {cfg.preset} {arch} on {cfg.corpus}",
    ) for arch in cfg.archs]
    table += [Producer(
        name=measure_stage(arch), target="tangentlab.empirical.measurement.protocol:measure_trajectory",
        out_arg="out_dir", inputs={"trajectory": f"{train_stage(arch)}/checkpoints"},
        depends=(train_stage(arch),), runtime=device,
        params={"seed": cfg.seed,
                "overrides": _scoped(cfg.measure_overrides, arch, "measure_overrides")},
        check={"kind": "empirical/measure"}, description=f"measure the {arch} trajectory",
    ) for arch in cfg.archs]
    if cfg.validate:
        table.append(Producer(
            name=VALIDATE, target="tangentlab.validate.stage:write_validation",
            params={"seed": cfg.seed, "quick": cfg.quick, "trained_to": _trained_to(cfg),
                    "setting": "quick" if cfg.quick else "standard"},
            inputs={"end_to_end": END_TO_END_DIR},
            check={"kind": "validate", "checks": True,
                   "needs": ("end-to-end/manifest.json", "end-to-end/checks.json")},
            description="validation battery and end-to-end battery (planted truths)" + quick,
        ))
    table.append(Producer(
        name=THEORY, target="tangentlab.theory.produce:produce",
        params={"seed": cfg.seed, "derivations": list(cfg.derivations)},
        check={"kind": "theory/verify", "checks": True, "needs": (VERIFY_NAME,)},
        description="verify every derivation",
    ))
    table += [Producer(
        name=synthetic_stage(name), target=f"{run_experiment.__module__}:run_experiment",
        out_arg="out_dir",
        params={"name": name, "seed": cfg.seed, "quick": cfg.quick,
                "overrides": _scoped(cfg.synthetic_overrides, name, "synthetic_overrides")},
        check={"kind": synthetic_stage(name)},
        description=f"synthetic experiment {name}{quick}",
    ) for name in synthetic]
    table += _bridge_producers(cfg, device) + _arms_producers(cfg, device)
    table.append(Producer(
        name=REPORT, target="tangentlab.report.render:produce", out_arg=None,
        inputs={"run_dir": "."}, output="report.html", after_all=True,
        check={"manifest": False, "rows": False, "needs": ("report.html", "report.md")},
        description="render report.html and report.md",
    ))
    return table


def _trained_to(cfg: ReproduceConfig) -> int:
    """The last training step of ``cfg``'s longest-trained model (what the validate stage reads).

    No checkpoint of the run lies beyond it, so a certificate whose schedule does cannot lift a row.
    """
    from tangentlab.empirical.training.train_config import resolve_train_config

    return max(resolve_train_config(a, cfg.preset, corpus=cfg.corpus, overrides=_scoped(
        cfg.train_overrides, a, "train_overrides")).steps for a in cfg.archs)


def _bridge_producers(cfg: ReproduceConfig, device: dict[str, str]) -> list[Producer]:
    """The stages that only feed the theory-against-measurement table (no verdict reads them).

    ``bridge/<arch>`` (when ``cfg.bridge_text`` names a text) and ``pretrained/smollm2`` (when
    its environment variable names the model).
    """
    from tangentlab.contract import train_stage
    from tangentlab.empirical.bridge import pretrained as BP  # optional stage (issue 20)
    from tangentlab.empirical.bridge import text_stage as BT  # closed forms in numbers (issue 36)

    table = [Producer(
        name=BT.text_stage(arch), target=f"{BT.__name__}:run_text_bridge",
        inputs={"trajectory": f"{train_stage(arch)}/checkpoints",
                "frequency_table": f"{train_stage(arch)}/frequency.csv"},
        depends=(train_stage(arch),), runtime=device,
        params={"seed": cfg.seed, "text": cfg.bridge_text, "measure": BT.TEXT_MEASURE},
        check={"kind": "empirical/measure"},
        description=f"measure the {arch} again on {cfg.bridge_text} for the closed forms",
    ) for arch in cfg.archs if bridge_text_stages(cfg)]
    if (smol := BP.configured_path()) is not None:  # SmolLM2 through the bridge, when named
        table.append(Producer(
            name=BP.STAGE, target="tangentlab.empirical.bridge.pretrained:run_pretrained",
            params={"seed": cfg.seed, "model_path": smol, "measure": BP.PRETRAINED_MEASURE},
            runtime=device, check={"rows": False},
            description="SmolLM2-135M through the theory-against-measurement table"))
    return table


def _arms_producers(cfg: ReproduceConfig, device: dict[str, str]) -> list[Producer]:
    """``arms/<arch>`` per architecture when ``cfg.arms_steps`` > 0 (no verdict reads them)."""
    from tangentlab.contract import arms_stage, train_stage

    study = {"steps": cfg.arms_steps, "optimizer": cfg.arms_optimizer, "lr": cfg.arms_lr,
             "n_controls": 2, "seed": cfg.seed}
    return [Producer(
        name=arms_stage(arch), target="tangentlab.empirical.training.arms_study:run_arms_stage",
        inputs={"run_dir": train_stage(arch)}, depends=(train_stage(arch),), runtime=device,
        params={"study": study}, check={"kind": "empirical/arms"},
        description=f"learning arms of the {arch} over {cfg.arms_steps} {cfg.arms_optimizer} steps",
    ) for arch in cfg.archs if cfg.arms_steps > 0]


def build_stages(cfg: ReproduceConfig) -> list[Stage]:
    """The runner's stage graph of ``cfg``: one stage per row of :func:`producers`.

    A row marked ``after_all`` (the report) comes after every other stage.
    """
    table = producers(cfg)
    before = tuple(p.name for p in table if not p.after_all)
    return [stage(p, after=before if p.after_all else ()) for p in table]


def bridge_text_stages(cfg: ReproduceConfig) -> bool:
    """Whether ``cfg`` has ``bridge/<arch>`` stages: a ``bridge_text`` other than the corpus.

    Trained on the bridge text itself, the measure stages' own held-out split is already that
    text's, and the bridge-text split (its own seeded hash of the documents) would hold
    documents the models were trained on.
    """
    return bool(cfg.bridge_text) and cfg.bridge_text != cfg.corpus


def check_bridge_text(cfg: ReproduceConfig) -> None:
    """Refuse a ``bridge_text`` that names no readable text, before anything runs.

    Raises:
        ConfigError: naming the key, what was wrong and how to leave the stages out.
    """
    if not bridge_text_stages(cfg):
        return
    from tangentlab.empirical.loading.corpus import load_texts
    from tangentlab.errors import DataError, UnknownNameError

    try:
        load_texts(cfg.bridge_text)
    except (DataError, UnknownNameError) as exc:
        raise ConfigError(f"config key 'bridge_text' ({cfg.bridge_text!r}) cannot be read: "
                          f"{exc}; `--set bridge_text=` leaves the bridge-text stages out") from None


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
    if stages is None:
        check_bridge_text(cfg)  # not after the trainings, when its stages start
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

"""A resumable stage runner: the engine behind ``tangentlab reproduce``.

A *stage* is one unit of work that writes one output path inside a run directory (for example
``synthetic/visibility`` or ``train/encoder``). The runner records every stage in the run
directory's ``manifest.json`` under ``"stages"``::

    "stages": {
      "theory": {"status": "done", "config_hash": "3f2a...", "seconds": 12.4, "cpu_seconds": 14.0,
                 "outputs": ["theory"], "error": null, "reason": null, "reused": false},
      "measure/encoder": {"status": "skipped", "reason": "depends on train/encoder, which failed",
                          ...}
    }

Status words: ``done``, ``failed``, ``skipped`` (a dependency did not finish), ``running`` (only
seen if a run was killed mid-stage).

Resume rule: rerunning on the same directory *reuses* a stage when its record says ``done``, its
config hash (the stage's own parameters plus the hashes of the stages it depends on) is
unchanged, and its outputs are present and readable (the stage's ``check`` passes). Anything
else is redone from scratch: the stage's output path is removed first (it always lies inside the
run directory). A failure is recorded with its error and a traceback under ``logs/``; stages
that do not depend on it still run.
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tangentlab.config import config_hash
from tangentlab.errors import ConfigError, StageError
from tangentlab.progress import log
from tangentlab.runs import (
    LOGS_DIR,
    MANIFEST_NAME,
    STAGE_STATUSES,
    StageRecord,
    atomic_write_text,
    build_manifest,
    read_manifest,
    read_stage_records,
    write_manifest,
)

__all__ = [
    "Stage",
    "StageContext",
    "StageRecord",
    "RunSummary",
    "STAGE_STATUSES",
    "run_stages",
    "stage_hash",
    "read_stage_records",
]

#: The manifest ``kind`` of a reproduce run directory.
REPRODUCE_KIND = "reproduce"


@dataclass(frozen=True)
class StageContext:
    """What a stage function receives.

    Attributes:
        run_dir: the run directory (absolute).
        output: the stage's own output path, ``run_dir / stage.output`` (absent when it starts,
            unless ``resume`` is true).
        resume: true when an interrupted attempt with the same config hash left output behind and
            the stage declared ``resumable`` (for example training, which continues from its last
            complete checkpoint).
        records: the records of the stages that already ran in this invocation (by name).
    """

    run_dir: Path
    output: Path
    resume: bool = False
    records: Mapping[str, StageRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    """One unit of work.

    Attributes:
        name: unique name, e.g. ``"synthetic/visibility"``.
        func: ``func(ctx) -> None``; writes under ``ctx.output`` and raises on failure.
        params: the configuration that determines the stage's result (hashed for resume).
        output: the output path relative to the run directory (default: ``name``).
        depends: names of stages that must be ``done`` before this one runs.
        check: ``check(output_path)`` raises if the outputs are missing or unreadable.
        always: rerun on every invocation (the report: cheap, and reads the other stages).
        resumable: pass ``resume=True`` to an interrupted attempt with the same config hash
            instead of deleting its output.
        description: one line for progress messages and the report.
    """

    name: str
    func: Callable[[StageContext], None]
    params: Mapping[str, Any] = field(default_factory=dict)
    output: str | None = None
    depends: tuple[str, ...] = ()
    check: Callable[[Path], None] | None = None
    always: bool = False
    resumable: bool = False
    description: str = ""

    @property
    def output_path(self) -> str:
        return self.output if self.output is not None else self.name


@dataclass(frozen=True)
class RunSummary:
    """The outcome of :func:`run_stages`: the run directory and every stage's record, in order."""

    run_dir: Path
    records: tuple[StageRecord, ...]

    @property
    def ok(self) -> bool:
        """True when every stage is ``done``."""
        return all(r.status == "done" for r in self.records)

    def by_name(self) -> dict[str, StageRecord]:
        return {r.name: r for r in self.records}

    def problems(self) -> list[StageRecord]:
        return [r for r in self.records if r.status != "done"]


def stage_hash(stage: Stage, dep_hashes: Mapping[str, str]) -> str:
    """The config hash of a stage: its name, its parameters and the hashes of its dependencies."""
    return config_hash(
        {
            "stage": stage.name,
            "params": dict(stage.params),
            "depends": {d: dep_hashes.get(d, "") for d in stage.depends},
        }
    )


def _validate_stages(stages: Sequence[Stage]) -> None:
    seen: set[str] = set()
    outputs: set[str] = set()
    for st in stages:
        if st.name in seen:
            raise ConfigError(f"stage {st.name!r} is listed twice")
        for dep in st.depends:
            if dep not in seen:
                raise ConfigError(
                    f"stage {st.name!r} depends on {dep!r}, which is not an earlier stage"
                )
        out = Path(st.output_path)
        if out.is_absolute() or ".." in out.parts or str(out) in ("", "."):
            raise ConfigError(f"stage {st.name!r} output {st.output_path!r} must be a relative path inside the run directory")
        if str(out) in outputs or str(out) == MANIFEST_NAME:
            raise ConfigError(f"stage {st.name!r} output {st.output_path!r} clashes with another output")
        seen.add(st.name)
        outputs.add(str(out))


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _outputs_valid(stage: Stage, out: Path) -> str | None:
    """None when the stage's outputs are present and readable, else the reason they are not."""
    if not out.exists():
        return f"its output {stage.output_path!r} is missing"
    if stage.check is not None:
        try:
            stage.check(out)
        except Exception as exc:  # any failure to read counts as invalid output
            return f"its output is unreadable ({type(exc).__name__}: {exc})"
    return None


def run_stages(
    run_dir: str | Path,
    stages: Sequence[Stage],
    *,
    config: Any = None,
    seeds: Mapping[str, int] | None = None,
    device: str = "cpu",
    extra: Mapping[str, Any] | None = None,
) -> RunSummary:
    """Run ``stages`` in order inside ``run_dir``, resuming from its manifest.

    Args:
        run_dir: the run directory (created if missing). If it holds a ``manifest.json`` that is
            not a reproduce manifest, it is refused (so a synthetic run is never overwritten).
        stages: the stage list; dependencies must name earlier stages.
        config, seeds, device, extra: recorded in the manifest (see
            :func:`tangentlab.runs.build_manifest`).

    Returns:
        A :class:`RunSummary`. Nothing is raised for a failing stage: it is recorded.
    """
    _validate_stages(stages)
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    previous: dict[str, StageRecord] = {}
    if (run_dir / MANIFEST_NAME).is_file():
        old = read_manifest(run_dir)
        if old.get("kind") != REPRODUCE_KIND:
            raise ConfigError(
                f"{str(run_dir)!r} holds a {old.get('kind')!r} run, not a reproduce run; "
                "choose a new or empty --out"
            )
        previous = read_stage_records(run_dir)
    elif any(p for p in run_dir.iterdir() if not p.name.startswith(".")):
        raise ConfigError(
            f"output directory {str(run_dir)!r} is not empty and is not a tangentlab reproduce run; "
            "choose a new or empty --out"
        )

    records: dict[str, StageRecord] = {}
    hashes: dict[str, str] = {}
    timings: dict[str, float] = {}

    # built once (it asks git for the commit); each save only refreshes timings and stages
    manifest = build_manifest(
        kind=REPRODUCE_KIND,
        config=config if config is not None else {},
        seeds=seeds,
        device=device,
        extra={**dict(extra or {}), "stage_order": [s.name for s in stages]},
    )

    def save() -> None:
        # only this invocation's stages: a stage dropped from the list (e.g. one architecture
        # fewer) must not feed the report with results of another configuration
        manifest["timings_s"] = {k: round(float(v), 3) for k, v in timings.items()}
        manifest["stages"] = {name: rec.to_dict() for name, rec in records.items()}
        write_manifest(run_dir, manifest)

    n = len(stages)
    for i, st in enumerate(stages, 1):
        h = stage_hash(st, hashes)
        hashes[st.name] = h
        out = run_dir / st.output_path
        tag = f"[{i}/{n}] {st.name}"
        base = dict(name=st.name, config_hash=h, outputs=(st.output_path,),
                    description=st.description, depends=st.depends)

        blocked = [d for d in st.depends if records[d].status != "done"]
        if blocked:
            dep = blocked[0]
            reason = f"depends on {dep}, which {'failed' if records[dep].status == 'failed' else 'did not run'}"
            records[st.name] = StageRecord(status="skipped", reason=reason, **base)
            log(f"{tag}: skipped ({reason})")
            save()
            continue

        prev = previous.get(st.name)
        if not st.always and prev is not None and prev.status == "done" and prev.config_hash == h:
            why_invalid = _outputs_valid(st, out)
            if why_invalid is None:
                records[st.name] = StageRecord(status="done", seconds=prev.seconds,
                                               cpu_seconds=prev.cpu_seconds, reused=True, **base)
                log(f"{tag}: already done with the same config ({h}); reusing it")
                save()
                continue
            log(f"{tag}: redoing it, because {why_invalid}")
        elif prev is not None and not st.always and prev.status == "done":
            log(f"{tag}: redoing it, because its config changed ({prev.config_hash} -> {h})")

        resume = bool(
            st.resumable and prev is not None and prev.status in ("running", "failed")
            and prev.config_hash == h and out.exists()
        )
        if not resume:
            _remove(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        records[st.name] = StageRecord(status="running", **base)
        save()
        log(f"{tag}: {'resuming' if resume else 'running'}" + (f" ({st.description})" if st.description else ""))
        start = time.perf_counter()
        cpu_start = time.process_time()
        try:
            st.func(StageContext(run_dir=run_dir, output=out, resume=resume, records=dict(records)))
            problem = _outputs_valid(st, out)
            if problem is not None:
                raise StageError(f"stage {st.name} finished but {problem}")
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            seconds = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            timings[st.name] = seconds
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            log_path = run_dir / LOGS_DIR / (st.name.replace("/", "__") + ".txt")
            atomic_write_text(log_path, traceback.format_exc())
            records[st.name] = StageRecord(status="failed", seconds=seconds, cpu_seconds=cpu, error=message,
                                           reason=f"traceback in {log_path.relative_to(run_dir)}", **base)
            log(f"{tag}: FAILED after {seconds:.1f} s: {message}")
            save()
            continue
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        timings[st.name] = seconds
        records[st.name] = StageRecord(status="done", seconds=seconds, cpu_seconds=cpu, **base)
        log(f"{tag}: done in {seconds:.1f} s ({cpu:.1f} s CPU)")
        save()

    return RunSummary(run_dir=run_dir, records=tuple(records[s.name] for s in stages))

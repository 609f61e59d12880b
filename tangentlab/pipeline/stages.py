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

Parallelism: with ``jobs=N`` the stages run in separate processes (standard
:class:`concurrent.futures.ProcessPoolExecutor` s, one per stage, so a worker that dies fails only
its own stage), walked in topological order of the stage graph by the standard library's
:class:`graphlib.TopologicalSorter`: a stage is ready as soon as the stages it ``depends`` on
(must be done) and the stages it comes ``after`` (ordering only, e.g. the report) have finished;
at most N run at once, and among ready stages the one listed first starts first. Each stage runs
in a fresh process forked from a fork server that only imported the heavy libraries (same result
whatever ran before it, so ``jobs=1`` and ``jobs=2`` give byte-identical outputs; see
:func:`_executor`) and writes its own log,
``logs/<stage>.log``. The parent process alone writes the manifest. ``jobs=None`` runs every stage
in this process, in list order (for stage functions that cannot be pickled, e.g. in tests).
"""

from __future__ import annotations

import os
import shutil
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tangentlab.config import config_hash
from tangentlab.errors import ConfigError
from tangentlab.progress import log
from tangentlab.runs import (
    LOGS_DIR,
    MANIFEST_NAME,
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
    "RunSummary",
    "run_stages",
    "stage_hash",
    "usable_cores",
    "REPRODUCE_KIND",
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
        after: names of earlier stages that must have *finished* (in any status) before this one
            starts: ordering without a data dependency (the report comes after everything).
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
    after: tuple[str, ...] = ()
    check: Callable[[Path], None] | None = None
    always: bool = False
    resumable: bool = False
    description: str = ""

    @property
    def output_path(self) -> str:
        """The output path relative to the run directory (``output``, else the stage's name)."""
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
        """The records keyed by stage name."""
        return {r.name: r for r in self.records}

    def problems(self) -> list[StageRecord]:
        """The records of the stages that did not finish (failed, skipped or left running)."""
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
        for dep in (*st.depends, *st.after):
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


@dataclass(frozen=True)
class _Outcome:
    """What one stage execution reports back to the parent (picklable)."""

    ok: bool
    seconds: float
    cpu_seconds: float
    message: str = ""
    traceback: str = ""


def _start_worker(environ: Mapping[str, str]) -> None:
    """A stage process's first step, before its stage is unpickled.

    It dies with the run (it watches the run, not the fork server) and takes ``environ``, the
    run's environment when it asked for the stage.
    """
    from tangentlab._runtime import die_with_parent

    die_with_parent()
    os.environ.clear()
    os.environ.update(environ)


def _execute(func: Callable[[StageContext], None], ctx: StageContext,
             log_path: Path | None) -> _Outcome:
    """Run one stage function; never raises (except KeyboardInterrupt).

    In a worker process (``log_path`` given) the process's stdout and stderr, file descriptors
    included, go to the stage's own log first. Wall and CPU seconds are this process's own.
    """
    if log_path is not None:
        import sys

        log_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    start = time.perf_counter()
    cpu_start = time.process_time()
    try:
        func(ctx)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _Outcome(False, time.perf_counter() - start, time.process_time() - cpu_start,
                        " ".join(f"{type(exc).__name__}: {exc}".split()), traceback.format_exc())
    return _Outcome(True, time.perf_counter() - start, time.process_time() - cpu_start)


def _executor():
    """A one-process pool for one stage.

    A fresh process forked from the fork server (:func:`~tangentlab._runtime.fork_server`), so
    no stage sees what another did and ``jobs=1`` and ``jobs=2`` write the same bytes; it takes
    this process's environment as it is now and dies as soon as this process does
    (:func:`_start_worker`).
    """
    from concurrent.futures import ProcessPoolExecutor

    from tangentlab._runtime import fork_server

    return ProcessPoolExecutor(max_workers=1, mp_context=fork_server(), initializer=_start_worker,
                               initargs=(dict(os.environ),))


def _stop_workers(pools: Sequence[Any], grace: float = 5.0) -> None:
    """Stop the worker processes of ``pools`` (an interrupted run) and wait until they are gone.

    Their processes are read *before* ``shutdown``, which forgets them (``_processes`` becomes
    None), then terminated and joined, so that no worker writes into the run directory after the
    run lock is released. The stages stay recorded as ``running``: a rerun resumes them.
    """
    procs = []
    for pool in pools:
        procs.extend((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)


def usable_cores() -> int:
    """The number of cores this process may run on (the default ``--jobs``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_stages(
    run_dir: str | Path,
    stages: Sequence[Stage],
    *,
    jobs: int | None = None,
    config: Any = None,
    seeds: Mapping[str, int] | None = None,
    device: str = "cpu",
    extra: Mapping[str, Any] | None = None,
) -> RunSummary:
    """Run ``stages`` inside ``run_dir``, resuming from its manifest.

    Args:
        run_dir: the run directory (created if missing). If it holds a ``manifest.json`` that is
            not a reproduce manifest, it is refused (so a synthetic run is never overwritten).
        stages: the stage list; ``depends`` and ``after`` must name earlier stages.
        jobs: ``None`` runs the stages in this process in list order; ``N >= 1`` runs them in up to
            N worker processes at once (stage functions must then be picklable, e.g.
            ``functools.partial`` of a module-level function).
        config: the resolved config, recorded in the manifest.
        seeds: the seeds, recorded in the manifest.
        device: the device, recorded in the manifest.
        extra: further manifest entries (see :func:`tangentlab.runs.build_manifest`).

    Returns:
        A :class:`RunSummary`, records in list order. Nothing is raised for a failing stage: it
        is recorded, and the stages that depend on it are marked skipped.
    """
    import graphlib
    from concurrent.futures import FIRST_COMPLETED, wait

    if jobs is not None and jobs < 1:
        raise ConfigError(f"jobs must be >= 1 (or None for in-process); got {jobs}")
    _validate_stages(stages)
    run_dir = Path(run_dir).resolve()
    previous = _previous_records(run_dir)
    by_name = {st.name: st for st in stages}
    index = {st.name: i for i, st in enumerate(stages, 1)}
    hashes: dict[str, str] = {}
    for st in stages:  # list order is a topological order (dependencies are earlier stages)
        hashes[st.name] = stage_hash(st, hashes)
    records: dict[str, StageRecord] = {}
    timings: dict[str, float] = {}
    manifest = build_manifest(  # built once (it asks git for the commit)
        kind=REPRODUCE_KIND,
        config=config if config is not None else {},
        seeds=seeds,
        device=device,
        extra={**dict(extra or {}), "stage_order": [s.name for s in stages], "jobs": jobs or 1},
    )

    started = time.perf_counter()

    def save() -> None:
        # only this invocation's stages: a stage dropped from the list (e.g. one architecture
        # fewer) must not feed the report with results of another configuration
        manifest["timings_s"] = {k: round(float(v), 3) for k, v in timings.items()}
        # stages overlap, so their seconds do not add up to the wall time of the invocation
        manifest["wall_seconds"] = round(time.perf_counter() - started, 3)
        manifest["stages"] = {s.name: records[s.name].to_dict() for s in stages if s.name in records}
        write_manifest(run_dir, manifest)

    def tag(name: str) -> str:
        return f"[{index[name]}/{len(stages)}] {name}"

    def base(st: Stage) -> dict[str, Any]:
        return dict(name=st.name, config_hash=hashes[st.name], outputs=(st.output_path,),
                    description=st.description, depends=st.depends)

    def settle(st: Stage) -> bool:
        """Skip or reuse the stage if it need not run (record it and return True)."""
        blocked = [d for d in st.depends if records[d].status != "done"]
        if blocked:
            dep = blocked[0]
            reason = f"depends on {dep}, which {'failed' if records[dep].status == 'failed' else 'did not run'}"
            records[st.name] = StageRecord(status="skipped", reason=reason, **base(st))
            log(f"{tag(st.name)}: skipped ({reason})")
            return True
        h = hashes[st.name]
        prev = previous.get(st.name)
        if not st.always and prev is not None and prev.status == "done" and prev.config_hash == h:
            why_invalid = _outputs_valid(st, run_dir / st.output_path)
            if why_invalid is None:
                records[st.name] = StageRecord(status="done", seconds=prev.seconds,
                                               cpu_seconds=prev.cpu_seconds, reused=True, **base(st))
                log(f"{tag(st.name)}: already done with the same config ({h}); reusing it")
                return True
            log(f"{tag(st.name)}: redoing it, because {why_invalid}")
        elif prev is not None and not st.always and prev.status == "done":
            log(f"{tag(st.name)}: redoing it, because its config changed ({prev.config_hash} -> {h})")
        return False

    def launch(st: Stage) -> StageContext:
        """Clear (or keep, to resume) the stage's output and mark it running."""
        out = run_dir / st.output_path
        prev = previous.get(st.name)
        resume = bool(
            st.resumable and prev is not None and prev.status in ("running", "failed")
            and prev.config_hash == hashes[st.name] and out.exists()
        )
        if not resume:
            _remove(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        records[st.name] = StageRecord(status="running", **base(st))
        save()
        log(f"{tag(st.name)}: {'resuming' if resume else 'running'}"
            + (f" ({st.description})" if st.description else ""))
        return StageContext(run_dir=run_dir, output=out, resume=resume, records=dict(records))

    def finish(st: Stage, outcome: _Outcome) -> None:
        timings[st.name] = outcome.seconds
        if outcome.ok:
            problem = _outputs_valid(st, run_dir / st.output_path)
            if problem is not None:
                outcome = _Outcome(False, outcome.seconds, outcome.cpu_seconds,
                                   f"StageError: stage {st.name} finished but {problem}")
        if outcome.ok:
            records[st.name] = StageRecord(status="done", seconds=outcome.seconds,
                                           cpu_seconds=outcome.cpu_seconds, **base(st))
            log(f"{tag(st.name)}: done in {outcome.seconds:.1f} s ({outcome.cpu_seconds:.1f} s CPU)")
            return
        log_path = run_dir / LOGS_DIR / (st.name.replace("/", "__") + ".txt")
        atomic_write_text(log_path, outcome.traceback or outcome.message + "\n")
        records[st.name] = StageRecord(
            status="failed", seconds=outcome.seconds, cpu_seconds=outcome.cpu_seconds,
            error=outcome.message, reason=f"traceback in {log_path.relative_to(run_dir)}",
            **base(st))
        log(f"{tag(st.name)}: FAILED after {outcome.seconds:.1f} s: {outcome.message}")

    if jobs is None:
        for st in stages:
            if settle(st):
                save()
                continue
            finish(st, _execute(st.func, launch(st), None))
            save()
        return RunSummary(run_dir=run_dir, records=tuple(records[s.name] for s in stages))

    # Each stage gets its own one-process executor, so a worker that dies (killed, out of
    # memory) fails its own stage only; at most `jobs` run at once, the lowest-listed first.
    graph = graphlib.TopologicalSorter({st.name: (*st.depends, *st.after) for st in stages})
    graph.prepare()
    ready: list[str] = []
    running: dict[Any, tuple[Stage, Any]] = {}
    try:
        while graph.is_active():
            for name in graph.get_ready():
                if settle(by_name[name]):
                    save()
                    graph.done(name)
                else:
                    ready.append(name)
            ready.sort(key=index.__getitem__)
            while ready and len(running) < jobs:
                st = by_name[ready.pop(0)]
                ctx = launch(st)
                pool = _executor()
                log_file = run_dir / LOGS_DIR / (st.name.replace("/", "__") + ".log")
                running[pool.submit(_execute, st.func, ctx, log_file)] = (st, pool)
            if not running:
                continue
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in sorted(finished, key=lambda f: index[running[f][0].name]):
                st, pool = running.pop(fut)
                try:
                    outcome = fut.result()
                except Exception as exc:  # the worker died, or the stage could not be pickled
                    outcome = _Outcome(False, 0.0, 0.0,
                                       " ".join(f"{type(exc).__name__}: {exc}".split()),
                                       "".join(traceback.format_exception(exc)))
                pool.shutdown(wait=True)
                finish(st, outcome)
                save()
                graph.done(st.name)
    finally:
        _stop_workers([pool for _st, pool in running.values()])  # interrupted: stop them
    return RunSummary(run_dir=run_dir, records=tuple(records[s.name] for s in stages))


def _previous_records(run_dir: Path) -> dict[str, StageRecord]:
    """The records of an earlier invocation in ``run_dir`` (created if missing).

    Refuses a directory that holds something other than a reproduce run.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / MANIFEST_NAME).is_file():
        old = read_manifest(run_dir)
        if old.get("kind") != REPRODUCE_KIND:
            raise ConfigError(
                f"{str(run_dir)!r} holds a {old.get('kind')!r} run, not a reproduce run; "
                "choose a new or empty --out"
            )
        return read_stage_records(run_dir)
    if any(p for p in run_dir.iterdir() if not p.name.startswith(".")):
        raise ConfigError(
            f"output directory {str(run_dir)!r} is not empty and is not a tangentlab reproduce run; "
            "choose a new or empty --out"
        )
    return {}

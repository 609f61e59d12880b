"""Run directories: tidy results tables, ``manifest.json`` and atomic writes.

Every experiment (synthetic, empirical, reproduce) writes a *run directory*:

- ``results.csv``: tidy long format, one row per measured number. The standard columns are
  :data:`RESULT_COLUMNS`; a row may carry extra columns (e.g. ``manifold``, ``t``), which are
  written after the standard ones in sorted order. Missing values are written as empty cells.
- ``manifest.json``: resolved config, config hash, seeds, package versions, git commit, device,
  dtype, timings, command line (see :func:`build_manifest`).
- figures (PNG).

Nothing is ever half-written: every file goes to a temporary name in the same folder first and is
then renamed over the target (``os.replace`` is atomic on POSIX). A whole directory can be built
the same way with :func:`atomic_directory`.

Two guards make a run directory safe to write:

- :func:`check_output_dir` is the one place where every command checks its output path (an
  existing file, a run of another kind, a folder that is not empty), each refused with an
  :class:`~tangentlab.errors.OutputPathError` saying what to do.
- :func:`run_lock` is an advisory lock per run directory, so that two processes never write one
  run. The lock lives *beside* the run directory (``PARENT/.NAME.lock``, with its holder's pid,
  host, start time and command in ``PARENT/.NAME.lock.json``), so that a directory built under a
  temporary name and renamed into place keeps its lock.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from tangentlab.atomic import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    current_umask,
)
from tangentlab.errors import DataError, OutputPathError
from tangentlab.locks import (
    LockHolder,
    forget_locked_run_dirs,
    lock_paths,
    locked_run_dir,
    read_lock_holder,
    run_lock,
)
from tangentlab.readers import check_fields, read_json
from tangentlab.results import RESULT_COLUMNS, RESULTS_NAME, read_results, write_results

__all__ = [
    "RESULT_COLUMNS", "MANIFEST_NAME", "RESULTS_NAME", "CHECKS_NAME", "VERIFY_NAME", "LOGS_DIR",
    "STAGE_STATUSES", "StageRecord", "read_stage_records", "read_json", "locked_run_dir",
    "forget_locked_run_dirs", "atomic_write_text", "atomic_write_bytes", "atomic_write_json",
    "atomic_directory", "check_output_dir", "MAX_RUN_NAME_BYTES", "run_kind", "TRAIN_CONFIG_NAME",
    "LockHolder", "run_lock", "lock_paths", "read_lock_holder", "remove_partials", "write_results",
    "read_results", "build_manifest", "write_manifest", "read_manifest", "package_versions",
    "git_commit", "Timer",
]

#: The names of run files, in one place (every pillar, the pipeline and the report use these;
#: ``RESULTS_NAME`` lives with the table, :mod:`tangentlab.results`).
MANIFEST_NAME = "manifest.json"
#: A synthetic experiment's theory-vs-measurement checks.
CHECKS_NAME = "checks.json"
#: The theory stage's ``verify()`` reports of every derivation.
VERIFY_NAME = "verify.json"
#: Where a reproduce run keeps per-stage logs and tracebacks (and where crash logs go).
LOGS_DIR = "logs"
#: Written first by ``empirical train``: marks a (possibly unfinished) training run.
TRAIN_CONFIG_NAME = "train_config.json"
#: The status words a stage record (``manifest.json`` → ``"stages"``) can carry.
STAGE_STATUSES: tuple[str, ...] = ("done", "failed", "skipped", "running")


_DEFAULT_PACKAGES = (
    "tangentlab",
    "numpy",
    "scipy",
    "sympy",
    "torch",
    "geomstats",
    "pandas",
    "matplotlib",
    "transformers",
    "tokenizers",
    "safetensors",
    "scikit-learn",
)


# ----------------------------------------------------------------------- output paths

#: What :func:`check_output_dir` may do with an existing run of the expected kind: ``"replace"``
#: it (a run rebuilt atomically), ``"resume"`` it (continue in place), or ``"refuse"`` it.
ExistingRun = Literal["replace", "resume", "refuse"]


def run_kind(path: str | Path) -> str | None:
    """The kind of run a directory holds (``manifest.json``'s ``kind``), else ``None``.

    An unfinished training run (no manifest yet, but ``train_config.json``) is
    ``"empirical/train"``; a manifest that cannot be read is ``"unreadable"``.
    """
    path = Path(path)
    manifest = path / MANIFEST_NAME
    if manifest.is_file():
        try:
            kind = json.loads(manifest.read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            return "unreadable"
        return str(kind) if kind else "unreadable"
    if (path / TRAIN_CONFIG_NAME).is_file():
        return "empirical/train"
    return None


def check_output_dir(
    path: str | Path,
    *,
    kind: str | None = None,
    existing: ExistingRun = "replace",
    flag: str = "--out",
) -> Literal["new", "empty", "run"]:
    """Check that ``path`` can be used as a run directory, before anything is written.

    The one output-path check of every command. It refuses, each with an
    :class:`~tangentlab.errors.OutputPathError` (one line, saying what to do):

    - an empty path (``--out ''`` would otherwise mean the current folder);
    - a path whose last name is longer than :data:`MAX_RUN_NAME_BYTES` (the run lock and the
      temporary names beside it add their own suffixes), or with any name over the file
      system's limit;
    - a path that exists and is not a directory, or that lies under a file;
    - a folder whose nearest existing ancestor is not writable, or an existing folder whose
      parent is not writable (the lock lives in the parent);
    - a run of another kind (when ``kind`` is given; ``None`` accepts any run);
    - a run of the same kind when ``existing="refuse"``;
    - a folder that is not empty and holds no tangentlab run (tangentlab's own temporary
      ``.NAME.partial-*`` / ``.NAME.old-*`` / ``.*.tmp`` leftovers do not count: a folder holding
      only those is empty).

    Args:
        path: the output directory.
        kind: the run kind the command writes (``"empirical/train"``, ``"synthetic/visibility"``,
            ``"reproduce"``, ...); ``None`` accepts a run of any kind.
        existing: what the command does with an existing run of that kind (see
            :data:`ExistingRun`); only used in the refusal message and for ``"refuse"``.
        flag: the option the user gave the path with, for the messages.

    Returns:
        ``"new"`` (nothing there yet), ``"empty"`` (an empty folder) or ``"run"`` (a run of the
        accepted kind, which the command may replace or resume).
    """
    if str(path) == "":
        raise OutputPathError(f"{flag} is empty; pass the run directory to write, e.g. "
                              f"{flag} runs/mine")
    path = Path(path)
    shown = str(path)
    _check_name_length(path, flag)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise OutputPathError(
                f"{flag} {shown!r} is an existing file, not a directory; choose another {flag} "
                "(a new or empty directory)"
            )
        parent = path.absolute().parent
        if not os.access(parent, os.W_OK | os.X_OK):  # the run lock and temporary names live there
            raise OutputPathError(
                f"cannot write {flag} {shown!r}: its folder {str(parent)!r} is not writable (the "
                f"run lock and the temporary copy live beside the run); choose a {flag} in a "
                "writable folder"
            )
    else:
        ancestor = path.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise OutputPathError(
                f"{flag} {shown!r} lies under {str(ancestor)!r}, which is a file; choose another {flag}"
            )
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise OutputPathError(
                f"cannot create {flag} {shown!r}: {str(ancestor)!r} is not writable; choose a "
                f"writable {flag}"
            )
        return "new"
    found = run_kind(path)
    if found is None:
        if any(not _is_leftover(p.name) for p in path.iterdir()):
            raise OutputPathError(
                f"{flag} {shown!r} is not empty and is not a tangentlab run directory; choose a "
                f"new or empty {flag}"
            )
        return "empty"
    if kind is not None and found != kind:
        raise OutputPathError(
            f"{flag} {shown!r} holds a {found!r} run, not a {kind!r} run; choose a new or empty "
            f"{flag}"
        )
    if existing == "refuse":
        raise OutputPathError(
            f"{flag} {shown!r} already holds a {found!r} run; pass --resume to continue it, or "
            f"choose a new {flag}"
        )
    return "run"


#: The longest last name of a run directory, in UTF-8 bytes: the file system's usual limit (255)
#: less the longest suffix tangentlab puts beside it (``.NAME.old-PID-NANOSECONDS``).
MAX_RUN_NAME_BYTES = 200


def _check_name_length(path: Path, flag: str) -> None:
    """OutputPathError for a run name too long for its lock and temporary siblings."""
    try:
        limit = os.pathconf(_nearest_existing(path), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise OutputPathError(
                f"{flag} has a name of {len(os.fsencode(part))} bytes ({part[:24]}...), over the "
                f"file system's limit of {limit}; choose a shorter {flag}"
            )
    size = len(os.fsencode(path.name))
    if size > MAX_RUN_NAME_BYTES:
        raise OutputPathError(
            f"{flag} ends in a name of {size} bytes ({path.name[:24]}...); a run directory's name "
            f"may have at most {MAX_RUN_NAME_BYTES} bytes (its lock and temporary copies beside "
            f"it add a suffix); choose a shorter {flag}"
        )


def _nearest_existing(path: Path) -> Path:
    cur = path.absolute()
    while not cur.exists() and cur != cur.parent:
        cur = cur.parent
    return cur


@contextlib.contextmanager
def atomic_directory(final: str | Path, *, kind: str | None = None) -> Iterator[Path]:
    """Build a directory under a temporary sibling name; rename it to ``final`` on success.

    On any exception the temporary directory is removed and ``final`` is left as it was, so a
    failed run never leaves partial output. If ``final`` already exists it must be empty or a
    previous run directory (holding ``manifest.json``); it is then replaced. Any other existing
    folder (or a file) is refused by :func:`check_output_dir`, so that ``--out .`` cannot wipe a
    user's files. With ``kind``, an existing run of another kind is refused too (so that a
    validation run never replaces a training run, say).
    """
    final = Path(final)
    check_output_dir(final, kind=kind, existing="replace")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp gives 0700; the run directory is ordinary output
    try:
        yield tmp
        from tangentlab._faults import pause_point

        pause_point("atomic_directory")  # test-only: a kill here leaves the run half-built
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _is_leftover(name: str) -> bool:
    """Whether a file name is one of tangentlab's temporary names (an interrupted atomic write)."""
    return name.startswith(".") and (".partial-" in name or ".old-" in name
                                     or name.endswith(".tmp"))


def remove_partials(folder: str | Path, *, name: str | None = None) -> list[Path]:
    """Remove what interrupted atomic writes left in ``folder``.

    ``.NAME.partial-*`` and ``.NAME.old-*`` folders and ``.NAME.*.tmp`` files (only directly inside
    it).

    With ``name``, only the leftovers of the run directory ``folder/name`` built by
    :func:`atomic_directory` are removed (its ``.NAME.partial-*`` and ``.NAME.old-*``
    siblings). Call it while holding the lock of what is cleaned (:func:`run_lock`), so that no
    live writer's temporary files are taken. Returns what was removed.
    """
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for p in folder.iterdir():
        if not p.name.startswith("."):
            continue
        if name is not None:
            if not p.name.startswith((f".{name}.partial-", f".{name}.old-")) or not p.is_dir():
                continue
            shutil.rmtree(p, ignore_errors=True)
        elif p.is_dir() and _is_leftover(p.name):
            shutil.rmtree(p, ignore_errors=True)
        elif p.is_file() and _is_leftover(p.name):
            p.unlink(missing_ok=True)
        else:
            continue
        removed.append(p)
    return removed


def package_versions(names: Iterable[str] = _DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Installed versions (from package metadata, without importing the packages).

    Read once per process and list of names (a fresh dict each call): every stage writes a
    manifest, and reading a package's metadata costs milliseconds (the test suite wrote about
    400 manifests and spent 20 s of one core on it). A package upgraded while a process runs is
    not seen by that process, as its imports do not see it either.
    """
    return dict(_package_versions(tuple(names)))


@functools.lru_cache(maxsize=8)
def _package_versions(names: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    out: list[tuple[str, str | None]] = [("python", platform.python_version())]
    for name in names:
        try:
            out.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)


def git_commit(start: str | Path | None = None) -> dict[str, Any]:
    """The git commit of the tangentlab source tree (``None`` outside a checkout) and a dirty flag."""
    where = Path(start) if start is not None else Path(__file__).resolve().parent
    try:  # one git call: "# branch.oid SHA" (or "(initial)"), then a line per changed file
        status = subprocess.run(
            ["git", "status", "--porcelain=v2", "--branch", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    lines = status.stdout.splitlines()
    sha = next((ln.split()[2] for ln in lines if ln.startswith("# branch.oid ")), None)
    if status.returncode != 0 or sha in (None, "(initial)"):
        return {"commit": None, "dirty": None}
    return {"commit": sha, "dirty": any(not ln.startswith("#") for ln in lines)}


def build_manifest(
    *,
    kind: str,
    config: Any,
    seeds: Mapping[str, int] | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    timings: Mapping[str, float] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The standard ``manifest.json`` content of a run directory.

    Args:
        kind: what wrote the run, e.g. ``"synthetic/visibility"`` or ``"empirical/measure"``.
        config: the resolved config (a dataclass or a plain dict).
        seeds: every seed used, by name.
        device: where the numbers were computed (``"cpu"``, ``"cuda"``, ...).
        dtype: in which precision they were computed.
        timings: wall seconds by stage.
        extra: anything else worth recording (e.g. ``tie_embeddings``, site semantics).
    """
    import dataclasses

    from tangentlab._version import __version__
    from tangentlab.config import config_hash, config_to_dict

    cfg = config_to_dict(config) if dataclasses.is_dataclass(config) else dict(config or {})
    manifest: dict[str, Any] = {
        "kind": kind,
        "tangentlab_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": cfg,
        "config_hash": config_hash(cfg),
        "seeds": dict(seeds or {}),
        "device": device,
        "dtype": dtype,
        "timings_s": {k: round(float(v), 3) for k, v in (timings or {}).items()},
        "versions": package_versions(),
        "git": git_commit(),
        "platform": {"system": platform.system(), "machine": platform.machine(),
                     "cpu_count": os.cpu_count()},
        "argv": list(sys.argv),
    }
    if extra:
        manifest.update(dict(extra))
    return manifest


def write_manifest(run_dir: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest.json`` into ``run_dir`` atomically."""
    return atomic_write_json(Path(run_dir) / MANIFEST_NAME, dict(manifest))


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """Read a run directory's ``manifest.json``.

    A missing one, or one that is not a JSON object (or whose ``kind`` is not a string, or whose
    ``stages`` is not an object), is a :class:`~tangentlab.errors.DataError` naming the file and
    the field.
    """
    p = Path(run_dir) / MANIFEST_NAME
    if not p.is_file():
        raise DataError(f"{str(run_dir)!r} has no {MANIFEST_NAME}; it is not a tangentlab run directory")
    return read_json(p, expect=dict, optional={"kind": str, "stages": dict},
                     hint="rerun the command that wrote it")


class Timer:
    """Collect wall times by name: ``with timer("fit"): ...``; ``timer.as_dict()``."""

    def __init__(self) -> None:
        self._times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the block as the component ``name`` (seconds add up over repeated blocks)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._times[name] = self._times.get(name, 0.0) + time.perf_counter() - start

    def as_dict(self) -> dict[str, float]:
        """The components' seconds, rounded to milliseconds."""
        return dict(self._times)


# ----------------------------------------------------------------------- stage records

@dataclass(frozen=True)
class StageRecord:
    """What the manifest says about one stage."""

    name: str
    status: str
    config_hash: str
    seconds: float | None = None
    cpu_seconds: float | None = None
    outputs: tuple[str, ...] = ()
    error: str | None = None
    reason: str | None = None
    reused: bool = False
    description: str = ""
    depends: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The record as the manifest stores it."""
        return {
            "status": self.status,
            "config_hash": self.config_hash,
            "seconds": None if self.seconds is None else round(float(self.seconds), 3),
            "cpu_seconds": None if self.cpu_seconds is None else round(float(self.cpu_seconds), 3),
            "outputs": list(self.outputs),
            "error": self.error,
            "reason": self.reason,
            "reused": self.reused,
            "description": self.description,
            "depends": list(self.depends),
        }

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any], *,
                  where: str = "the manifest") -> StageRecord:
        """The record of stage ``name`` read back from the manifest.

        A record that is not an object, has a field of the wrong type or an unknown status is a
        :class:`~tangentlab.errors.DataError` (``where`` names the manifest in the message).
        """
        check_fields(d, where=f"stage {name!r} in {where}", fields={"status": str},
                     optional={"config_hash": str, "seconds": float, "cpu_seconds": float,
                               "outputs": list, "error": str, "reason": str, "reused": bool,
                               "description": str, "depends": list},
                     hint="delete that run's manifest.json to redo every stage, or choose a new --out")
        status = d["status"]
        if status not in STAGE_STATUSES:
            raise DataError(f"stage {name!r} has unknown status {status!r} in {where}; expected "
                            f"one of {', '.join(STAGE_STATUSES)}")
        return cls(
            name=name,
            status=status,
            config_hash=str(d.get("config_hash", "")),
            seconds=d.get("seconds"),
            cpu_seconds=d.get("cpu_seconds"),
            outputs=tuple(d.get("outputs") or ()),
            error=d.get("error"),
            reason=d.get("reason"),
            reused=bool(d.get("reused", False)),
            description=str(d.get("description", "")),
            depends=tuple(d.get("depends") or ()),
        )




def read_stage_records(run_dir: str | Path) -> dict[str, StageRecord]:
    """The stage records of a reproduce run directory (empty if it has none yet)."""
    run_dir = Path(run_dir)
    if not (run_dir / MANIFEST_NAME).is_file():
        return {}
    manifest = read_manifest(run_dir)  # checks that "stages" is an object
    stages = manifest.get("stages") or {}
    where = repr(str(run_dir / MANIFEST_NAME))
    return {name: StageRecord.from_dict(name, d, where=where) for name, d in stages.items()}

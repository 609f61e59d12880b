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
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
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
from typing import Any

from tangentlab.errors import ConfigError, DataError

__all__ = [
    "RESULT_COLUMNS",
    "MANIFEST_NAME",
    "RESULTS_NAME",
    "CHECKS_NAME",
    "VERIFY_NAME",
    "LOGS_DIR",
    "STAGE_STATUSES",
    "StageRecord",
    "read_stage_records",
    "atomic_write_text",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_directory",
    "write_results",
    "read_results",
    "build_manifest",
    "write_manifest",
    "read_manifest",
    "package_versions",
    "git_commit",
    "Timer",
]

#: The names of run files, in one place (every pillar, the pipeline and the report use these).
RESULTS_NAME = "results.csv"
MANIFEST_NAME = "manifest.json"
#: A synthetic experiment's theory-vs-measurement checks.
CHECKS_NAME = "checks.json"
#: The theory stage's ``verify()`` reports of every derivation.
VERIFY_NAME = "verify.json"
#: Where a reproduce run keeps per-stage logs and tracebacks.
LOGS_DIR = "logs"
#: The status words a stage record (``manifest.json`` → ``"stages"``) can carry.
STAGE_STATUSES: tuple[str, ...] = ("done", "failed", "skipped", "running")

#: The standard columns of a tidy results table, in order. ``value`` is the measured number,
#: ``prediction`` the theory's value for the same quantity where there is one, ``ci_low`` /
#: ``ci_high`` its confidence interval (always an interval, never a min–max), ``band_low`` /
#: ``band_high`` a spread such as the min and max over controls or checkpoints, ``n`` the sample
#: size behind it.
RESULT_COLUMNS: tuple[str, ...] = (
    "experiment",
    "model",
    "arch",
    "checkpoint",
    "step",
    "layer",
    "site",
    "bucket",
    "subspace",
    "method",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "band_low",
    "band_high",
    "n",
    "prediction",
    "seed",
)

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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tmp_path(path: Path) -> Path:
    """A fresh temporary file beside ``path``, with the permissions a plain ``open`` would give.

    ``mkstemp`` creates files with mode 0600; the final file should be readable like any other
    output (0666 minus the umask), so the mode is set before anything is written.
    """
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    return Path(name)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(obj: Any) -> Any:
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (numpy scalars and arrays are converted)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


@contextlib.contextmanager
def atomic_directory(final: str | Path) -> Iterator[Path]:
    """Build a directory under a temporary sibling name; rename it to ``final`` on success.

    On any exception the temporary directory is removed and ``final`` is left as it was, so a
    failed run never leaves partial output. If ``final`` already exists it must be empty or a
    previous run directory (holding ``manifest.json``); it is then replaced. Any other existing
    folder is refused, so that ``--out .`` cannot wipe a user's files.
    """
    final = Path(final)
    if final.exists():
        if not final.is_dir():
            raise ConfigError(f"output path {str(final)!r} exists and is not a directory")
        if any(final.iterdir()) and not (final / MANIFEST_NAME).exists():
            raise ConfigError(
                f"output directory {str(final)!r} is not empty and is not a tangentlab run "
                "directory; choose a new or empty --out"
            )
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp gives 0700; the run directory is ordinary output
    try:
        yield tmp
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


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value)
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return _cell(value.item())
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def write_results(rows: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write tidy ``rows`` as CSV to ``path`` atomically.

    Columns: the standard :data:`RESULT_COLUMNS` first (all of them, empty where unused), then
    any extra keys in sorted order. Each row must have ``metric`` and ``value``.
    Floats are written with ``repr`` so the file round-trips exactly (same seed, same bytes).
    """
    rows = [dict(r) for r in rows]
    for i, row in enumerate(rows):
        if "metric" not in row or "value" not in row:
            raise DataError(f"results row {i} lacks 'metric' or 'value': {row!r}")
    extra = sorted({k for r in rows for k in r} - set(RESULT_COLUMNS))
    columns = list(RESULT_COLUMNS) + extra
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return atomic_write_text(path, buf.getvalue())


def read_results(path: str | Path):
    """Read a tidy results CSV (a file, or a run directory holding ``results.csv``) as a DataFrame."""
    import pandas as pd

    p = Path(path)
    if p.is_dir():
        p = p / RESULTS_NAME
    if not p.is_file():
        raise DataError(f"no results table at {str(p)!r}; run the experiment first")
    return pd.read_csv(p, keep_default_na=True)


def package_versions(names: Iterable[str] = _DEFAULT_PACKAGES) -> dict[str, str | None]:
    """Installed versions (from package metadata, without importing the packages)."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(start: str | Path | None = None) -> dict[str, Any]:
    """The git commit of the tangentlab source tree (``None`` outside a checkout) and a dirty flag."""
    where = Path(start) if start is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
        )
        if sha.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where, capture_output=True, text=True, timeout=5,
        )
        return {"commit": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


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
        device, dtype: where and in which precision the numbers were computed.
        timings: wall seconds by stage.
        extra: anything else worth recording (e.g. ``tie_embeddings``, site semantics).
    """
    import dataclasses

    from tangentlab import __version__
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
    """Read a run directory's ``manifest.json``; a missing or corrupt one is a DataError."""
    p = Path(run_dir) / MANIFEST_NAME
    if not p.is_file():
        raise DataError(f"{str(run_dir)!r} has no {MANIFEST_NAME}; it is not a tangentlab run directory")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{str(p)!r} is not valid JSON ({exc}); rerun the stage that wrote it") from None


class Timer:
    """Collect wall times by name: ``with timer("fit"): ...``; ``timer.as_dict()``."""

    def __init__(self) -> None:
        self._times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._times[name] = self._times.get(name, 0.0) + time.perf_counter() - start

    def as_dict(self) -> dict[str, float]:
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
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> StageRecord:
        status = str(d.get("status", ""))
        if status not in STAGE_STATUSES:
            raise DataError(f"stage {name!r} has unknown status {status!r} in the manifest")
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
    manifest = read_manifest(run_dir)
    stages = manifest.get("stages") or {}
    if not isinstance(stages, Mapping):
        raise DataError(f"{str(run_dir / MANIFEST_NAME)!r} has a malformed 'stages' entry")
    return {name: StageRecord.from_dict(name, d) for name, d in stages.items()}

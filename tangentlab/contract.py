"""The run-directory contract every producer writes through, and the names stages share.

A *producer* turns a config into a run directory. Theory verify, each synthetic experiment, the
validation battery (and, with their own resumable writers, training and measurement) write the
same layout:

- ``results.csv``: tidy rows (:func:`tangentlab.runs.write_results`);
- ``checks.json``: a list of checks, each an object with at least ``name`` (string) and
  ``passed`` (boolean);
- figures: PNG files by name;
- further JSON files the producer names (theory's ``verify.json``);
- ``manifest.json``: kind, config, seeds, timings and the standard provenance
  (:func:`tangentlab.runs.build_manifest`), plus ``quick``, ``figures``, ``checks_passed`` and
  ``checks_total``.

:func:`write_run` builds it under a temporary name and renames it into place (nothing is left
half-written), after the one output-path check (:func:`tangentlab.runs.check_output_dir`), which
refuses a run of another kind. :func:`read_checks` and :func:`run_passed` are the one way to read
a run's checks and its pass/fail (the CLI's exit codes); :func:`check_run` is the one output check
a pipeline stage runs on what a producer wrote. :func:`jsonable` is the one JSON-cleaning helper
of the records' ``to_dict`` methods.

The stage names of the reproduce pipeline, which the report reads back, live here too
(:data:`THEORY`, :data:`VALIDATE`, :data:`REPORT`, :func:`train_stage`, :func:`measure_stage`,
:func:`synthetic_stage`, :func:`bridge_stage`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "THEORY",
    "VALIDATE",
    "END_TO_END_DIR",
    "REPORT",
    "TRAIN",
    "MEASURE",
    "SYNTHETIC",
    "train_stage",
    "measure_stage",
    "synthetic_stage",
    "BRIDGE",
    "bridge_stage",
    "arms_stage",
    "ARMS",
    "jsonable",
    "RunOutput",
    "write_run",
    "read_checks",
    "failed_checks",
    "run_passed",
    "check_run",
]

#: The theory stage (``verify()`` of every derivation).
THEORY = "theory"
#: The validation-battery stage.
VALIDATE = "validate"
#: Where a reproduce run keeps its end-to-end validation run, relative to the run directory
#: (inside the validate stage's folder; the pipeline writes it there, the report reads it).
END_TO_END_DIR = VALIDATE + "/end-to-end"
#: The report stage (``report.html`` and ``report.md`` at the top of the run directory).
REPORT = "report"
#: The prefix of the training stages (``train/<arch>``).
TRAIN = "train"
#: The prefix of the measurement stages (``measure/<arch>``).
MEASURE = "measure"
#: The prefix of the synthetic-experiment stages (``synthetic/<name>``).
SYNTHETIC = "synthetic"
#: The prefix of the bridge-text stages (``bridge/<arch>``: theory against measurement only).
BRIDGE = "bridge"
#: The prefix of the learning-arms-over-a-horizon stages (``arms/<arch>``; no verdict reads them).
ARMS = "arms"


def train_stage(arch: str) -> str:
    """The training stage of ``arch`` (``"train/encoder"``)."""
    return f"{TRAIN}/{arch}"


def measure_stage(arch: str) -> str:
    """The measurement stage of ``arch`` (``"measure/decoder"``)."""
    return f"{MEASURE}/{arch}"


def synthetic_stage(name: str) -> str:
    """The stage of synthetic experiment ``name`` (``"synthetic/visibility"``)."""
    return f"{SYNTHETIC}/{name}"


def bridge_stage(arch: str) -> str:
    """The bridge-text stage of ``arch`` (``"bridge/decoder"``)."""
    return f"{BRIDGE}/{arch}"


def arms_stage(arch: str) -> str:
    """The learning-arms-over-a-horizon stage of ``arch`` (``"arms/decoder"``)."""
    return f"{ARMS}/{arch}"


def jsonable(value: Any) -> Any:
    """``value`` with every part JSON can store plainly, for a record's ``to_dict``.

    NaN becomes ``None`` and an infinity the string ``"inf"`` or ``"-inf"`` (strict JSON has
    neither); numpy scalars become Python numbers and numpy arrays lists; a dataclass becomes a
    dict of its fields; mappings, lists and tuples are cleaned item by item (tuples become lists);
    a ``Path`` becomes its text. Anything else is returned as it is.

    >>> jsonable({"a": float("nan"), "b": (1.5, float("-inf")), "c": "x"})
    {'a': None, 'b': [1.5, '-inf'], 'c': 'x'}
    """
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)  # a numpy float64 (a float subclass) as a plain float
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, Mapping):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return value
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    return value


@dataclass
class RunOutput:
    """What a producer computed, before anything is written.

    Attributes:
        rows: tidy results rows (each with ``metric`` and ``value``), ``results.csv``.
        checks: the checks, each a record with ``to_dict()`` or a plain dict with ``name`` and
            ``passed``, ``checks.json``.
        figures: PNG bytes by file name.
        files: further JSON documents by file name (e.g. theory's ``verify.json``).
        timings: wall seconds by component, added to the manifest's ``timings_s``.
        extra: further manifest fields (e.g. the battery's studies).
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    checks: list[Any] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def check_dicts(self) -> list[dict[str, Any]]:
        """The checks as ``checks.json`` stores them."""
        return [c.to_dict() if hasattr(c, "to_dict") else jsonable(dict(c)) for c in self.checks]


def write_run(
    out: str | Path,
    *,
    kind: str,
    config: Any,
    produce: Callable[[], RunOutput],
    seeds: Mapping[str, int],
    quick: bool,
    device: str = "cpu",
    dtype: str = "float64",
    timer_name: str = "run",
) -> Path:
    """Run ``produce()`` and write its run directory ``out`` atomically; returns ``out``.

    ``out`` passes the one output-path check first (new, empty, or a run of this ``kind``,
    which is replaced; a run of another kind is an
    :class:`~tangentlab.errors.OutputPathError` before anything runs). ``produce`` runs with
    single-threaded BLAS/torch (the same numbers on any machine), timed as ``timer_name``.
    Writes ``results.csv``, ``checks.json``, the figures, the named JSON files and
    ``manifest.json`` (see the module docstring); a failure leaves ``out`` as it was.
    """
    from tangentlab._runtime import single_thread
    from tangentlab.runs import (
        CHECKS_NAME,
        RESULTS_NAME,
        atomic_directory,
        atomic_write_bytes,
        atomic_write_json,
        build_manifest,
        write_manifest,
        write_results,
    )

    out = Path(out)
    start = time.perf_counter()
    with atomic_directory(out, kind=kind) as tmp:  # the output-path check, then a temporary name
        with single_thread():
            result = produce()
        checks = result.check_dicts()
        write_results(result.rows, tmp / RESULTS_NAME)
        atomic_write_json(tmp / CHECKS_NAME, checks)
        for name, png in result.figures.items():
            atomic_write_bytes(tmp / name, png)
        for name, doc in result.files.items():
            atomic_write_json(tmp / name, doc)
        timings = {**result.timings, timer_name: time.perf_counter() - start}
        manifest = build_manifest(
            kind=kind, config=config, seeds=seeds, device=device, dtype=dtype, timings=timings,
            extra={"quick": bool(quick), "figures": sorted(result.figures),
                   "checks_passed": sum(bool(c["passed"]) for c in checks),
                   "checks_total": len(checks), **result.extra},
        )
        write_manifest(tmp, manifest)
    return out


def read_checks(run_dir: str | Path, *, fields: Mapping[str, type] | None = None,
                optional: Mapping[str, type] | None = None,
                hint: str = "rerun the command that wrote it") -> list[dict[str, Any]]:
    """The checks of a run directory (``checks.json``), each checked for its fields.

    Every check must be an object with ``name`` (string) and ``passed`` (boolean), plus the
    given ``fields``; a file that is missing, not a list, or holds a check without them is a
    :class:`~tangentlab.errors.DataError` naming the file and the field.
    """
    from tangentlab.readers import check_fields, read_json
    from tangentlab.runs import CHECKS_NAME

    path = Path(run_dir) / CHECKS_NAME
    checks = read_json(path, expect=list, hint=hint)
    need = {"name": str, "passed": bool, **dict(fields or {})}
    for i, c in enumerate(checks):
        check_fields(c, where=f"check {i} of {str(path)!r}", hint=hint, fields=need,
                     optional=dict(optional or {}))
    return checks


def failed_checks(run_dir: str | Path) -> list[str]:
    """The names of a run directory's checks that failed (DataError as :func:`read_checks`)."""
    return [str(c["name"]) for c in read_checks(run_dir) if not c["passed"]]


def run_passed(run_dir: str | Path) -> bool:
    """Whether every check of a run directory passed: the one source of a CLI's exit code.

    A run with no checks has passed nothing and is not a pass. Raises a DataError as
    :func:`read_checks` does.
    """
    return bool(read_checks(run_dir)) and not failed_checks(run_dir)


def check_run(out: str | Path, *, kind: str | None = None, manifest: bool = True,
              rows: bool = True, checks: bool = False, needs: tuple[str, ...] = ()) -> None:
    """Raise a DataError unless ``out`` holds what a producer writes (the stages' one check).

    With ``manifest``, its ``manifest.json`` must be readable (of ``kind``, when given); its
    ``checks.json`` must be readable when present (and hold at least one check with ``checks``);
    with ``rows``, its ``results.csv`` must have at least one row. Each glob pattern of ``needs``
    (relative to ``out``, or to its folder when ``out`` is a file) must match a non-empty file.
    """
    from tangentlab.errors import DataError
    from tangentlab.runs import CHECKS_NAME, read_manifest, read_results

    out = Path(out)
    if manifest:
        found = read_manifest(out).get("kind")
        if kind is not None and found != kind:
            raise DataError(f"{str(out)!r} holds a {found!r} run, not a {kind!r} run")
    if (out / CHECKS_NAME).is_file() or checks:
        if not read_checks(out) and checks:
            raise DataError(f"{str(out / CHECKS_NAME)!r} lists no check")
    if rows and len(read_results(out)) == 0:
        raise DataError(f"{out}/results.csv has no rows")
    base = out if out.is_dir() else out.parent
    for pattern in needs:
        if not any(p.is_file() and p.stat().st_size > 0 for p in base.glob(pattern)):
            raise DataError(f"{str(base)!r} holds no {pattern} (or only empty ones); rerun the "
                            "stage that writes it")

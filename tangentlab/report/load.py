"""Read a reproduce run directory: stage records, results tables, checks and provenance.

The report reads *only* what the stages stored (never recomputes): ``manifest.json`` (stage
records), each stage's ``results.csv``, ``checks.json`` and ``manifest.json``, and
``theory/verify.json``.

External measurement runs (``tangentlab empirical measure`` outputs: ``results.csv`` and
``manifest.json``) join the report as pseudo-stages ``external/<NAME>``: given on the command line
(``tangentlab report RUN --measure NAME=DIR``) or listed in the run's recorded config under
``external_measures`` (a table ``{NAME = "DIR"}`` or a list of ``"NAME=DIR"``). A relative DIR is
read relative to the run directory.

A ``validate/`` directory (``results.csv`` + ``checks.json`` of ``tangentlab validate``) is read
when the run has a ``validate`` stage record, or holds the directory without one. The end-to-end
validation run (``tangentlab validate --end-to-end``) is read from :data:`END_TO_END_DIR` inside
the run directory, or from the directory given as ``validation`` (``tangentlab report RUN
--validation DIR``); the prediction rows are gated on it (:mod:`tangentlab.report.gating`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tangentlab.contract import END_TO_END_DIR, THEORY, VALIDATE
from tangentlab.errors import DataError
from tangentlab.readers import read_json
from tangentlab.runs import (
    CHECKS_NAME,
    MANIFEST_NAME,
    RESULTS_NAME,
    VERIFY_NAME,
    StageRecord,
    read_manifest,
    read_results,
    read_stage_records,
)

__all__ = ["Source", "RunData", "EXTERNAL_PREFIX", "VALIDATE_STAGE", "END_TO_END_DIR",
           "parse_measure_args"]

#: Stage-name prefix of the external measurement runs added to a report.
EXTERNAL_PREFIX = "external/"
#: The validation battery's stage (and directory) name (the pipeline's, :mod:`tangentlab.contract`).
VALIDATE_STAGE = VALIDATE


def parse_measure_args(items) -> dict[str, Path]:
    """``["NAME=DIR", ...]`` (or a ``{NAME: DIR}`` table) to ``{NAME.

    Path(DIR)}``; a DataError names the malformed entry.
    """
    if items is None:
        return {}
    if isinstance(items, dict):
        pairs = [(str(k), str(v)) for k, v in items.items()]
    elif isinstance(items, (list, tuple)):
        pairs = []
        for item in items:
            if not isinstance(item, str) or "=" not in item:
                raise DataError(f"external measure {item!r} must look like NAME=DIR "
                                "(e.g. pythia-160m=runs/pythia)")
            name, d = item.split("=", 1)
            pairs.append((name.strip(), d.strip()))
    else:
        raise DataError(f"external_measures must be a table NAME = DIR or a list of 'NAME=DIR'; "
                        f"got {type(items).__name__}")
    out: dict[str, Path] = {}
    for name, d in pairs:
        if not name or not d or "/" in name:
            raise DataError(f"external measure {name}={d!r}: NAME must be a non-empty word without "
                            "'/' and DIR a measurement run directory")
        if name in out:
            raise DataError(f"external measure {name!r} is given twice; give each NAME once")
        out[name] = Path(d)
    return out


@dataclass(frozen=True)
class Source:
    """Where a number comes from.

    Attributes:
        stage: the stage name (``"synthetic/visibility"``).
        path: the stage's output directory, relative to the run directory (and to the report).
        config_hash: the config hash recorded in that directory's manifest (else the stage's).
        seed: the seed recorded there, if any.
        present: whether the directory exists (a stage that never ran has none).
    """

    stage: str
    path: str
    config_hash: str | None = None
    seed: int | None = None
    present: bool = True

    @property
    def external(self) -> bool:
        """Whether this is an external measurement run (``external/NAME``)."""
        return self.stage.startswith(EXTERNAL_PREFIX)

    @property
    def name(self) -> str:
        """The name a reader sees.

        ``external/NAME`` for an external run (never its path), else the stage's output directory
        relative to the run.
        """
        return self.stage if self.external else self.path

    def label(self) -> str:
        """The name shown for this source (the stage, or ``external/NAME``)."""
        parts = [self.name]
        if self.config_hash:
            parts.append(f"config {self.config_hash}")
        if self.seed is not None:
            parts.append(f"seed {self.seed}")
        return ", ".join(parts)


#: What to do about a damaged run file the report reads.
_REDO = "restore it or re-run the stage that wrote it"


def _first_seed(seeds: Any) -> int | None:
    if isinstance(seeds, dict):
        for key in ("seed", *sorted(seeds)):
            v = seeds.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        return seeds
    return None


@dataclass
class RunData:
    """Lazy, cached access to everything stored in a reproduce run directory."""

    run_dir: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    records: dict[str, StageRecord] = field(default_factory=dict)
    externals: dict[str, Path] = field(default_factory=dict)
    #: Whether external measurement runs join our own verdicts (``--pool``); by default they
    #: are shown apart and never change them.
    pool: bool = False
    #: An end-to-end validation run to read instead of the run's own :data:`END_TO_END_DIR`.
    validation: Path | None = None
    #: Gate the prediction rows on the end-to-end validation (set by :meth:`open`; a RunData
    #: built in code, as the end-to-end battery builds one to decide, keeps the raw verdicts).
    gate: bool = False
    _tables: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, run_dir: str | Path, *, measures: dict[str, str | Path] | None = None,
             pool: bool = False, validation: str | Path | None = None) -> RunData:
        """Open ``run_dir``; it must hold a reproduce ``manifest.json``.

        Args:
            run_dir: the run directory.
            measures: external measurement runs ``{NAME: DIR}``, added to those the run's config
                lists under ``external_measures`` (a NAME given here wins).
            pool: judge the empirical rows by our own runs *and* the external ones together
                (default: external runs get their own sub-tables and panels, and the verdicts
                are our own runs' alone).
            validation: an end-to-end validation run directory to gate the prediction rows on
                (default: the run's own :data:`END_TO_END_DIR`, if it has one). DataError if it
                is not an end-to-end run.
        """
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            raise DataError(f"run directory {str(run_dir)!r} does not exist; pass the directory "
                            "that `tangentlab reproduce` wrote (e.g. runs/latest)")
        manifest = read_manifest(run_dir)
        if manifest.get("kind") != "reproduce":
            raise DataError(f"{str(run_dir)!r} holds a {manifest.get('kind')!r} run; "
                            "`tangentlab report` renders reproduce run directories")
        cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
        externals = parse_measure_args(cfg.get("external_measures"))
        externals.update({k: Path(v) for k, v in (measures or {}).items()})
        resolved: dict[str, Path] = {}
        for name, d in externals.items():
            d = d if d.is_absolute() else run_dir / d
            if not (d / RESULTS_NAME).is_file():
                raise DataError(f"external measure {name}={str(d)!r} holds no {RESULTS_NAME}; pass a "
                                "directory written by `tangentlab empirical measure`")
            resolved[name] = d
        data = cls(run_dir=run_dir, manifest=manifest, records=read_stage_records(run_dir),
                   externals=resolved, pool=bool(pool),
                   validation=Path(validation) if validation is not None else None, gate=True)
        data.end_to_end()  # a --validation DIR that is not an end-to-end run fails here
        return data

    def end_to_end(self):
        """The end-to-end validation run (:class:`~tangentlab.report.gating.EndToEnd`), or None.

        Read from ``validation`` when given, else from the run's :data:`END_TO_END_DIR` when it
        exists; None when there is none. Cached. DataError when the directory is not an
        end-to-end validation run.
        """
        from tangentlab.report.gating import read_end_to_end

        if "end-to-end" not in self._tables:
            path = self.validation if self.validation is not None else self.run_dir / END_TO_END_DIR
            given = self.validation is not None
            self._tables["end-to-end"] = (read_end_to_end(path) if given or path.is_dir()
                                          else None)
        return self._tables["end-to-end"]

    # ---------------------------------------------------------------- stages
    def external_stages(self) -> list[str]:
        """The pseudo-stages of the external measurement runs, in the order given."""
        return [EXTERNAL_PREFIX + name for name in self.externals]

    def _external(self, stage: str) -> Path | None:
        if stage.startswith(EXTERNAL_PREFIX):
            return self.externals.get(stage[len(EXTERNAL_PREFIX):])
        return None

    def status(self, stage: str) -> str:
        """``done``, ``failed``, ``skipped``, ``running`` or ``not run`` (no record).

        An external measurement run is ``done`` (it was checked on open). A ``validate/``
        directory with its checks and no stage record counts as ``done``.
        """
        if self._external(stage) is not None:
            return "done"
        rec = self.records.get(stage)
        if rec is None and stage == VALIDATE_STAGE and (self.run_dir / stage / CHECKS_NAME).is_file():
            return "done"
        return rec.status if rec is not None else "not run"

    def stage_dir(self, stage: str) -> Path:
        """The folder of ``stage`` (an external measurement's own folder for ``external/NAME``)."""
        ext = self._external(stage)
        if ext is not None:
            return ext
        rec = self.records.get(stage)
        rel = rec.outputs[0] if rec is not None and rec.outputs else stage
        return self.run_dir / rel

    def source(self, stage: str) -> Source:
        """The provenance of a stage's numbers: path, config hash and seed."""
        rec = self.records.get(stage)
        d = self.stage_dir(stage)
        config_hash = rec.config_hash if rec is not None else None
        seed = _first_seed(self.manifest.get("seeds"))
        if (d / MANIFEST_NAME).is_file():
            try:
                m = json.loads((d / MANIFEST_NAME).read_text())
                config_hash = m.get("config_hash") or config_hash
                s = _first_seed(m.get("seeds"))
                seed = s if s is not None else seed
            except (OSError, json.JSONDecodeError):
                pass
        try:
            path = str(d.relative_to(self.run_dir))
        except ValueError:  # an external measurement run outside the run directory
            path = str(d.resolve())
        return Source(stage=stage, path=path, config_hash=config_hash, seed=seed, present=d.is_dir())

    def problem(self, stage: str) -> str | None:
        """None if the stage is done, else a sentence saying why its numbers are missing."""
        if self.status(stage) == "done":
            return None
        rec = self.records.get(stage)
        if rec is None:
            return f"stage {stage} was not run"
        if rec.status == "failed":
            return f"stage {stage} failed: {rec.error}"
        if rec.status == "skipped":
            return f"stage {stage} was skipped: {rec.reason}"
        return f"stage {stage} did not finish (status {rec.status})"

    # ---------------------------------------------------------------- stored outputs
    def results(self, stage: str):
        """The stage's ``results.csv`` as a DataFrame (cached).

        DataError if it is absent, or if a numeric column holds text (the error names the file,
        the column and the first bad row; see :func:`tangentlab.report.inputs.check_results`).
        """
        from tangentlab.report.inputs import check_results

        if stage not in self._tables:
            path = self.stage_dir(stage) / RESULTS_NAME
            self._tables[stage] = check_results(read_results(path), path)
        return self._tables[stage]

    def check_tables(self) -> None:
        """Read (and so check) the ``results.csv`` of every done stage that has one.

        A damaged table is a DataError naming the file, the column and the first bad row, before
        any verdict is built (never a verdict silently moved by unreadable numbers).
        """
        for stage in [*self.records, *self.external_stages()]:
            if self.status(stage) == "done" and (self.stage_dir(stage) / RESULTS_NAME).is_file():
                self.results(stage)

    def table(self, stage: str):
        """The stage's results as a :class:`~tangentlab.report.tables.ResultTable` (cached)."""
        from tangentlab.report.tables import ResultTable

        key = "table:" + stage
        if key not in self._tables:
            self._tables[key] = ResultTable(self.results(stage))
        return self._tables[key]

    def stage_manifest(self, stage: str) -> dict[str, Any]:
        """The ``manifest.json`` of ``stage`` (empty when it has none)."""
        return read_manifest(self.stage_dir(stage))

    def stage_manifest_or_empty(self, stage: str) -> dict[str, Any]:
        """The stage's ``manifest.json``, or ``{}`` when it has none (old or foreign runs)."""
        try:
            m = self.stage_manifest(stage)
        except DataError:
            return {}
        return m if isinstance(m, dict) else {}

    def checks(self, stage: str) -> list[dict[str, Any]]:
        """The stage's ``checks.json`` (a list of check dicts); empty if it wrote none."""
        path = self.stage_dir(stage) / CHECKS_NAME
        if not path.is_file():
            return []
        data = read_json(path, expect=object, hint=_REDO)
        if isinstance(data, dict) and isinstance(data.get("checks"), list):
            data = data["checks"]
        if not isinstance(data, list) or not all(isinstance(c, dict) for c in data):
            raise DataError(f"{path} is not a list of checks (each an object with name, passed, "
                            "...); re-run the stage that wrote it")
        return [dict(c) for c in data]

    def theory(self) -> dict[str, Any]:
        """``theory/verify.json``."""
        path = self.stage_dir(THEORY) / VERIFY_NAME
        if not path.is_file():
            raise DataError(f"{path} is missing")
        return read_json(path, fields={"derivations": list},
                         hint="it holds each derivation's verify() report: re-run the theory "
                              "stage (`tangentlab reproduce --resume` after deleting it)")

    def figures(self, stage: str) -> list[Path]:
        """PNG figures the stage stored (sorted)."""
        d = self.stage_dir(stage)
        return sorted(d.glob("*.png")) if d.is_dir() else []


"""Open a reproduce run directory once, into plain data: the one place the report reads a run.

:meth:`RunData.open` (or a :class:`RunData` built in code, as the end-to-end battery builds one)
reads *only* what the stages stored (never recomputes), all of it up front: ``manifest.json``
(stage records), and for each stage (:class:`Stage`) its status, provenance (:class:`Source`),
``manifest.json``, checked ``results.csv``, ``checks.json``, stored PNGs and ``bridge.csv``, the
theory stage's ``verify.json``, and the end-to-end validation run. The verdict builders, the
gate, the pages and the summary then read these records and never the run directory (a figure a
stage stored is referenced by its path). A file that cannot be read is kept as the error it
raised, and raised where a row reads it, so one damaged file costs that row only.

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

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tangentlab.contract import END_TO_END_DIR, THEORY, VALIDATE, measure_stage, synthetic_stage
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

__all__ = ["Source", "Stage", "Stages", "RunData", "EXTERNAL_PREFIX", "VALIDATE_STAGE",
           "END_TO_END_DIR", "BRIDGE_FILE", "NOT_RUN_FILE", "parse_measure_args"]

#: Stage-name prefix of the external measurement runs added to a report.
EXTERNAL_PREFIX = "external/"
#: The validation battery's stage (and directory) name (the pipeline's, :mod:`tangentlab.contract`).
VALIDATE_STAGE = VALIDATE
#: A measurement's theory-against-measurement table (``tangentlab.empirical.bridge.run``).
BRIDGE_FILE = "bridge.csv"
#: Written by the optional pretrained stage when it could not run (``empirical.bridge.pretrained``).
NOT_RUN_FILE = "not_run.json"


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


def _or_error(read, *args, **kw) -> Any:
    """``read(*args, **kw)``, or the DataError it raised (raised again where it is read)."""
    try:
        return read(*args, **kw)
    except DataError as exc:
        return exc


def _value(x: Any) -> Any:
    if isinstance(x, DataError):
        raise x
    return x


@dataclass(frozen=True)
class Stage:
    """One stage of an opened run, read once (plain data; no method reads a file).

    Attributes:
        name: the stage (``measure/decoder``, ``external/NAME``).
        status: ``done``, ``failed``, ``skipped``, ``running`` or ``not run`` (no record).
            An external measurement run is ``done`` (it was checked on open), and so is a
            ``validate/`` directory holding checks without a stage record.
        problem: None if done, else a sentence saying why its numbers are missing.
        source: the provenance of its numbers.
        folder: its output folder (named in messages; None for a stage the run has no trace of).
        manifest: its ``manifest.json`` (``{}`` when it has none or it cannot be read).
        figures: the PNGs it stored (sorted; a done stage's only).
        has_results: whether it stored a ``results.csv`` (read into :attr:`results` when done).
        bridge: the rows of its ``bridge.csv`` (None when it has none; done stages only).
        not_run: why it wrote no ``bridge.csv``, from its ``not_run.json`` (None: no such file).
    """

    name: str
    status: str
    problem: str | None
    source: Source
    folder: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    figures: tuple[Path, ...] = ()
    bridge: tuple[dict[str, str], ...] | None = None
    not_run: str | None = None
    has_results: bool = False
    _results: Any = field(default=None, repr=False, compare=False)
    _checks: Any = field(default=(), repr=False, compare=False)
    _verify: Any = field(default=None, repr=False, compare=False)

    @property
    def done(self) -> bool:
        """Whether the stage finished (only a done stage's numbers are read)."""
        return self.status == "done"

    @property
    def external(self) -> bool:
        """Whether this is an external measurement run (``external/NAME``)."""
        return self.name.startswith(EXTERNAL_PREFIX)

    @property
    def results(self):
        """The checked ``results.csv`` as a DataFrame; DataError if it is missing or damaged."""
        return _value(self._results)

    @cached_property
    def table(self):
        """The results as a :class:`~tangentlab.report.tables.ResultTable` (built once)."""
        from tangentlab.report.tables import ResultTable

        return ResultTable(self.results)

    @property
    def checks(self) -> list[dict[str, Any]]:
        """Its ``checks.json`` (a list of check dicts; empty if it wrote none); DataError if damaged."""
        return [dict(c) for c in _value(self._checks)]

    @property
    def verify(self) -> dict[str, Any]:
        """The theory stage's ``verify.json``; DataError if it is missing or damaged."""
        return _value(self._verify)


def _read_checks(path: Path) -> tuple[dict[str, Any], ...]:
    if not path.is_file():
        return ()
    data = read_json(path, expect=object, hint=_REDO)
    if isinstance(data, dict) and isinstance(data.get("checks"), list):
        data = data["checks"]
    if not isinstance(data, list) or not all(isinstance(c, dict) for c in data):
        raise DataError(f"{path} is not a list of checks (each an object with name, passed, "
                        "...); re-run the stage that wrote it")
    return tuple(data)


def _read_verify(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DataError(f"{path} is missing")
    return read_json(path, fields={"derivations": list},
                     hint="it holds each derivation's verify() report: re-run the theory "
                          "stage (`tangentlab reproduce --resume` after deleting it)")


def _read_bridge(folder: Path) -> tuple[tuple[dict[str, str], ...] | None, str | None]:
    path, not_run = folder / BRIDGE_FILE, folder / NOT_RUN_FILE
    if path.is_file():
        with path.open(newline="") as fh:
            return tuple(csv.DictReader(fh)), None
    if not not_run.is_file():
        return None, None
    try:
        return None, str(json.loads(not_run.read_text()).get("reason", "not run"))
    except (OSError, ValueError, AttributeError):
        return None, "not run"


def _read_stage(name: str, folder: Path, rel: str, status: str, problem: str | None,
                config_hash: str | None, seed: int | None, strict: bool) -> Stage:
    """Everything the report reads of one stage's ``folder`` (``rel``: its path as shown).

    ``strict``: a damaged ``results.csv`` raises here (else where a row reads it).
    """
    from tangentlab.report.inputs import check_results

    raw: dict[str, Any] = {}
    if (folder / MANIFEST_NAME).is_file():
        try:
            raw = json.loads((folder / MANIFEST_NAME).read_text())
            config_hash = raw.get("config_hash") or config_hash
            s = _first_seed(raw.get("seeds"))
            seed = s if s is not None else seed
        except (OSError, json.JSONDecodeError):
            pass
    source = Source(stage=name, path=rel, config_hash=config_hash, seed=seed,
                    present=folder.is_dir())
    if status != "done":
        return Stage(name, status, problem, source, folder)
    manifest = _or_error(read_manifest, folder)
    path = folder / RESULTS_NAME
    results = _or_error(lambda: check_results(read_results(path), path))
    if strict and isinstance(results, DataError) and path.is_file():
        raise results  # a damaged table stops the report before any verdict is built
    bridge, not_run = _read_bridge(folder)
    return Stage(name, status, problem, source, folder,
                 manifest=manifest if isinstance(manifest, dict) else {},
                 figures=tuple(sorted(folder.glob("*.png"))) if folder.is_dir() else (),
                 bridge=bridge, not_run=not_run, has_results=path.is_file(), _results=results,
                 _checks=_or_error(_read_checks, folder / CHECKS_NAME),
                 _verify=_or_error(_read_verify, folder / VERIFY_NAME) if name == THEORY else None)


class Stages(dict):
    """The stages of an opened run by name (:class:`Stage`).

    A name the run has no trace of reads as a stage that was not run, its folder absent.
    """

    seed: int | None = None

    def __missing__(self, name: str) -> Stage:
        return Stage(name, "not run", f"stage {name} was not run",
                     Source(stage=name, path=name, seed=self.seed, present=False))


def _problem(name: str, status: str, rec: StageRecord | None) -> str | None:
    if status == "done":
        return None
    if rec is None:
        return f"stage {name} was not run"
    if rec.status == "failed":
        return f"stage {name} failed: {rec.error}"
    if rec.status == "skipped":
        return f"stage {name} was skipped: {rec.reason}"
    return f"stage {name} did not finish (status {rec.status})"


@dataclass
class RunData:
    """A reproduce run directory, read once on construction into :attr:`stages` (plain data).

    Build it with :meth:`open`, or in code from stage records (the end-to-end battery does:
    ``RunData(run_dir=..., manifest={"kind": "reproduce"}, records=...)``).
    """

    run_dir: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    records: dict[str, StageRecord] = field(default_factory=dict)
    externals: dict[str, Path] = field(default_factory=dict)
    #: Whether external measurement runs join our own verdicts (``--pool``); by default they
    #: are shown apart and never change them.
    pool: bool = False
    #: An end-to-end validation run to read instead of the run's own :data:`END_TO_END_DIR`.
    validation: Path | None = None
    #: Certificate files that may validate a prediction row (None: the ones that ship with the
    #: package, :func:`tangentlab.claims.certificates.shipped_certificates`).
    certificates: tuple[Path, ...] | None = None
    #: Gate the prediction rows on the end-to-end validation (set by :meth:`open`; a RunData
    #: built in code, as the end-to-end battery builds one to decide, keeps the raw verdicts).
    #: An opened run also checks every recorded stage's ``results.csv`` up front: a damaged
    #: table is a DataError before any verdict is built (in code, where a row reads it).
    gate: bool = False
    #: Every stage the run has a trace of (records, external runs, the folders of the stages a
    #: row reads by default), read on construction.
    stages: Stages = field(init=False, repr=False)
    #: The end-to-end validation run (:class:`~tangentlab.report.gating.EndToEnd`) the rows are
    #: gated on, or None (none, or not gated).
    end_to_end: Any = field(init=False, repr=False)
    #: The certificates read from :attr:`certificates`
    #: (:class:`~tangentlab.report.gating.EndToEnd` each; empty when not gated).
    certificates_read: list[Any] = field(init=False, repr=False)
    #: The recorded stages, then the external runs' pseudo-stages ``external/NAME`` (what the
    #: rows choose their stages from).
    names: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from tangentlab.claims.certificates import shipped_certificates
        from tangentlab.report.gating import read_certificate_evidence, read_end_to_end

        run_dir = self.run_dir = Path(self.run_dir)
        self.names = [*self.records, *(EXTERNAL_PREFIX + name for name in self.externals)]
        seed = _first_seed(self.manifest.get("seeds"))
        folders = {name: run_dir / (rec.outputs[0] if rec.outputs else name)
                   for name, rec in self.records.items()}
        folders.update({EXTERNAL_PREFIX + name: d for name, d in self.externals.items()})
        synthetic = run_dir / synthetic_stage("")
        defaults = [THEORY, VALIDATE, measure_stage("encoder"), measure_stage("decoder"),
                    *(synthetic_stage(p.name) for p in (sorted(synthetic.iterdir())
                                                        if synthetic.is_dir() else ()))]
        for name in defaults:
            folders.setdefault(name, run_dir / name)
        self.stages = Stages()
        self.stages.seed = seed
        for name, folder in folders.items():
            rec = self.records.get(name)
            if name.startswith(EXTERNAL_PREFIX):
                status = "done"
            elif rec is None and name == VALIDATE and (folder / CHECKS_NAME).is_file():
                status = "done"
            else:
                status = rec.status if rec is not None else "not run"
            try:
                rel = str(folder.relative_to(run_dir))
            except ValueError:  # an external measurement run outside the run directory
                rel = str(folder.resolve())
            self.stages[name] = _read_stage(
                name, folder, rel, status, _problem(name, status, rec),
                rec.config_hash if rec is not None else None, seed,
                strict=self.gate and (rec is not None or name.startswith(EXTERNAL_PREFIX)))
        e2e = self.validation if self.validation is not None else run_dir / END_TO_END_DIR
        self.end_to_end = (read_end_to_end(e2e) if self.gate and (self.validation is not None
                                                                   or e2e.is_dir()) else None)
        files = shipped_certificates() if self.certificates is None else self.certificates
        self.certificates_read = ([self._spot_checked(read_certificate_evidence(f))
                                   for f in files] if self.gate else [])

    def _spot_checked(self, cert: Any) -> Any:
        """``cert``, or read as stale when this run's validate stage re-ran its simulations.

        Stale when a re-run simulation's statuses did not come back identical
        (:mod:`tangentlab.validate.stage`).
        """
        from dataclasses import replace

        st = self.stages.get(VALIDATE)
        try:
            checks = st.checks if st is not None and st.done else []
        except DataError:  # a damaged checks.json is named by the validation row itself
            checks = []
        failed = [c.get("name", "?") for c in checks if c.get("kind") == "certificate spot check"
                  and c.get("certificate") == cert.path.name and not c.get("passed")]
        if not failed:
            return cert
        return replace(cert, stale=(*cert.stale, f"its simulations did not come back identical "
                                                 f"in this run's validate stage ({failed[0]})"))

    @classmethod
    def open(cls, run_dir: str | Path, *, measures: dict[str, str | Path] | None = None,
             pool: bool = False, validation: str | Path | None = None,
             certificates: Sequence[str | Path] | None = None) -> RunData:
        """Open ``run_dir``; it must hold a reproduce ``manifest.json``.

        Args:
            run_dir: the run directory.
            measures: external measurement runs ``{NAME: DIR}``, added to those the run's config
                lists under ``external_measures`` (a NAME given here wins).
            pool: judge the empirical rows by our own runs *and* the external ones together
                (default: external runs get their own sub-tables and panels, and the verdicts
                are our own runs' alone).
            validation: an end-to-end validation run directory to gate the prediction rows on
                (default: the run's own :data:`END_TO_END_DIR`, if it has one).
            certificates: certificate files that may validate a prediction row the end-to-end
                run does not (default: the ones that ship with the package).

        Raises:
            DataError: the run, an external run or a stored table is missing or damaged, or
                ``validation`` is not an end-to-end run.
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
        return cls(run_dir=run_dir, manifest=manifest, records=read_stage_records(run_dir),
                   externals=resolved, pool=bool(pool),
                   validation=Path(validation) if validation is not None else None,
                   certificates=(tuple(Path(c) for c in certificates)
                                 if certificates is not None else None), gate=True)

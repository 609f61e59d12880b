"""``tangentlab validate merge DIR... --out OUT``: one end-to-end run from its shards.

The inputs are finished end-to-end directories holding records
(:mod:`tangentlab.validate.end_to_end_records`): the shards of one run (``--shard K/N``), or
any finished runs that together hold each simulation once, and any extensions of it
(``--extend``: more simulations of the scenarios in which a row got a wrong status). They must
share the settings fingerprint (config hash and git commit); together they must hold every
simulation of the config and of every extension exactly once (a merged run can be merged again
with a further extension). ``OUT`` then receives a settings file (``shard`` null,
``merged_from`` the inputs), a copy of every record and the summary a one-process run writes
(:func:`~tangentlab.validate.end_to_end.write_summary`, records in job order), so that its
``results.csv``, ``checks.json`` and ``statuses.csv`` are those of the one-process run, byte
for byte.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError, DataError

__all__ = ["merge_end_to_end", "wrong_statuses", "scenarios_to_extend"]


def _read_inputs(dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """Each input's settings, read and compared.

    DataError for an input that is no finished end-to-end directory; ConfigError when two differ
    in their fingerprint (naming both and the field).
    """
    from tangentlab.runs import MANIFEST_NAME
    from tangentlab.validate.end_to_end_records import (
        is_end_to_end_dir,
        read_settings,
        settings_mismatch,
        state_text,
    )

    if not dirs:
        raise ConfigError("merge needs at least one directory to merge")
    if len({d.resolve() for d in dirs}) != len(dirs):
        raise ConfigError("merge was given the same directory twice; give each shard once")
    settings = []
    for d in dirs:
        if not is_end_to_end_dir(d):
            raise DataError(f"{str(d)!r} is not an end-to-end run directory with simulation "
                            "records; pass directories written by `tangentlab validate "
                            "--end-to-end [--shard K/N]`")
        s = read_settings(d)
        if not (d / MANIFEST_NAME).is_file():
            raise DataError(f"{str(d)!r} holds an end-to-end run that is not finished "
                            f"({state_text(d, s)}); finish it by rerunning its command with "
                            "--resume, then merge")
        settings.append(s)
    for d, s in zip(dirs[1:], settings[1:]):
        why = settings_mismatch(settings[0], s)
        if why is not None:
            raise ConfigError(f"cannot merge {str(dirs[0])!r} and {str(d)!r}: they differ in "
                              f"{why}")
    return settings


def _gather(dirs: Sequence[Path], wanted: list[tuple[str, int]]) -> dict[tuple[str, int], Path]:
    """(scenario, sim) → the directory (one of ``dirs``) whose record holds it.

    DataError for a simulation found in two directories, one that is not a simulation of the
    config, or simulations that none holds (naming the first few and how many).
    """
    from tangentlab.validate.end_to_end_records import find_records

    known = set(wanted)
    owner: dict[tuple[str, int], Path] = {}
    for d in dirs:
        for key, path in find_records(d).items():
            if key not in known:
                raise DataError(f"{str(path)!r} records {key[0]} #{key[1]}, which is not a "
                                "simulation of the run's config")
            if key in owner:
                raise DataError(f"simulation {key[0]} #{key[1]} is recorded twice, in "
                                f"{str(owner[key])!r} and {str(d)!r}; merge each shard once")
            owner[key] = d
    missing = [k for k in wanted if k not in owner]
    if missing:
        shown = ", ".join(f"{n} #{s}" for n, s in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise DataError(f"{len(missing)} of {len(wanted)} simulations are in none of the "
                        f"directories: {shown}{more}; run or resume the shard that holds them")
    return owner


def merge_end_to_end(dirs: Sequence[str | Path], out: str | Path) -> tuple[Path, bool]:
    """Assemble the end-to-end directories ``dirs`` into the finished run ``out``.

    Every check happens before ``out`` is created; ``out`` must be new or empty (under its run
    lock). Returns (``out``, every check passed).
    """
    from tangentlab.config import config_from_mapping, config_hash
    from tangentlab.runs import check_output_dir, run_lock
    from tangentlab.validate.end_to_end import END_TO_END_KIND, EndToEndConfig, write_summary
    from tangentlab.validate.end_to_end_config import Extension, merged_jobs
    from tangentlab.validate.end_to_end_records import read_records, write_record, write_settings

    t0 = time.perf_counter()
    paths = [Path(d) for d in dirs]
    settings = _read_inputs(paths)
    cfg = config_from_mapping(EndToEndConfig, settings[0]["config"])
    if config_hash(cfg) != settings[0]["config_hash"]:
        raise DataError(f"{str(paths[0])!r}: its config does not hash to its config_hash; "
                        "it was edited by hand")
    # the extensions the inputs ran, and those an already merged input holds
    exts = [Extension.parse(e) for st in settings
            for e in [*([st["extension"]] if st.get("extension") else []),
                      *(st.get("extensions") or [])]]
    wanted = merged_jobs(cfg, exts)
    owner = _gather(paths, wanted)
    # the settings of a base-run input (not an extension's), whichever order the inputs came in
    base = next((st for st in settings if not st.get("extension")), settings[0])
    merged = {k: v for k, v in base.items() if k != "extension"}
    merged.update({"shard": None, "jobs": len(wanted), "merged_from": [str(p) for p in paths]})
    if exts:
        merged["extensions"] = sorted({str(e) for e in exts})
    out = Path(out)
    check_output_dir(out, kind=END_TO_END_KIND, existing="refuse")
    with run_lock(out, command="validate merge"):
        check_output_dir(out, kind=END_TO_END_KIND, existing="refuse")
        out.mkdir(parents=True, exist_ok=True)
        write_settings(out, merged)
        for d, s in zip(paths, settings):
            keys = [k for k in wanted if owner[k] == d]
            for res in read_records(d, keys, s):  # each checked against its own directory
                write_record(out, res, {**merged, "shard": s.get("shard")})
        results = read_records(out, wanted, merged)
        passed = write_summary(out, cfg, merged, results,
                               timings={"merge": time.perf_counter() - t0},
                               extra={"merged_from": merged["merged_from"],
                                      **({"extensions": merged["extensions"]} if exts else {})})
    return out, passed


def wrong_statuses(run_dir: str | Path) -> dict[str, int]:
    """Scenario → how many (row, simulation) statuses of the finished run ``run_dir`` are wrong.

    Wrong, as the checks count it (:func:`~tangentlab.validate.end_to_end_records.wrong_status`).
    Every scenario of the run is listed (0: none).
    DataError for a directory without a finished end-to-end run's statuses.
    """
    import csv

    from tangentlab.runs import MANIFEST_NAME
    from tangentlab.validate.end_to_end_records import STATUSES_NAME, read_settings, wrong_status
    from tangentlab.validate.planted_scenarios import scenario

    run = Path(run_dir)
    path = run / STATUSES_NAME
    if not (run / MANIFEST_NAME).is_file() or not path.is_file():
        raise DataError(f"{str(run)!r} holds no finished end-to-end run ({STATUSES_NAME} and "
                        f"{MANIFEST_NAME}); extend a run finished by `tangentlab validate "
                        "--end-to-end` or `validate merge`")
    names = read_settings(run)["config"].get("scenarios") or []
    wrong = dict.fromkeys(names, 0)
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r.get("metric") != "status":
                continue
            bad = wrong_status(r["value"], scenario(r["null"]).truth.get(r["row"]))
            wrong[r["null"]] = wrong.get(r["null"], 0) + bad
    return wrong


def scenarios_to_extend(run_dir: str | Path) -> tuple[str, ...]:
    """The scenarios of ``run_dir`` in which any row got a wrong status (issue 35, item 3).

    With 50 simulations and none wrong a rate's upper Wilson bound is 0.071 (<= 0.08); one wrong
    in 50 gives 0.105, so such a (row, null) needs about 200 to show a rate <= 0.05 with its
    bound <= 0.08. In the run's scenario order.
    """
    return tuple(n for n, k in wrong_statuses(run_dir).items() if k)

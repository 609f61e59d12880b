"""The planted twin of a run: an end-to-end setting read from the run's own measure manifests.

``tangentlab validate --end-to-end --like RUN`` (issue 35) measures the planted scenarios at the
setting the run measured at, so that "could this run have seen what it reports?" is answered
at its own checkpoints and data size, not at a preset's. :func:`twin_setting` reads every
measurement of RUN (a reproduce run's ``measure/<arch>/manifest.json``, or one measure
directory) and takes from it:

- the **checkpoint schedule** (the steps measured; every measurement must share it) and the
  early/late fraction, so the late cut falls where the run's does (weakens-late depends on it);
- the **units per row**: the number of (measurement, site) pairs, as the report combines them;
- the eval windows (``n_batches`` × ``batch_size`` × ``seq_len``: the tokens per checkpoint),
  the bootstrap replicates, the interval, the controls (count and pool), the rows sampled for
  the energy test and the causal check's checkpoints, controls and batches;
- **r/d**: the planted width is :data:`TWIN_WIDTH` and the planted rank the nearest to the run's
  rank / hidden size (at least 1; ConfigError where r/d ≥ 1/2, which the planted family cannot
  hold: it needs d ≥ 2m + 1);
- the **architecture of each unit**: a measurement of an encoder is twinned by planted masked-LM
  units (:class:`~tangentlab.validate.planted.PlantedForMaskedLM`: MLM-masked eval batches, the
  loss at the masked positions), a decoder's by causal-LM units, one unit per measured site.

Not twinned yet (stated in :data:`NOT_TWINNED`, and in the run's manifest): the run's tokenizer,
eval text and frequency table (the planted text is a built-in corpus), and effects at the
magnitudes the run measured.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError, DataError

__all__ = ["TWIN_WIDTH", "NOT_TWINNED", "RunSetting", "read_run_setting", "twin_setting"]

#: The planted model's width in a twin (its rank follows the run's r/d).
TWIN_WIDTH = 64
#: What a twin does not copy from the run yet, in words (recorded with the twin's manifest).
NOT_TWINNED = ("tokenizer, eval text and frequency table (a built-in corpus is planted)",
               "effect sizes (the scenarios' stated effects, not the magnitudes the run measured)")
_HINT = ("pass a reproduce run directory (with measure/<arch>/manifest.json) or one measure "
         "directory written by `tangentlab measure`")
#: measure config keys copied into the twin's measure settings (same name on both sides).
_COPIED = ("n_batches", "batch_size", "n_boot", "interval", "n_controls", "control_pool",
           "sample_rows", "causal_checkpoints", "causal_controls", "causal_batches",
           "early_fraction")


@dataclasses.dataclass(frozen=True)
class RunSetting:
    """What a run measured at, as a twin needs it.

    Attributes:
        path: the run directory.
        measures: the measure manifests read (their paths, relative to ``path``).
        steps: the checkpoint steps every measurement shares.
        units: (measurement, site) pairs per row.
        archs: the architecture of each unit (``encoder`` or ``decoder``), in unit order.
        seq_len: the eval window length the run used.
        rank_over_dim: the proxy rank over the hidden size.
        measure: the measure config values copied (:data:`_COPIED`).
    """

    path: Path
    measures: tuple[str, ...]
    steps: tuple[int, ...]
    units: int
    seq_len: int
    rank_over_dim: float
    measure: dict[str, Any]
    archs: tuple[str, ...] = ()


def _manifests(run: Path) -> list[Path]:
    from tangentlab.readers import read_json

    own = run / "manifest.json"
    if own.is_file() and read_json(own, hint=_HINT).get("kind") == "empirical/measure":
        return [own]
    found = sorted(run.glob("measure/*/manifest.json"))
    if not found:
        raise DataError(f"{str(run)!r} holds no measurement to twin; {_HINT}")
    return found


def read_run_setting(run_dir: str | Path) -> RunSetting:
    """The setting every measurement of ``run_dir`` shares (DataError where they differ)."""
    from tangentlab.readers import read_json

    run = Path(run_dir)
    if not run.is_dir():
        raise DataError(f"{str(run)!r} is not a directory; {_HINT}")
    steps: tuple[int, ...] | None = None
    units, seq_lens, rds, copied, archs = 0, set(), set(), None, []
    paths = _manifests(run)
    for p in paths:
        m = read_json(p, fields={"config": dict, "checkpoints": list, "sites": dict,
                                 "hidden_size": int, "seq_len": int, "arch": str}, hint=_HINT)
        if m["arch"] not in ("encoder", "decoder"):
            raise DataError(f"{str(p)!r} records arch {m['arch']!r}; a twin plants an encoder "
                            "or a decoder")
        rank, steps_of = m["config"].get("rank"), [c.get("step") if isinstance(c, dict) else None
                                                    for c in m["checkpoints"]]
        if not isinstance(rank, int) or not all(isinstance(x, int) for x in steps_of):
            raise DataError(f"{str(p)!r} records no integer config rank or checkpoint steps "
                            f"(rank {rank!r}); {_HINT}")
        mine = tuple(steps_of)
        if steps is not None and mine != steps:
            raise DataError(f"the measurements of {str(run)!r} have different checkpoint "
                            f"schedules ({list(steps)} and {list(mine)}); a twin needs one: "
                            "twin each measure directory on its own")
        steps = mine
        units += len(m["sites"])
        archs += [m["arch"]] * len(m["sites"])
        seq_lens.add(int(m["seq_len"]))
        rds.add(rank / int(m["hidden_size"]))
        values = {k: m["config"].get(k) for k in _COPIED}
        if copied is not None and values != copied:
            diff = sorted(k for k in _COPIED if values[k] != copied[k])
            raise DataError(f"the measurements of {str(run)!r} differ in {', '.join(diff)}; a "
                            "twin needs one setting: twin each measure directory on its own")
        copied = values
    if len(seq_lens) != 1 or len(rds) != 1:
        raise DataError(f"the measurements of {str(run)!r} differ in window length or r/d "
                        f"({sorted(seq_lens)}, {sorted(rds)}); twin each on its own")
    return RunSetting(run, tuple(str(p.parent.relative_to(run)) for p in paths), steps or (),
                      units, seq_lens.pop(), rds.pop(), copied or {}, tuple(archs))


def twin_setting(run_dir: str | Path, *, seed: int = 0, sims: int = 50):
    """The :class:`~tangentlab.validate.end_to_end_config.EndToEndConfig` of ``run_dir``'s twin.

    Every scenario, ``sims`` simulations, the run's schedule, units (with each unit's
    architecture), windows, replicates, controls and r/d (module docstring). ConfigError where the run's r/d cannot be planted.
    """
    from tangentlab.validate.end_to_end_config import EndToEndConfig, EndToEndMeasure

    rs = read_run_setting(run_dir)
    m = max(1, round(TWIN_WIDTH * rs.rank_over_dim))
    if 2 * m + 1 > TWIN_WIDTH:
        raise ConfigError(f"the run measures at r/d = {rs.rank_over_dim:.3g}; a planted twin "
                          f"needs r/d < 1/2 (d >= 2m + 1 at d = {TWIN_WIDTH})")
    if len(rs.steps) < 2 or rs.steps[0] != 0:
        raise DataError(f"the run's checkpoints {list(rs.steps)} do not start at step 0 with a "
                        "later one; its twin cannot compare against step 0")
    measure = {k: v for k, v in rs.measure.items() if v is not None}
    measure["seq_len"] = rs.seq_len
    return dataclasses.replace(
        EndToEndConfig.full(seed), sims=sims, units=rs.units, steps=rs.steps,
        planted_d=TWIN_WIDTH, planted_m=m,
        archs=rs.archs if len(set(rs.archs)) > 1 else rs.archs[:1],
        measure=EndToEndMeasure(**{**dataclasses.asdict(EndToEndConfig.full(seed).measure),
                                   **measure}))

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

- with ``effect="run"``, the **enrichment curve at the magnitudes the run measured**
  (:func:`run_effect`): the ``effect`` scenario plants the smallest last-checkpoint enrichment
  of the run's units, the weakest decline from a unit's peak (at least :data:`MIN_DECLINE`), and
  the peak where the units' median peak falls, read through the report's own tables, so the
  enrichment and weakens-late rows' power answers "could this run have seen what it reports?";
  ``effect="smaller"`` halves those excesses over 1 (k → 1 + (k − 1)/2, the decline kept at
  :data:`MIN_DECLINE` or more), the stated smaller size; ``effect="stated"`` (the default) keeps :data:`~tangentlab.validate.planted_scenarios.
  EFFECT`.

Not twinned yet (stated in :data:`NOT_TWINNED`, and in the run's manifest): the run's tokenizer,
eval text and frequency table (the planted text is a built-in corpus), the magnitudes of the
effects other than the enrichment curve (bucket gain, pinning, ablation cost; the learning arms'
effect follows the planted k), and the enrichment at step 0 (1 in a planted trajectory).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tangentlab.errors import ConfigError, DataError

__all__ = ["TWIN_WIDTH", "NOT_TWINNED", "EFFECTS", "MIN_DECLINE", "RunSetting",
           "read_run_setting", "run_effect", "twin_setting"]

#: The planted model's width in a twin (its rank follows the run's r/d).
TWIN_WIDTH = 64
#: What a twin does not copy from the run yet, in words (recorded with the twin's manifest).
NOT_TWINNED = ("tokenizer, eval text and frequency table (a built-in corpus is planted)",
               "effect sizes other than the enrichment curve (bucket gain, pinning and ablation "
               "cost stay at their stated sizes; the learning arms' effect follows the planted "
               "k)",
               "the enrichment at step 0 (1 in every planted trajectory; a trained model's is "
               "often above 1, so comparisons with step 0 are easier in the twin)",
               "an encoder's frequency gain at its masked rows (a masked row is keyed by the mask "
               "token and carries the mean gain, so a masked-LM unit's frequency buckets differ "
               "only through its unmasked rows, a diluted effect)")
#: What a twin's ``effect`` scenario plants: the stated sizes, the run's, or half the run's.
EFFECTS = ("stated", "run", "smaller")
#: The smallest peak-to-last ratio a twin plants (a run whose units show no decline would
#: otherwise plant none, and the weakens-late row's truth in ``effect`` is a decline).
MIN_DECLINE = 1.05
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


def run_effect(run_dir: str | Path) -> dict[str, float]:
    """The enrichment curve the run measured, as the ``effect`` scenario plants it.

    Per unit (measurement, site), the enrichment the report reads
    (:func:`tangentlab.report.units.energy_source`) at every checkpoint: ``k_end`` = the
    smallest unit's last value, ``k_peak`` = ``k_end`` × the weakest unit's peak / last (at
    least :data:`MIN_DECLINE`), ``x_peak`` = the median over units of the peak's step / the
    last step (kept inside (0.05, 0.95)). DataError where no unit stores an enrichment above 1 at
    its last checkpoint (there is no effect to plant at the run's size).
    """
    import statistics

    from tangentlab.readers import read_json
    from tangentlab.report.tables import ResultTable
    from tangentlab.report.units import Model, energy_source

    run = Path(run_dir)
    last, decline, where = [], [], []
    for path in _manifests(run):
        model = Model(path.parent.name, str(path.parent), ResultTable.read(path.parent / "results.csv"),
                      read_json(path, hint=_HINT))
        for site in model.table.sites("enrichment"):
            src = energy_source(model, site)
            curve = [(st, src.table.get(src.enrichment, site=site, step=st).value)
                     for st in src.table.steps(src.enrichment, site)]
            curve = [(st, v) for st, v in curve if v is not None and v == v]
            if len(curve) < 2:
                continue
            (s_peak, peak), (s_last, end) = max(curve, key=lambda c: c[1]), curve[-1]
            last.append(end)
            decline.append(peak / end if end > 0 else float("inf"))
            where.append(s_peak / s_last if s_last > 0 else 0.5)
    if not last or min(last) <= 1.0:
        raise DataError(f"{str(run)!r} measured no enrichment above 1 at its last checkpoint in "
                        f"every unit (smallest {min(last) if last else 'none'}); there is no "
                        "effect to plant at the run's size: use the stated effect")
    k_end = min(last)
    return {"k_end": k_end, "k_peak": k_end * max(MIN_DECLINE, min(decline)),
            "x_peak": min(0.95, max(0.05, statistics.median(where)))}


def twin_setting(run_dir: str | Path, *, seed: int = 0, sims: int = 50, effect: str = "stated"):
    """The :class:`~tangentlab.validate.end_to_end_config.EndToEndConfig` of ``run_dir``'s twin.

    Every scenario, ``sims`` simulations, the run's schedule, units (with each unit's
    architecture), windows, replicates, controls and r/d (module docstring); ``effect``
    (:data:`EFFECTS`) sets the ``effect`` scenario's enrichment curve. ConfigError where the
    run's r/d cannot be planted or ``effect`` is not one of :data:`EFFECTS`.
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
    if effect not in EFFECTS:
        raise ConfigError(f"a twin's effect must be one of {', '.join(EFFECTS)}; got {effect!r}")
    curve = {} if effect == "stated" else run_effect(run_dir)
    if effect == "smaller":  # half the excesses over 1, the decline kept at MIN_DECLINE or more
        end = 1.0 + (curve["k_end"] - 1.0) / 2
        curve = {**curve, "k_end": end,
                 "k_peak": max(1.0 + (curve["k_peak"] - 1.0) / 2, end * MIN_DECLINE)}
    measure = {k: v for k, v in rs.measure.items() if v is not None}
    measure["seq_len"] = rs.seq_len
    return dataclasses.replace(
        EndToEndConfig.full(seed), sims=sims, units=rs.units, steps=rs.steps,
        planted_d=TWIN_WIDTH, planted_m=m,
        archs=rs.archs if len(set(rs.archs)) > 1 else rs.archs[:1],
        **{f"effect_{k}": v for k, v in curve.items()},
        measure=EndToEndMeasure(**{**dataclasses.asdict(EndToEndConfig.full(seed).measure),
                                   **measure}))

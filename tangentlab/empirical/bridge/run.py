"""``bridge.csv``: the theory-against-measurement rows of a measurement run (issue 20).

After the protocol has measured every checkpoint, :func:`write_bridge` picks three phases per
site (:func:`choose_phases`), forwards the fit half of the eval batches once more at those
checkpoints (:func:`~tangentlab.empirical.measurement.collect.collect_fit_half`: the same geometry
occurrences, at most one per document and token, and the same fixed activation sample as the
protocol), runs :func:`~tangentlab.empirical.bridge.site_bridge.site_bridge` on each (site, phase), and writes
one tidy ``bridge.csv`` into the measurement folder (:data:`BRIDGE_NAME`).

Phases (stated rule):

- ``step0``: the checkpoint at step 0 (the first checkpoint when there is none; the note says so);
- ``peak``: the trained checkpoint (step > 0) of the largest ``enrichment`` at the site (bucket
  ``all``, the fixed proxy, the whole space), as the weakens-late rule reads it; for a model
  without an LM head (no enrichment) the largest ``representation_mean_cosine``;
- ``last``: the last checkpoint.

A phase that falls on the same checkpoint as another is measured once and written under each
phase name. Switched by the measure config's ``bridge`` key, bounded by ``bridge_boot`` and
``bridge_tokens``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BRIDGE_NAME", "BRIDGE_COLUMNS", "PHASES", "choose_phases", "maybe_write_bridge", "site_arrays",
           "write_bridge", "write_bridge_csv"]

#: The file name inside the measurement folder.
BRIDGE_NAME = "bridge.csv"
#: Phases, in table order.
PHASES = ("step0", "peak", "last")


def _columns() -> tuple[str, ...]:
    from tangentlab.empirical.bridge.rows import COLUMNS

    return ("model", "arch", "site", "phase", "checkpoint", "step", *COLUMNS)


#: Columns of ``bridge.csv``.
BRIDGE_COLUMNS = _columns()


def _value(row: dict, metric: str, site: str, checkpoint: str) -> float | None:
    if (row.get("metric") != metric or row.get("site") != site or row.get("checkpoint") != checkpoint
            or row.get("bucket", "all") != "all" or row.get("subspace") not in (None, "")
            or row.get("proxy") not in (None, "", "fixed")):
        return None
    try:
        v = float(row.get("value"))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def choose_phases(steps: Sequence[int], names: Sequence[str], rows: Sequence[dict],
                  site: str) -> dict[str, tuple[int, str]]:
    """``{phase: (checkpoint index, note)}`` for one site by the stated rule (module docstring)."""
    out: dict[str, tuple[int, str]] = {}
    zero = [i for i, s in enumerate(steps) if s == 0]
    out["step0"] = (zero[0], "") if zero else (0, f"no step-0 checkpoint: step {steps[0]}")
    trained = [i for i, s in enumerate(steps) if s > 0]
    best, how = None, ""
    for metric in ("enrichment", "representation_mean_cosine"):
        vals = {}
        for i in trained:
            got = [v for r in rows if (v := _value(r, metric, site, names[i])) is not None]
            if got:
                vals[i] = got[0]
        if vals:
            best = max(vals, key=lambda i: vals[i])
            how = f"largest {metric}"
            break
    if best is None:
        best, how = len(steps) - 1, "no enrichment or mean cosine recorded: the last checkpoint"
    out["peak"] = (best, how)
    out["last"] = (len(steps) - 1, "")
    return out


def site_arrays(stats: Any, eval_data: Any):
    """:class:`~tangentlab.empirical.bridge.site_bridge.SiteArrays` from a site's fit-half ``SiteStats``."""
    import numpy as np
    import torch

    from tangentlab.empirical.bridge.site_bridge import SiteArrays

    toks, docs = [], []
    for b in eval_data.batches:
        t = torch.as_tensor(b.token_ids)
        toks.append(t.reshape(-1).numpy().astype(np.int64))
        if b.doc_ids is not None:
            docs.append(torch.as_tensor(b.doc_ids).reshape(-1).numpy().astype(np.int64))
        else:  # each window is its own document
            B, T = t.shape
            docs.append(np.repeat(b.index * B + np.arange(B), T).astype(np.int64))
    return SiteArrays(
        H=np.asarray(stats.geo_rows, dtype=np.float64),
        tokens=np.asarray(stats.geo_tokens, dtype=np.int64),
        docs=np.asarray(stats.geo_docs, dtype=np.int64),
        counts=np.asarray(eval_data.counts, dtype=np.float64),
        edges=np.asarray(eval_data.edges, dtype=np.float64), labels=tuple(eval_data.labels),
        stream_tokens=np.concatenate(toks), stream_docs=np.concatenate(docs),
        sample=np.asarray(stats.sample, dtype=np.float64))


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def write_bridge_csv(rows: Sequence[dict], path: str | Path) -> Path:
    """Write ``rows`` (keys :data:`BRIDGE_COLUMNS`) as CSV to ``path`` (temporary name, renamed)."""
    from tangentlab.runs import atomic_write_text

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(BRIDGE_COLUMNS)
    for r in rows:
        w.writerow([_fmt(r.get(c)) for c in BRIDGE_COLUMNS])
    return atomic_write_text(Path(path), buf.getvalue())


def write_bridge(out_dir: str | Path, *, setup: Any, checkpoints: Sequence[Any],
                 rows: Sequence[dict], cfg: Any, load: Callable[[Any], Any],
                 model: str) -> Path:
    """Measure the bridge rows at each site's three phases; write ``out_dir/bridge.csv``.

    Args:
        out_dir: the measurement folder being written.
        setup: the protocol's set-up (sites, eval data, row plans, geometry token ids).
        checkpoints: the trajectory's checkpoints (``.name``, ``.step``), in order.
        rows: the measurement's rows (for the peak).
        cfg: the measure config (``bridge_boot``, ``bridge_tokens``, ``seed``).
        load: ``load(checkpoint) -> loaded model``.
        model: the model name written in each row.
    """
    from tangentlab.empirical.bridge.site_bridge import BridgeSettings, site_bridge, zipf_inputs
    from tangentlab.empirical.measurement.collect import collect_fit_half

    steps = [int(c.step) for c in checkpoints]
    names = [c.name for c in checkpoints]
    plan = {site: choose_phases(steps, names, rows, site) for site in setup.sites}
    needed = sorted({i for p in plan.values() for i, _ in p.values()})
    settings = BridgeSettings(n_boot=int(cfg.bridge_boot), max_tokens=int(cfg.bridge_tokens),
                              seed=int(cfg.seed))
    out: list[dict] = []
    results: dict[tuple[int, str], list[dict]] = {}
    zipf = None  # the training table and eval text are the same at every site and checkpoint
    for i in needed:
        lm = load(checkpoints[i])
        fit = collect_fit_half(lm, setup.sites, setup.eval_data, setup.plans, setup.uniq)
        for site in setup.sites:
            if any(j == i for j, _ in plan[site].values()):
                arrays = site_arrays(fit[site], setup.eval_data)
                zipf = zipf_inputs(arrays, settings) if zipf is None else zipf
                results[(i, site)] = site_bridge(arrays, settings, zipf)
    arch = setup.first.arch
    for site in setup.sites:
        for phase in PHASES:
            i, note = plan[site][phase]
            for r in results[(i, site)]:
                row = {"model": model, "arch": arch, "site": site, "phase": phase,
                       "checkpoint": names[i], "step": steps[i], **r}
                if note and phase != "last":
                    row["note"] = "; ".join(x for x in (r["note"], f"phase: {note}") if x)
                out.append(row)
    return write_bridge_csv(out, Path(out_dir) / BRIDGE_NAME)


def maybe_write_bridge(out_dir: str | Path, setup: Any, checkpoints: Sequence[Any],
                       rows: Sequence[dict], cfg: Any, timer: Any, load: Callable[[Any], Any],
                       traj: Any) -> Path | None:
    """The protocol's one-call hook: :func:`write_bridge` when ``cfg.bridge`` is on (timed)."""
    if not getattr(cfg, "bridge", False):
        return None
    with timer("bridge"):
        return write_bridge(out_dir, setup=setup, checkpoints=checkpoints, rows=rows, cfg=cfg,
                            load=load, model=traj.model_name)

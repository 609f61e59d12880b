"""The headline numbers of a measurement in one table: one row per (run, model, site, step).

``tangentlab summary RUN`` prints this table and writes it as ``summary.csv``;
:func:`load_results` returns it as a pandas DataFrame (``long=True``: the stored long table).

RUN is a measurement run directory (``tangentlab empirical measure`` output, or a reproduce
``measure/<arch>`` stage folder) or a reproduce run directory (then every measure stage it ran,
plus any external measurement runs its config lists, one block of rows each).

Which stored rows are read: the full-space test (``subspace`` empty) of the fixed proxy
(``proxy`` empty or ``fixed``) over all tokens (``bucket`` ``all``), at each checkpoint with a
step. The per-checkpoint refit proxy and the constrained subspace (the space normalization layers
leave the gradients) get columns of their own. Where several stored rows share (metric, site,
step) the first one is read, as the report does.

Columns, in order (:data:`SUMMARY_COLUMNS`; a number that was not stored is empty):

- ``run``: ``.`` for a measurement run, else the stage (``measure/decoder``, ``external/NAME``);
- ``model``, ``site``, ``step``, ``checkpoint``;
- ``enrichment``, ``enrichment_ci_low``, ``enrichment_ci_high``: E_T / mean E_N with its
  bootstrap CI;
- ``enrichment_step0``: the enrichment at step 0 at the same site (read trained values against it);
- ``energy_tangent`` (with ``_ci_low``/``_ci_high``): E_T, the gradient energy fraction in Q_T;
- ``energy_control_mean``: mean E_N over the matched-rank normal controls;
- ``baseline``: the isotropic baseline r/d; ``oracle``: the energy of the top-r eigenvectors of C;
- ``position``: where E_T lies between the null and the oracle (0 null, 1 oracle);
- ``p_value``, ``n_controls``, ``p_floor``: the control p-value, how many controls, and its
  floor 1/(1+n) (a p at its floor cannot tell 1.1x from 19x);
- ``enrichment_refit`` (with CI): the proxy refitted at each checkpoint;
- ``enrichment_constrained`` (with CI): the test inside the space the gradients can reach;
- ``n``: the number of gradient rows behind the enrichment.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tangentlab.contract import measure_stage
from tangentlab.errors import DataError

__all__ = ["SUMMARY_COLUMNS", "SUMMARY_NAME", "headline_table", "load_results", "write_summary",
           "format_summary"]

#: The file ``tangentlab summary`` writes.
SUMMARY_NAME = "summary.csv"

#: The summary's columns, in order (see the module docstring for each).
SUMMARY_COLUMNS: tuple[str, ...] = (
    "run", "model", "site", "step", "checkpoint",
    "enrichment", "enrichment_ci_low", "enrichment_ci_high", "enrichment_step0",
    "energy_tangent", "energy_tangent_ci_low", "energy_tangent_ci_high", "energy_control_mean",
    "baseline", "oracle", "position", "p_value", "n_controls", "p_floor",
    "enrichment_refit", "enrichment_refit_ci_low", "enrichment_refit_ci_high",
    "enrichment_constrained", "enrichment_constrained_ci_low", "enrichment_constrained_ci_high",
    "n",
)

_WITH_CI = ("enrichment", "energy_tangent")
_VALUE_ONLY = ("energy_control_mean", "baseline", "oracle", "position", "p_value")


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _col(df, name: str, default: str):
    if name not in df.columns:
        return default
    return df[name].astype(object).where(df[name].notna(), default).astype(str).replace("", default)


def _sources(run: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """(label, measurement folder, its manifest) for every measurement RUN holds."""
    from tangentlab.runs import MANIFEST_NAME, RESULTS_NAME, read_manifest

    run = Path(run)
    if not run.is_dir():
        raise DataError(f"{str(run)!r} is not a directory; pass a measurement run directory "
                        "(`tangentlab empirical measure --out DIR`) or a reproduce run directory")
    manifest = read_manifest(run) if (run / MANIFEST_NAME).is_file() else {}
    if manifest.get("kind") == "reproduce":
        from tangentlab.report.load import RunData

        data = RunData.open(run)
        stages = [s for s in data.records if s.startswith(measure_stage(""))] + data.external_stages()
        out = [(s, data.stage_dir(s), data.stage_manifest_or_empty(s)) for s in stages
               if data.status(s) == "done" and (data.stage_dir(s) / RESULTS_NAME).is_file()]
        if not out:
            raise DataError(f"the reproduce run {str(run)!r} holds no finished measure stage; "
                            "its headline numbers come from measure/encoder and measure/decoder")
        return out
    if not (run / RESULTS_NAME).is_file():
        raise DataError(f"{str(run)!r} holds no {RESULTS_NAME}; pass a measurement run directory "
                        "(`tangentlab empirical measure --out DIR`) or a reproduce run directory")
    return [(".", run, manifest if isinstance(manifest, dict) else {})]


def _long(run: Path):
    """The stored long table(s) of RUN, checked, with a ``run`` column naming each source."""
    import pandas as pd

    from tangentlab.report.inputs import check_results
    from tangentlab.runs import RESULTS_NAME, read_results

    frames = []
    for label, folder, manifest in _sources(run):
        path = folder / RESULTS_NAME
        df = check_results(read_results(path), path).copy()
        df.insert(0, "run", label)
        df.attrs["manifest"] = manifest
        frames.append((df, manifest))
    return frames, pd


def _n_controls(manifest: dict[str, Any], df) -> int | None:
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    for table in [cfg, *[v for v in cfg.values() if isinstance(v, dict)]]:
        for key in ("n_controls", "controls"):
            v = table.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    if "controls" in df.columns:
        vals = [_num(v) for v in df.loc[df["metric"] == "p_value", "controls"]]
        vals = [int(v) for v in vals if v is not None]
        if vals:
            return vals[0]
    return None


def _index(df, proxy: str, subspace: str) -> dict[tuple[str, str, float], dict[str, Any]]:
    """(metric, site, step) -> {value, ci_low, ci_high, n, checkpoint, model}: first row wins."""
    sel = df[(df["_proxy"] == proxy) & (df["_subspace"] == subspace) & (df["_bucket"] == "all")]
    out: dict[tuple[str, str, float], dict[str, Any]] = {}
    cols = {c: sel[c].tolist() if c in sel.columns else [None] * len(sel)
            for c in ("metric", "_site", "_step", "value", "ci_low", "ci_high", "n", "checkpoint", "model")}
    for i in range(len(sel)):
        step = _num(cols["_step"][i])
        if step is None:
            continue
        key = (str(cols["metric"][i]), cols["_site"][i], step)
        if key not in out:
            out[key] = {c: cols[c][i] for c in ("value", "ci_low", "ci_high", "n", "checkpoint", "model")}
    return out


def _estimate(idx, metric: str, site: str, step: float) -> tuple[float | None, float | None, float | None]:
    row = idx.get((metric, site, step))
    if row is None:
        return None, None, None
    lo, hi = _num(row["ci_low"]), _num(row["ci_high"])
    if lo is None or hi is None:  # runs that stored the interval as metric rows of their own
        lo_row, hi_row = idx.get((f"{metric}_ci_low", site, step)), idx.get((f"{metric}_ci_high", site, step))
        if lo_row is not None and hi_row is not None:
            lo, hi = _num(lo_row["value"]), _num(hi_row["value"])
    return _num(row["value"]), lo, hi


def _rows(df, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    import pandas as pd

    df = df.assign(_proxy=_col(df, "proxy", "fixed"), _subspace=_col(df, "subspace", "plain"),
                   _bucket=_col(df, "bucket", "all"), _site=_col(df, "site", ""),
                   _step=pd.to_numeric(df["step"], errors="coerce") if "step" in df.columns else float("nan"))
    fixed = _index(df, "fixed", "plain")
    refit = _index(df, "refit", "plain")
    constrained = _index(df, "fixed", "constrained")
    keys = sorted({(site, step) for (m, site, step) in fixed if m in (*_WITH_CI, *_VALUE_ONLY)},
                  key=lambda k: (k[0], k[1]))
    n_controls = _n_controls(manifest, df)
    label = str(df["run"].iloc[0]) if len(df) else "."
    rows = []
    for site, step in keys:
        first = next((fixed[k] for k in ((m, site, step) for m in (*_WITH_CI, *_VALUE_ONLY)) if k in fixed), {})
        row: dict[str, Any] = {"run": label, "model": first.get("model") or manifest.get("model") or "",
                               "site": site, "step": step, "checkpoint": first.get("checkpoint") or ""}
        for m in _WITH_CI:
            row[m], row[f"{m}_ci_low"], row[f"{m}_ci_high"] = _estimate(fixed, m, site, step)
        row["enrichment_step0"] = _estimate(fixed, "enrichment", site, 0.0)[0]
        for m in _VALUE_ONLY:
            row[m] = _estimate(fixed, m, site, step)[0]
        row["n_controls"] = n_controls
        row["p_floor"] = 1.0 / (1.0 + n_controls) if n_controls else None
        for name, idx in (("enrichment_refit", refit), ("enrichment_constrained", constrained)):
            row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"] = _estimate(idx, "enrichment", site, step)
        enr = fixed.get(("enrichment", site, step))
        row["n"] = _num(enr["n"]) if enr is not None else None
        rows.append(row)
    return rows


def headline_table(run: str | Path):
    """The headline table of RUN as a DataFrame with :data:`SUMMARY_COLUMNS`.

    One row per (run, model, site, step), sorted by run (in stored order), site and step.

    Raises:
        DataError: RUN is not a measurement or reproduce run, or a table it holds is damaged.
    """
    frames, pd = _long(Path(run))
    rows = [r for df, manifest in frames for r in _rows(df, manifest)]
    out = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    for c in SUMMARY_COLUMNS:
        if c not in ("run", "model", "site", "checkpoint"):
            out[c] = pd.to_numeric(out[c], errors="coerce")
    return out


def load_results(run: str | Path, *, long: bool = False):
    """A measurement's results as a pandas DataFrame.

    Args:
        run: a measurement run directory or a reproduce run directory.
        long: return the stored long table (one measured number per row, every column the run
            wrote, plus ``run`` naming the source) instead of the headline table.

    Returns:
        DataFrame: the headline table of :func:`headline_table` (columns
        :data:`SUMMARY_COLUMNS`), or with ``long=True`` the long table.

    Example::

        >>> import tangentlab
        >>> df = tangentlab.load_results("runs/mine")           # doctest: +SKIP
        >>> df[["site", "step", "enrichment", "enrichment_ci_low", "enrichment_ci_high"]]  # doctest: +SKIP
    """
    if not long:
        return headline_table(run)
    frames, pd = _long(Path(run))
    return pd.concat([df for df, _ in frames], ignore_index=True)


def write_summary(table, path: str | Path) -> Path:
    """Write the headline ``table`` as CSV to ``path`` atomically (a temporary name, then rename)."""
    from tangentlab.runs import atomic_write_text

    return atomic_write_text(Path(path), table.to_csv(index=False, float_format="%.6g"))


def format_summary(table) -> str:
    """The headline table as aligned text.

    Columns: run, model, site, step, enrichment [CI], step 0, E_T, baseline, oracle, p (floor),
    and the refit and constrained enrichment where stored (a column nothing fills is left out).
    """
    def f(x: Any, digits: int = 4) -> str:
        v = _num(x)
        return "" if v is None else f"{v:.{digits}g}"

    def ci(r, m: str) -> str:
        v = f(r[m])
        if not v:
            return ""
        lo, hi = f(r[f"{m}_ci_low"]), f(r[f"{m}_ci_high"])
        return f"{v} [{lo}, {hi}]" if lo and hi else v

    head = ("run", "model", "site", "step", "enrichment [95% CI]", "step 0", "E_T", "r/d", "oracle",
            "p (floor)", "refit", "constrained")
    lines = [head]
    for r in table.to_dict("records"):
        p = f(r["p_value"], 3)
        if p and f(r["p_floor"], 3):
            p += f" ({f(r['p_floor'], 3)})"
        lines.append((str(r["run"]), str(r["model"]), str(r["site"]), f(r["step"], 10),
                      ci(r, "enrichment"), f(r["enrichment_step0"]), ci(r, "energy_tangent"),
                      f(r["baseline"]), f(r["oracle"]), p, ci(r, "enrichment_refit"),
                      ci(r, "enrichment_constrained")))
    keep = [j for j in range(len(head)) if any(line[j] for line in lines[1:])] or list(range(4))
    widths = [max(len(line[j]) for line in lines) for j in keep]
    return "\n".join("  ".join(line[j].ljust(w) for j, w in zip(keep, widths)).rstrip() for line in lines)

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
- ``n``: the number of gradient rows behind the enrichment;
- ``notes``: numbers that cannot be right, or lie outside what was validated, said in words
  (``;``-separated, empty when none): a non-finite estimate or bound, an interval that excludes
  its own estimate, and an interval resampled from fewer test batches than the validation battery
  checks coverage at (:data:`~tangentlab.measure.batch_test.VALIDATED_MIN_BATCHES`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tangentlab.contract import measure_stage
from tangentlab.errors import DataError
from tangentlab.report.tables import _num

__all__ = ["SUMMARY_COLUMNS", "SUMMARY_NAME", "headline_table", "load_results", "write_summary",
           "format_summary", "summary_output_path", "row_notes", "test_batches_of"]

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
    "n", "notes",
)

_WITH_CI = ("enrichment", "energy_tangent")
_VALUE_ONLY = ("energy_control_mean", "baseline", "oracle", "position", "p_value")


def _col(df, name: str, default: str):
    if name not in df.columns:
        return default
    return df[name].astype(object).where(df[name].notna(), default).astype(str).replace("", default)


def _sources(run: Path) -> list[tuple[str, Path, dict[str, Any], Any]]:
    """(label, its results.csv, its manifest, its checked table) for every measurement RUN holds.

    A reproduce run is opened once (:class:`~tangentlab.report.load.RunData`): its tables are
    read there; a measurement run's own table is read here.
    """
    from tangentlab.report.inputs import check_results
    from tangentlab.runs import MANIFEST_NAME, RESULTS_NAME, read_manifest, read_results

    run = Path(run)
    if not run.is_dir():
        raise DataError(f"{str(run)!r} is not a directory; pass a measurement run directory "
                        "(`tangentlab empirical measure --out DIR`) or a reproduce run directory")
    manifest = read_manifest(run) if (run / MANIFEST_NAME).is_file() else {}
    if manifest.get("kind") == "reproduce":
        from tangentlab.report.load import EXTERNAL_PREFIX, RunData

        data = RunData.open(run)
        stages = [data.stages[s] for s in data.names
                  if s.startswith((measure_stage(""), EXTERNAL_PREFIX))]
        out = [(st.name, st.folder / RESULTS_NAME, st.manifest, st.results)
               for st in stages if st.done and st.has_results]
        if not out:
            raise DataError(f"the reproduce run {str(run)!r} holds no finished measure stage; "
                            "its headline numbers come from measure/encoder and measure/decoder")
        return out
    if not (run / RESULTS_NAME).is_file():
        raise DataError(f"{str(run)!r} holds no {RESULTS_NAME}; pass a measurement run directory "
                        "(`tangentlab empirical measure --out DIR`) or a reproduce run directory")
    path = run / RESULTS_NAME
    return [(".", path, manifest if isinstance(manifest, dict) else {},
             check_results(read_results(path), path))]


def _long(run: Path):
    """The stored long table(s) of RUN, checked, with a ``run`` column naming each source."""
    import pandas as pd

    frames = []
    for label, path, manifest, table in _sources(run):
        df = table.copy()
        if df.empty:
            raise DataError(f"{path} holds a header and no rows: it was truncated, or the stage "
                            "measured nothing; restore it or re-run the stage that wrote it")
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


def test_batches_of(manifest: dict[str, Any]) -> int | None:
    """How many test batches the measurement's intervals resampled (from its manifest's split)."""
    split = manifest.get("split") if isinstance(manifest.get("split"), dict) else {}
    tests = split.get("test_batches")
    return len(tests) if isinstance(tests, list) else None


def row_notes(value: Any, low: Any, high: Any, *, what: str = "enrichment",
              test_batches: int | None = None) -> list[str]:
    """What is wrong with an estimate and its interval, in words (empty when nothing is).

    ``value``, ``low``, ``high``: the stored estimate and interval (None/NaN where absent);
    ``test_batches``: the batches the interval resampled, when known.
    """
    from tangentlab.measure.batch_test import VALIDATED_MIN_BATCHES

    out = []
    v, lo, hi = (_num(x) for x in (value, low, high))
    if v is not None and not math.isfinite(v):
        out.append(f"non-finite {what} ({v})")
    bounds = [b for b in (lo, hi) if b is not None]
    if any(not math.isfinite(b) for b in bounds):
        out.append(f"non-finite {what} interval bound")
    elif v is not None and math.isfinite(v) and lo is not None and hi is not None \
            and not (lo - 1e-9 * abs(v) <= v <= hi + 1e-9 * abs(v)):
        out.append(f"{what} interval [{lo:.4g}, {hi:.4g}] excludes its estimate {v:.4g}")
    if bounds and test_batches is not None and test_batches < VALIDATED_MIN_BATCHES:
        out.append(f"interval from {test_batches} test batches (coverage validated at >= "
                   f"{VALIDATED_MIN_BATCHES})")
    return out


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
    n_test = test_batches_of(manifest)
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
        flags = [f for m in ("enrichment", "enrichment_refit", "enrichment_constrained")
                 for f in row_notes(row[m], row[f"{m}_ci_low"], row[f"{m}_ci_high"], what=m,
                                    test_batches=None)]
        flags += [f for f in row_notes(row["enrichment"], row["enrichment_ci_low"],
                                       row["enrichment_ci_high"], test_batches=n_test)
                  if f.startswith("interval from")]
        row["notes"] = "; ".join(flags)
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
        if c not in ("run", "model", "site", "checkpoint", "notes"):
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


def _enclosing_run(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` that holds a ``manifest.json`` (a run)."""
    from tangentlab.runs import MANIFEST_NAME

    for p in (folder, *folder.parents):
        try:
            if (p / MANIFEST_NAME).is_file():
                return p
        except OSError:  # unreadable or too long: not a run we can see
            return None
    return None


def _short(path: Path, limit: int = 160) -> str:
    text = str(path)
    return text if len(text) <= limit else f"{text[:60]}...{text[-60:]} ({len(text)} characters)"


def summary_output_path(run: str | Path, out: str | Path | None) -> Path:
    """Where ``tangentlab summary RUN [--out OUT]`` may write, checked before anything is written.

    The default is ``RUN/summary.csv``; ``OUT`` is a file path, or an existing folder to hold
    ``summary.csv``. Refused (:class:`~tangentlab.errors.OutputPathError`, nothing written):

    - a path inside a run directory (a folder at or above it holds ``manifest.json``) other than
      the summarised run's own ``summary.csv``: a summary never replaces a run's results,
      manifest or anything else it holds;
    - an existing file other than RUN/summary.csv that is not a summary this command wrote (its
      first line does not start with the header of :data:`SUMMARY_COLUMNS`);
    - a path whose parent is a file, or that the file system cannot hold (too long).
    """
    import errno

    from tangentlab.errors import OutputPathError

    run = Path(run)
    path = run / SUMMARY_NAME if out is None else Path(out)
    try:
        if path.is_dir():
            path = path / SUMMARY_NAME
        resolved = path.resolve()
        exists, is_file = path.exists(), path.is_file()
    except OSError as exc:
        why = ("is longer than the file system allows" if exc.errno == errno.ENAMETOOLONG
               else f"cannot be used ({exc.strerror or exc})")
        raise OutputPathError(f"--out {_short(path)} {why}; pass a shorter path to a CSV file, "
                              "e.g. --out summary.csv") from None
    if exists and not is_file:
        raise OutputPathError(f"--out {_short(path)} exists and is not a file; pass a CSV file path "
                              "or a folder to hold summary.csv")
    holder = _enclosing_run(resolved.parent)
    own = run.resolve() / SUMMARY_NAME
    if holder is not None and resolved != own:
        raise OutputPathError(
            f"--out {_short(path)} lies inside the run directory {_short(holder)}; summary writes "
            f"into a run only its own {SUMMARY_NAME} ({_short(own)}): pass --out outside any run, "
            "e.g. --out summary.csv")
    if exists and resolved != own:  # a run's own summary.csv is always this command's file
        header = ",".join(SUMMARY_COLUMNS[:6])
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                first = fh.readline().rstrip("\r\n")
        except OSError as exc:
            raise OutputPathError(f"--out {_short(path)} exists and cannot be read "
                                  f"({exc.strerror or exc}); choose another path") from None
        if not first.startswith(header):
            raise OutputPathError(
                f"--out {_short(path)} exists and is not a summary written by `tangentlab "
                "summary` (its first line is not the summary header); it is left as it is: "
                "choose another path, or remove the file yourself")
    return path


def write_summary(table, path: str | Path) -> Path:
    """Write the headline ``table`` as CSV to ``path`` atomically (a temporary name, then rename).

    Raises:
        OutputPathError: the folder cannot be written (read-only, no permission, no space); no
            file is left behind.
    """
    from tangentlab.errors import OutputPathError
    from tangentlab.runs import atomic_write_text

    try:
        return atomic_write_text(Path(path), table.to_csv(index=False, float_format="%.6g"))
    except OSError as exc:
        raise OutputPathError(f"cannot write the summary to {_short(Path(path))}: "
                              f"{exc.strerror or exc}; pass --out PATH in a writable folder"
                              ) from None


def format_summary(table) -> str:
    """The headline table as aligned text, then one numbered note per distinct flag.

    Columns: run, model, site, step, enrichment [CI], step 0, E_T, baseline, oracle, p (floor),
    the refit and constrained enrichment where stored (a column nothing fills is left out), and
    ``notes``: the numbers of the notes (the ``notes`` column) that row carries, each note's
    text printed once below the table.
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

    notes: dict[str, int] = {}

    def note_refs(r) -> str:
        text = r.get("notes") if isinstance(r.get("notes"), str) else ""
        refs = [notes.setdefault(flag, len(notes) + 1) for flag in text.split("; ") if flag]
        return ",".join(f"[{i}]" for i in refs)

    head = ("run", "model", "site", "step", "enrichment [95% CI]", "step 0", "E_T", "r/d", "oracle",
            "p (floor)", "refit", "constrained", "notes")
    lines = [head]
    for r in table.to_dict("records"):
        p = f(r["p_value"], 3)
        if p and f(r["p_floor"], 3):
            p += f" ({f(r['p_floor'], 3)})"
        lines.append((str(r["run"]), str(r["model"]), str(r["site"]), f(r["step"], 10),
                      ci(r, "enrichment"), f(r["enrichment_step0"]), ci(r, "energy_tangent"),
                      f(r["baseline"]), f(r["oracle"]), p, ci(r, "enrichment_refit"),
                      ci(r, "enrichment_constrained"), note_refs(r)))
    keep = [j for j in range(len(head)) if any(line[j] for line in lines[1:])] or list(range(4))
    widths = [max(len(line[j]) for line in lines) for j in keep]
    text = [("  ".join(line[j].ljust(w) for j, w in zip(keep, widths)).rstrip()) for line in lines]
    text += [f"[{i}] {flag}" for flag, i in notes.items()]
    return "\n".join(text)

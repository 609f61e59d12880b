"""What both report pages say: the one page model (:class:`Page`) and the rows it lays out.

:func:`build` computes, once, from the opened run (:class:`~tangentlab.report.load.RunData`)
and its verdict rows, everything the pages show: banner, summary facts, headline counts, the
verdict rows, the "validated end to end" table, the theory-against-measurement lines, stages,
theory checks, limitations and provenance. The HTML page (:mod:`tangentlab.report.html_page`)
and its Markdown twin (:mod:`tangentlab.report.md_page`) only format a :class:`Page`; the
helpers below (:func:`compact`, :func:`unit_rows`, ...) turn one verdict row into its cells.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tangentlab.claims import rules as R
from tangentlab.contract import REPORT, THEORY
from tangentlab.report import theory_numbers
from tangentlab.report import units as U
from tangentlab.report.checks import error_kind
from tangentlab.report.gating import end_to_end_rows
from tangentlab.report.load import RunData, Stage
from tangentlab.report.verdicts import SECTION_TITLES, Verdict

__all__ = ["Page", "build", "SECTIONS", "VERDICT_SECTIONS", "headline_counts", "QUICK_TEXT", "banner", "limitations", "summary_facts", "reproduce_command",
           "theory_rows", "stage_rows", "counts_text", "raw_counts_text", "p_text", "with_p_floor", "compact", "overall", "unit_rows", "check_rows",
           "external_overall", "external_key", "EXTERNAL_HEADING"]

#: Section ids (HTML ``id`` attributes, and ``##`` headings in the Markdown twin), in order.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("instrument", SECTION_TITLES["instrument"]),
    ("argument", SECTION_TITLES["argument"]),
    ("predictions", SECTION_TITLES["prediction"]),
    ("details", "Sub-tables and figures"),
    ("stages", "Stages"),
    ("theory", "Theory checks"),
    ("limitations", "Limitations"),
    ("provenance", "Provenance"),
)


#: The verdict tables: (section id, claim kind, caption), in order (one per kind of claim,
#: :data:`tangentlab.claims.table.KINDS`).
VERDICT_SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("instrument", "instrument",
     "Does the instrument measure what it claims? A failure here says the method is off, not that "
     "the paper is wrong."),
    ("argument", "argument",
     "The theory's own argument, checked symbolically and on toys: the derivations, the gap in "
     "the paper's gradient step and its counterexample, Muon against exact sign descent. A "
     "failure here is a finding about the argument, not a fault of the instrument."),
    ("predictions", "prediction",
     "The paper's claims, measured on trained Transformers; each (model, site) is a unit, "
     "combined by the rule in the sub-table below."),
)


def headline_counts(verdicts: list[Verdict]) -> list[tuple[str, str]]:
    """(section title, :func:`counts_text`) for each kind of claim, in report order."""
    return [(SECTION_TITLES[kind], counts_text(verdicts, kind)) for _, kind, _ in VERDICT_SECTIONS]


QUICK_TEXT = ("This is a --quick run: tiny models trained for a few steps and quick synthetic "
              "settings. Its numbers show the pipeline works end to end; they are too small to "
              "settle the science. Run `tangentlab reproduce` without --quick for the real test.")


@dataclass(frozen=True)
class Page:
    """Everything both pages show, computed once (:func:`build`); the emitters only format it.

    Attributes:
        name: the run directory's name (the HTML title).
        verdicts: the verdict rows, in report order.
        banner, facts, counts: the banner lines, the summary table, the headline counts.
        end_to_end: the "validated end to end" table (:data:`~tangentlab.report.gating.END_TO_END_HEADER`).
        bridge, bridge_missing: the theory-against-measurement lines, and why a measurement has
            none (:mod:`tangentlab.report.theory_numbers`).
        stages, theory: the rows of the stages and theory-checks tables.
        theory_missing: why there are no theory checks (shown when ``theory`` is empty).
        limitations, findings: the limitations section; where measurement disagrees with the
            account (:func:`~tangentlab.report.theory_numbers.findings`).
        arms: (status, line) per learning-arms study over a horizon (``arms/<arch>``).
        config, versions: the recorded config and library versions (provenance).
    """

    name: str
    verdicts: list[Verdict]
    banner: list[str]
    facts: list[tuple[str, str]]
    counts: list[tuple[str, str]]
    end_to_end: list[tuple[str, ...]]
    bridge: list[theory_numbers.Line]
    bridge_missing: list[str]
    stages: list[tuple[str, str, str, str, str, str]]
    theory: list[tuple[str, str, str, str, str, str]]
    theory_missing: str
    limitations: list[str]
    findings: list[str]
    arms: list[tuple[str, str]]
    config: Any
    versions: dict[str, Any]


def build(data: RunData, verdicts: list[Verdict]) -> Page:
    """The page of the opened run ``data`` with its verdict rows (the one place a page reads it)."""
    m, records, stages = data.manifest, data.records, data.stages
    names = data.names
    bridge, missing = theory_numbers.read_lines(stages, names)
    arms = theory_numbers.arms_lines(stages, names)
    devices = _devices(m, [stages[n] for n in names if n != REPORT])
    return Page(
        name=data.run_dir.name, verdicts=verdicts, banner=banner(m, records),
        facts=summary_facts(m, records, str(data.run_dir.resolve()), devices, data.externals),
        counts=headline_counts(verdicts),
        end_to_end=end_to_end_rows(verdicts, data.end_to_end, stages, data.certificates_read),
        bridge=bridge, bridge_missing=missing, stages=stage_rows(m, records),
        theory=theory_rows(stages[THEORY]),
        theory_missing=stages[THEORY].problem or "none recorded",
        limitations=limitations(m, records, verdicts),
        findings=theory_numbers.findings(verdicts, bridge, arms), arms=arms,
        config=m.get("config", {}), versions=m.get("versions") or {})


def _is_quick(manifest: dict[str, Any]) -> bool:
    cfg = manifest.get("config") or {}
    return bool(manifest.get("quick") or (isinstance(cfg, dict) and cfg.get("quick")))


def banner(manifest: dict[str, Any], records) -> list[str]:
    """The lines of the banner at the top: a quick run, and every failed or skipped stage."""
    out = []
    if _is_quick(manifest):
        out.append(QUICK_TEXT)
    for name, rec in records.items():
        if rec.status == "failed":
            out.append(f"Stage {name} FAILED: {rec.error}. Rows built on it read 'not run'.")
        elif rec.status == "skipped":
            out.append(f"Stage {name} was SKIPPED: {rec.reason}.")
    return out


def limitations(manifest: dict[str, Any], records, verdicts: list[Verdict]) -> list[str]:
    """The limitations section, generated from what did not run or did not decide."""
    out: list[str] = []
    for name, rec in records.items():
        if name == REPORT:
            continue
        if rec.status == "failed":
            out.append(f"Stage {name} failed ({rec.error}); the rows built on it are marked 'not run'.")
        elif rec.status == "skipped":
            out.append(f"Stage {name} was skipped: {rec.reason}.")
        elif rec.status != "done":
            out.append(f"Stage {name} did not finish (status {rec.status}).")
    for v in verdicts:
        if v.depends_on:
            out.append(f"'{v.title}' depends on '{v.depends_on}': it is not an independent verdict.")
        if v.gated:
            out.append(f"'{v.title}' reads inconclusive (not validated): its rules said "
                       f"{v.raw_status}, but it was not validated end to end at this run's "
                       f"setting ({v.gated}).")
        elif v.certified:
            out.append(f"'{v.title}' reads {v.status}: validated end to end at this run's setting "
                       f"by {v.certified}.")
        elif v.status == R.INCONCLUSIVE and v.units:
            undecided = [u.label for u in v.units if u.status == R.INCONCLUSIVE]
            out.append(f"'{v.title}' is inconclusive for {', '.join(undecided) or 'its unmeasured stages'} "
                       "(the reasons are in its sub-table).")
        elif v.status == R.INCONCLUSIVE:
            out.append(f"'{v.title}' is inconclusive: {v.reason}.")
        elif v.status == R.NOT_RUN and not any(
                records.get(s.stage) is not None and records[s.stage].status in ("failed", "skipped")
                for s in v.sources):  # failed and skipped stages are listed above already
            out.append(f"'{v.title}' was not run: {v.reason}.")
        if v.error:
            out.append(f"'{v.title}': the verdict rule raised an error ({v.error.splitlines()[0]}).")
    cfg = manifest.get("config") or {}
    if _is_quick(manifest):
        out.append(QUICK_TEXT)
    preset = cfg.get("preset")
    if preset:
        out.append(f"The empirical rows come from our own {preset} encoder and decoder trained from "
                   f"scratch on the {cfg.get('corpus', 'default')} corpus, not from the paper's "
                   "released checkpoint series (Pythia, SmolLM2, OLMo, EuroBERT, ...), which cannot be "
                   "downloaded here.")
    out.append("The paper's full text was not available: its findings are quoted qualitatively "
               "(no table values survive), so agreement is judged on direction and significance, "
               "not on magnitudes.")
    return out


def theory_rows(theory: Stage) -> list[tuple[str, str, str, str, str, str]]:
    """(derivation, check, kind, pass/FAIL, residual, kind of error) of every theory check."""
    if not theory.done:
        return []
    try:
        ver = theory.verify
    except Exception:
        return []
    rows = []
    for d in ver.get("derivations", []):
        for c in d.get("checks", []):
            res = c.get("residual")
            rows.append((str(d.get("name")), str(c.get("name")), str(c.get("kind", "")),
                         "pass" if c.get("passed") else "FAIL",
                         "" if res is None else f"{float(res):.3g}" if isinstance(res, (int, float)) else str(res),
                         error_kind(c, theory=True)))
    return rows


def stage_rows(manifest: dict[str, Any], records) -> list[tuple[str, str, str, str, str, str]]:
    """(stage, status, seconds (CPU), config hash, output link, note) of every stage record."""
    order = manifest.get("stage_order") or list(records)
    rows = []
    for name in order:
        rec = records.get(name)
        if rec is None:
            continue
        status = rec.status
        if name == REPORT and status == "running":
            status = "this report"
        secs = "" if rec.seconds is None else f"{rec.seconds:.1f}"
        if rec.cpu_seconds is not None:
            secs += f" ({rec.cpu_seconds:.1f} CPU)"
        note = rec.error or rec.reason or ""
        if rec.reused:
            note = ("reused from an earlier invocation; " + note).strip("; ")
        link = rec.outputs[0] if rec.outputs else name
        rows.append((name, status, secs, rec.config_hash, link, note))
    return rows


def _devices(manifest: dict[str, Any], stages: list[Stage]) -> str:
    """The device each stage's own manifest recorded (not the requested ``auto``)."""
    by: dict[str, list[str]] = {}
    for st in stages:
        dev = st.manifest.get("device") if st.done else None
        if dev:
            by.setdefault(str(dev), []).append(st.name)
    if not by:
        requested = manifest.get("device", "?")
        return f"not recorded by any stage (requested: {requested})"
    if len(by) == 1:
        dev, names = next(iter(by.items()))
        return f"{dev} (all {len(names)} stages that recorded a device)"
    return "; ".join(f"{dev} ({', '.join(names)})" for dev, names in by.items())


def _wall_seconds(m: dict[str, Any]) -> float | None:
    t = m.get("timings_s") if isinstance(m.get("timings_s"), dict) else {}
    for v in (m.get("wall_seconds"), m.get("wall_s"), t.get("wall"), t.get("total")):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def reproduce_command(manifest: dict[str, Any], path: str) -> str:
    """The command line that reproduces the run at ``path``.

    The recorded argv of a ``tangentlab reproduce`` call, else one built from the recorded config
    (seed, quick, device), writing to this path.
    """
    argv, cmd = manifest.get("argv"), ["tangentlab", "reproduce"]
    if isinstance(argv, list) and len(argv) > 1 and argv[1] == "reproduce":
        args = [str(a) for a in argv[2:]]
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("--out", "--runs-root"):
                skip = True
                continue
            if a.startswith(("--out=", "--runs-root=")) or a == "--resume":
                continue
            cmd.append(a)
        return shlex.join([*cmd, "--out", path])
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    if cfg.get("quick") or manifest.get("quick"):
        cmd.append("--quick")
    if "seed" in cfg:
        cmd += ["--seed", str(cfg["seed"])]
    if cfg.get("device"):
        cmd += ["--device", str(cfg["device"])]
    cmd += ["--out", path]
    return shlex.join(cmd) + "  (built from the recorded config; save the Provenance config as " \
                              "TOML and add --config FILE for every other setting)"


def summary_facts(m: dict[str, Any], records, path: str, devices: str,
                  externals: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary table: provenance, device, times and the reproducing command (run at ``path``)."""
    git = m.get("git") or {}
    recs = [r for n, r in records.items() if n != REPORT]
    total = sum((r.seconds or 0.0) for r in recs)
    cpu = [r.cpu_seconds for r in recs if r.cpu_seconds is not None]
    wall = _wall_seconds(m)
    commit = git.get("commit") or "unknown"
    if git.get("dirty"):
        commit += " (with uncommitted changes)"
    facts = [
        ("run directory", path),
        ("started", str(m.get("created", "?"))),
        ("mode", "quick" if _is_quick(m) else "full"),
        ("device", devices),
        ("wall time", f"{wall:.1f} s" if wall is not None
         else f"not recorded; the stages took {total:.1f} s together"),
        ("CPU time", f"{sum(cpu):.1f} s over {len(cpu)} stages" if cpu else "not recorded"),
        ("reproduce with", reproduce_command(m, path)),
        ("tangentlab", str(m.get("tangentlab_version", "?"))),
        ("git commit", commit),
        ("config hash", str(m.get("config_hash", "?"))),
        ("seed", str((m.get("seeds") or {}).get("seed", "?"))),
    ]
    if externals:
        facts.append(("external measurements", "; ".join(f"{k} = {v}" for k, v in externals.items())))
    return facts


def _words(statuses) -> list[str]:
    """The status words in report order, then any other (``not applicable (one checkpoint)``)."""
    extra = [w for w in dict.fromkeys(statuses) if w not in R.STATUS_WORDS]
    return [*R.STATUS_WORDS, *extra]


def raw_counts_text(rows: list[Verdict]) -> str:
    """What the inconclusive ``rows`` would read before gating.

    ``3 raw supported, 2 raw not supported, 1 undecided``: a gated row counts by its raw verdict
    (the rules' word before the end-to-end gate, :mod:`tangentlab.report.gating`); an
    inconclusive row that was not gated is undecided. Empty when no row was gated.
    """
    inc = [v for v in rows if v.status == R.INCONCLUSIVE]
    if not any(v.gated for v in inc):
        return ""
    raw = Counter(v.raw_status for v in inc if v.gated)
    words = [R.SUPPORTED, R.NOT_SUPPORTED] + [w for w in raw if w not in (R.SUPPORTED, R.NOT_SUPPORTED)]
    parts = [f"{raw.get(w, 0)} raw {w}" for w in words]
    return ", ".join(parts + [f"{sum(not v.gated for v in inc)} undecided"])


def counts_text(verdicts: list[Verdict], section: str) -> str:
    """How many independent rows of ``section`` got each status word.

    Where gating turned rows inconclusive, their raw verdicts follow the inconclusive count
    (``6 inconclusive: 3 raw supported, 2 raw not supported, 1 undecided; 0 not run``).
    """
    rows = [v for v in verdicts if v.section == section and not v.depends_on]
    dep = [v for v in verdicts if v.section == section and v.depends_on]
    c = Counter(v.status for v in rows)
    words = [w for w in _words(c) if w in R.STATUS_WORDS or c.get(w)]
    raw = raw_counts_text(rows)
    parts = [f"{c.get(w, 0)} {w}" + (f": {raw};" if raw and w == R.INCONCLUSIVE else ",")
             for w in words]
    txt = " ".join(parts).rstrip(",;") + f" of {len(rows)}"
    if dep:
        txt += f" (+{len(dep)} dependent row{'s' if len(dep) > 1 else ''} not counted)"
    return txt


def compact(v: Verdict) -> str:
    """One scannable line per row for the two tables (external runs last, marked apart)."""
    if v.units or v.external_units:
        txt = "; ".join(f"{u.label}: {u.status}" for u in v.units)
        if v.external_units:
            ext = "; ".join(f"{u.label}: {u.status}" for u in v.external_units)
            txt = (txt + "; " if txt else "") + f"external, not pooled: {ext}"
        return txt
    if v.checks and v.key != "theory":
        failed = [c.name for c in v.checks if not c.passed]
        txt = f"{len(v.checks) - len(failed)} of {len(v.checks)} checks passed"
        return txt + (": failed " + ", ".join(failed) if failed else "")
    return v.reason


def _unit_counts(units) -> str:
    c = Counter(u.status for u in units)
    return ", ".join(f"{c[w]} {w}" for w in _words(c) if c.get(w))


def overall(v: Verdict) -> str:
    """The overall line under a sub-table.

    For per-unit rows, how the units combine (their reasons are in the sub-table above); otherwise
    the row's reason.
    """
    if not v.units:
        return v.reason
    txt = (f"{_unit_counts(v.units)} of {len(v.units)} (model, site) units; supported only if every "
           "unit is, not supported only if every unit is not (intersection-union)")
    if any(U.is_not_applicable(u.status) for u in v.units):
        txt += "; units whose rule does not apply (one checkpoint) are left out"
    if v.pooled:
        txt += "; external measurements pooled in (--pool)"
    extra = v.reason.split("; also ", 1)
    if len(extra) == 2:
        txt += "; also " + extra[1]
    return txt


def external_overall(v: Verdict) -> str:
    """The line under a row's external sub-table: how its units combine, on their own."""
    return (f"{_unit_counts(v.external_units)} of {len(v.external_units)} external (model, site) "
            "units, combined by the same rule on their own; not part of this row's verdict "
            "(render with --pool to judge by them)")


def external_key(key: str) -> str:
    """The figure key (and ``figures/<key>.png`` name) of a row's external-measurement panels."""
    return f"{key}--external"


#: The heading of a row's external sub-table.
EXTERNAL_HEADING = ("External measurements, shown apart: they do not change the verdict above "
                    "(tangentlab report --pool judges by ours and theirs together)")


def _num(x: float) -> str:
    """A p-value or its floor: 3 significant digits, scientific below 1e-3 (as the rules write)."""
    return f"{x:.2e}" if x != 0 and abs(x) < 1e-3 else f"{x:.3g}"


def p_text(p: float | str | None, n_controls: int | None) -> str:
    """A control p-value with its floor ``1/(1 + n_controls)`` (:func:`~tangentlab.claims.rules.p_floor`).

    ``p = 0.0476, the floor for 20 controls``; ``p = 0.0952, above the floor 0.0476 for 20
    controls``. ``p`` as text keeps its digits. p-values of a control test take the values
    ``k/(1+n)``, so "at the floor" allows for the rounding of a written value (1%).
    """
    floor = R.p_floor(n_controls)
    ftxt = "" if floor is None else f"the floor {_num(floor)} for {n_controls} controls"
    try:
        val = float(p) if p is not None else float("nan")
    except ValueError:
        val = float("nan")
    if val != val:  # NaN: nothing stored
        return "p not stored" + (f" ({ftxt.replace('the floor ', 'floor ')})" if ftxt else "")
    shown = p if isinstance(p, str) else _num(val)
    if floor is None:
        return f"p = {shown}, its floor unknown (the number of controls was not recorded)"
    if val <= floor * 1.01:
        return f"p = {shown}, the floor for {n_controls} controls"
    return f"p = {shown}, above {ftxt}"


#: How the rules (``p = 0.0476 (floor 0.0476)``) and the enrichment unit's note
#: (``p 0.04762 (n_controls 20)``) write a control p-value; :func:`unit_rows` shows both with
#: their floor (:func:`p_text`).
_P_RULE = re.compile(r"\bp = (?P<p>[0-9.eE+-]+|n/a) \(floor (?:[0-9.eE+-]+|unknown)\)")
_P_NOTE = re.compile(r"\bp (?P<p>[0-9.eE+-]+|n/a) \(n_controls (?P<n>\d+|\?)\)(?P<sep>, |; |$)")


def with_p_floor(reason: str, note: str) -> tuple[str, str]:
    """``reason`` and ``note`` with a control p-value written as :func:`p_text` writes it.

    The number of controls is the note's ``n_controls``; where the reason already states the
    p-value, the note's copy of it is dropped (it said the same with one digit more).
    """
    m = _P_NOTE.search(note)
    if m is None:
        return reason, note
    n = int(m["n"]) if m["n"].isdigit() else None

    def text(p: str) -> str:
        return p_text(None if p == "n/a" else p, n)

    reason, hits = _P_RULE.subn(lambda r: text(r["p"]), reason)
    if hits:
        note = (note[:m.start()] + note[m.end():]).strip()
    else:
        note = note[:m.start()] + text(m["p"]) + m["sep"] + note[m.end():]
    return reason, note


def unit_rows(v: Verdict, *, external: bool = False) -> list[tuple[str, str, str, str, str, str]]:
    """(model, site, status, estimate, checkpoints used, why and notes) of each unit.

    ``external``: the row's external units instead of its own. A control p-value shows its
    floor (:func:`with_p_floor`).
    """
    out = []
    for u in v.external_units if external else v.units:
        reason, note = with_p_floor(u.reason, u.note)
        out.append((u.model, u.site, u.status, u.estimate, u.at, reason + (f". {note}" if note else "")))
    return out


def check_rows(v: Verdict) -> list[tuple[str, str, str, str, str]]:
    """(check, what it measures, pass/FAIL, measured vs target, tolerance: kind of error)."""
    return [(c.name, c.what, "pass" if c.passed else "FAIL", f"measured {c.measured} vs target {c.target}",
             (f"{c.tolerance}: " if c.tolerance != "n/a" else "") + c.error_kind)
            for c in v.checks]

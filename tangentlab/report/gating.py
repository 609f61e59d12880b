"""Gating: a prediction reads "supported" or "not supported" only where it was validated end to end.

``tangentlab validate --end-to-end`` (:mod:`tangentlab.validate.end_to_end`) drives planted-truth
trajectories through the real measurement and the report's rules: per prediction row, the rate
of every wrong status. A reproduce keeps that run at :data:`~tangentlab.contract.END_TO_END_DIR`;
``tangentlab report RUN --validation DIR`` reads another one instead (a full one you ran).

A prediction row is **validated at the run's setting** when all of these hold:

- the end-to-end run has checks for the row, and every one passed (each wrong-"supported" and
  wrong-"not supported" rate ≤ 0.05 with its upper Wilson bound ≤ 0.08, power ≥ 0.8), with the
  Wilson bound checked (≥ 45 simulations per null; fewer judge point rates, certifying nothing);
- it ran every scenario (null) the battery knows;
- its setting matches the run's, both ways, for every measurement the row reads (issue 35;
  :func:`weaker`, :data:`WHY_MATCH`): the same eval batches and eval tokens per checkpoint, the
  same checkpoint schedule and early/late cut; at most the run's bootstrap replicates and at
  most the row's (model, site) units (``combine()`` is intersection-union: a row with more units
  errs less often), and per architecture at most its units; the run's r/d inside the range of
  r/d its scenarios measured at; and each measurement's architecture among the planted heads.

A certificate that ships with the code (:mod:`tangentlab.claims.certificates`: a finished
end-to-end run kept as data, with fingerprints of every module on the verdict path) validates a
row by the same test, read from its checks and setting, while no module it fingerprinted has
changed; a stale one validates nothing and names the changed module ("certificate stale:
tangentlab.x changed"). A row a certificate validated names it (:attr:`Verdict.certified`).

A row not validated (no end-to-end run counts as not passed) whose rules said "supported" or
"not supported" reads **inconclusive (not validated)**; its reason keeps the raw verdict (``raw:
supported; ...``) and :attr:`Verdict.gated` says why; other rows are left as they are. Gating
applies to runs opened with :meth:`RunData.open <tangentlab.report.load.RunData.open>` (the report
and ``tangentlab summary``); a :class:`~tangentlab.report.load.RunData` built in code (the
battery's own decisions) keeps the raw verdicts. Everything here reads the opened run's plain
records (the end-to-end run, each stage's manifest); :func:`read_end_to_end`, the one reader of
an end-to-end run directory, is called by the loader.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tangentlab.claims import rules as R
from tangentlab.claims.table import CLAIMS
from tangentlab.errors import DataError

if TYPE_CHECKING:
    from tangentlab.report.load import Stage

__all__ = ["GATED_TEXT", "END_TO_END_HEADER", "Rate", "RowRecord", "EndToEnd", "RunSetting",
           "read_end_to_end", "read_certificate_evidence", "run_settings", "weaker",
           "gate_reason", "gate", "status_text", "end_to_end_rows", "NOT_VALIDATED"]

#: What a gated row's status reads.
GATED_TEXT = "inconclusive (not validated)"

#: Prediction rows the end-to-end battery plants no truth for, and why (from the claims table).
NOT_VALIDATED: dict[str, str] = {c.key: c.not_validated for c in CLAIMS
                                 if c.kind == "prediction" and not c.validated_end_to_end}
#: The columns of the calibration section's "validated end to end" table.
END_TO_END_HEADER = ("prediction", "end-to-end setting", "nulls", "worst wrong-status rate "
                     "[Wilson 95%]", "power [Wilson 95%]", "bound checked", "validated at the "
                     "run's setting")
_KIND, _BOUND_SIMS = "validate/end-to-end", 45
_HINT = "pass a directory written by `tangentlab validate --end-to-end`"


@dataclass(frozen=True)
class Rate:
    """A rate with its Wilson 95% interval, and where it was measured (null, criterion)."""

    value: float
    low: float
    high: float
    null: str = ""
    metric: str = ""

    def text(self) -> str:
        """``0.250 [0.046, 0.699]``, then ``(null, criterion)`` where known."""
        where = ", ".join(x.replace("_", " ") for x in (self.null, self.metric) if x)
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]" + (f" ({where})" if where else "")


@dataclass(frozen=True)
class RowRecord:
    """One prediction row's end-to-end checks.

    Attributes:
        key: the row key (``enrichment``).
        nulls: ``(null, every check of the row under it passed)`` per null, in battery order.
        worst_wrong: the highest wrong-status rate (None: the row has no wrong-status check).
        power: the power (None: no power check).
        bound_checked: every check was judged with its Wilson bound.
        failed: the failed checks, in words.
    """

    key: str
    nulls: tuple[tuple[str, bool], ...]
    worst_wrong: Rate | None
    power: Rate | None
    bound_checked: bool
    failed: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """Every check passed, with its bound checked."""
        return bool(self.nulls) and not self.failed and self.bound_checked


@dataclass(frozen=True)
class EndToEnd:
    """An end-to-end validation run, as the report reads it.

    Attributes:
        path: its directory (or, for a certificate, its file).
        setting: the manifest's ``setting`` (sims, units, n_batches, tokens_per_checkpoint,
            n_boot, rank_over_dim, scenarios, scenarios_known; empty when it recorded none).
        rows: row key → :class:`RowRecord`.
        certificate: for a certificate, what it is in words
            (:func:`~tangentlab.claims.certificates.certificate_text`); empty for a run directory.
        stale: for a certificate, the verdict-path modules changed since it was written
            (``tangentlab.x changed``); a stale certificate validates nothing.
    """

    path: Path
    setting: Mapping[str, Any]
    rows: Mapping[str, RowRecord]
    certificate: str = ""
    stale: tuple[str, ...] = ()

    def setting_text(self) -> str:
        """The setting in words (``standard: 4 sims × 1 unit, 16 batches × 4 × 64 tokens, ...``)."""
        s = self.setting
        if not s:
            return "setting not recorded"
        lo, hi = (s.get("rank_over_dim") or [math.nan, math.nan])[:2]
        return (f"{s.get('name', '?')}: {s.get('sims')} sims × {s.get('units')} unit(s), "
                f"{s.get('n_batches')} batches × {s.get('batch_size')} × {s.get('seq_len')} tokens, "
                f"{s.get('n_boot')} bootstrap, r/d {_frac(lo)}–{_frac(hi)}, "
                f"{len(s.get('scenarios') or ())} of {len(s.get('scenarios_known') or ())} nulls")


def _frac(x: Any) -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "?"
    if x > 0 and abs(1 / x - round(1 / x)) < 1e-9:
        return f"1/{round(1 / x)}"
    return f"{x:.3g}"


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _records(checks: Sequence[Mapping[str, Any]]) -> dict[str, RowRecord]:
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for c in checks:
        rows.setdefault(str(c["row"]), []).append(c)
    out = {}
    for key, mine in rows.items():
        nulls: dict[str, bool] = {}
        for c in mine:
            nulls[str(c.get("null", ""))] = nulls.get(str(c.get("null", "")), True) and bool(c["passed"])
        rates = [Rate(_num(c.get("measured")), _num(c.get("ci_low")), _num(c.get("ci_high")),
                      str(c.get("null", "")), str(c.get("metric", "")))
                 for c in mine if str(c.get("metric", "")).startswith("wrong")]
        rates = [r for r in rates if not math.isnan(r.value)]
        worst = max(rates, key=lambda r: (r.value, r.high)) if rates else None
        powers = [Rate(_num(c.get("measured")), _num(c.get("ci_low")), _num(c.get("ci_high")),
                       str(c.get("null", ""))) for c in mine if c.get("metric") == "power"]
        power = min(powers, key=lambda r: r.value) if powers else None
        failed = tuple(f"{c.get('null', '?')} {str(c.get('metric', '?')).replace('_', ' ')} "
                       f"{_num(c.get('measured')):.2f}" for c in mine if not c["passed"])
        out[key] = RowRecord(key, tuple(nulls.items()), worst, power,
                             all(bool(c.get("bound_checked")) for c in mine), failed)
    return out


def read_end_to_end(path: str | Path) -> EndToEnd:
    """Read an end-to-end validation run directory (``manifest.json`` and ``checks.json``).

    Raises:
        DataError: ``path`` is not a directory, holds no manifest or a run of another kind, or
            its ``checks.json`` is missing or not a list of checks with ``row`` and ``passed``.
    """
    from tangentlab.readers import check_fields, read_json
    from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME

    p = Path(path)
    if not p.is_dir():
        raise DataError(f"end-to-end validation run {str(p)!r} is not a directory; {_HINT}")
    manifest = read_json(p / MANIFEST_NAME, hint=_HINT)
    if manifest.get("kind") != _KIND:
        raise DataError(f"{str(p)!r} holds a {manifest.get('kind')!r} run, not an end-to-end "
                        f"validation run ({_KIND!r}); {_HINT}")
    checks = read_json(p / CHECKS_NAME, expect=list, hint=_HINT)
    for i, c in enumerate(checks):
        check_fields(c, where=f"{str(p / CHECKS_NAME)!r} check #{i}",
                     fields={"row": str, "passed": bool}, hint=_HINT)
    setting = manifest.get("setting")
    return EndToEnd(path=p, setting=setting if isinstance(setting, dict) else {},
                    rows=_records(checks))


def read_certificate_evidence(path: str | Path) -> EndToEnd:
    """A certificate file (:mod:`tangentlab.claims.certificates`) read as the gate reads a run.

    Raises:
        DataError: ``path`` is not a certificate, or a check in it has no ``row`` or ``passed``.
    """
    from tangentlab.claims.certificates import (
        certificate_stale,
        certificate_text,
        read_certificate,
    )
    from tangentlab.readers import check_fields

    p = Path(path)
    cert = read_certificate(p)
    for i, c in enumerate(cert["checks"]):
        check_fields(c, where=f"{str(p)!r} check #{i}", fields={"row": str, "passed": bool},
                     hint="write it again with `tangentlab validate certify`")
    return EndToEnd(path=p, setting=cert["setting"], rows=_records(cert["checks"]),
                    certificate=certificate_text(p.name, cert),
                    stale=tuple(certificate_stale(cert)))


@dataclass(frozen=True)
class RunSetting:
    """The settings of one measurement a row reads (from its ``manifest.json``).

    ``steps``: its checkpoint schedule (None: not recorded); ``early_fraction``: where its
    early/late cut falls (NaN: not recorded); ``arch``: ``encoder`` or ``decoder`` ("" when not
    recorded); ``sites``: the sites it measured (its units in a row that reads them all).
    """

    stage: str
    n_batches: float
    tokens: float
    n_boot: float
    rank_over_dim: float
    steps: tuple[float, ...] | None = None
    early_fraction: float = math.nan
    arch: str = ""
    sites: int = 0


def run_settings(stages: Sequence[Stage]) -> list[RunSetting]:
    """The measure settings of each done stage in ``stages`` (NaN where one recorded none)."""
    out = []
    for st in stages:
        if not st.done:
            continue
        stage, m = st.name, st.manifest
        cfg = m.get("config") if isinstance(m.get("config"), dict) else {}
        nb = _num(cfg.get("n_batches"))
        tokens = _num(m.get("eval_tokens_per_checkpoint"))
        if math.isnan(tokens):
            tokens = nb * _num(cfg.get("batch_size")) * _num(m.get("seq_len") or cfg.get("seq_len"))
        dim = _num(m.get("hidden_size"))
        cks = m.get("checkpoints")
        steps = (tuple(_num(c.get("step")) for c in cks if isinstance(c, dict))
                 if isinstance(cks, list) and cks else None)
        out.append(RunSetting(stage, nb, tokens, _num(cfg.get("n_boot")),
                              _num(cfg.get("rank")) / dim if dim > 0 else math.nan, steps,
                              _num(cfg.get("early_fraction")), str(m.get("arch") or ""),
                              len(m.get("sites") or ())))
    return out


#: Why each field of the setting must match (issue 35: the gate compares both ways).
WHY_MATCH = {
    "eval batches": "the interval resamples them, and an interval validated on more batches "
                    "says nothing of fewer, nor a bias measured on fewer of more data",
    "eval tokens per checkpoint": "a biased statistic errs more often with more data",
    "bootstrap replicates": "may be more in the run (more replicates only steady the interval's "
                            "endpoints), not fewer",
    "units": "may be more in the row (intersection-union: a row errs only when every unit "
             "errs), not fewer",
    "checkpoint schedule": "weakens-late and every comparison with step 0 read the checkpoints",
    "architecture": "an encoder's rows come through the masked-LM path (MLM-masked batches, the "
                    "loss at masked positions), which a causal-LM twin never runs",
}


def _steps_text(steps) -> str:
    xs = [_g(float(x)) for x in steps]
    shown = ", ".join(xs) if len(xs) <= 8 else ", ".join(xs[:4] + ["…"] + xs[-2:])
    return f"{shown} ({len(xs)} checkpoints)"


def _schedule(setting: Mapping[str, Any], settings: Sequence[RunSetting]) -> list[str]:
    """Where the validated schedule, cut and heads (no ``archs``: causal) differ from the runs'."""
    e2e_steps, planted = setting.get("steps"), list(setting.get("archs") or ["decoder"])
    if not e2e_steps:
        return ["the end-to-end run recorded no checkpoint schedule"]
    out = [f"units: validated at {n} {a} unit(s), the run has {have}"  # intersection-union
           for a, n in sorted((setting.get("units_per_arch") or {}).items())
           if (have := sum(s.sites for s in settings if s.arch == a)) < n]
    for s in settings:
        if s.arch not in planted:
            out.append(f"architecture: validated on {'/'.join(planted)} twins, the run has "
                       f"{s.arch or 'an unrecorded one'} ({s.stage})")
        if s.steps is None:
            out.append(f"the run's checkpoint schedule not recorded ({s.stage})")
        elif [float(x) for x in e2e_steps] != list(s.steps):
            out.append(f"checkpoint schedule: validated at steps {_steps_text(e2e_steps)}, the "
                       f"run measured {_steps_text(s.steps)} ({s.stage})")
        ef = _num(setting.get("early_fraction"))
        if not math.isnan(s.early_fraction) and abs(ef - s.early_fraction) > 1e-12:
            out.append(f"early/late cut: validated at {_g(ef)} of the last step, the run's "
                       f"{_g(s.early_fraction)} ({s.stage})")
    return out


def weaker(setting: Mapping[str, Any], settings: Sequence[RunSetting], n_units: int) -> list[str]:
    """Where the end-to-end ``setting`` does not cover the runs' ``settings`` (empty: it does).

    Both ways (issue 35): the eval batches, tokens per checkpoint, checkpoint schedule and
    early/late cut must match; the run may have more bootstrap replicates and the row more units
    (in all and per architecture) than were validated, never fewer (:data:`WHY_MATCH`); the run's
    r/d must lie in the range the scenarios measured, and each measurement's architecture among
    the planted heads. A setting a measurement did not record cannot be shown covered.
    """
    out = []
    for attr, key, word, more_ok in (("n_batches", "n_batches", "eval batches", False),
                                     ("tokens", "tokens_per_checkpoint",
                                      "eval tokens per checkpoint", False),
                                     ("n_boot", "n_boot", "bootstrap replicates", True)):
        e2e = _num(setting.get(key))
        for s in settings:
            mine = getattr(s, attr)
            if math.isnan(mine):  # a setting nobody recorded cannot be shown to be covered
                continue
            if math.isnan(e2e) or (mine < e2e if more_ok else mine != e2e):
                out.append(f"{word}: validated at {_g(e2e)}, the run has {_g(mine)} ({s.stage})")
        unknown = [s.stage for s in settings if math.isnan(getattr(s, attr))]
        if unknown:
            out.append(f"the run's {word} not recorded ({', '.join(unknown)})")
    units = _num(setting.get("units"))
    if math.isnan(units) or units > n_units:
        out.append(f"units: validated at {_g(units)}, the row has {n_units}")
    out += _schedule(setting, settings)
    lo, hi = (list(setting.get("rank_over_dim") or []) + [math.nan, math.nan])[:2]
    for s in settings:
        rd = s.rank_over_dim
        if math.isnan(rd):
            out.append(f"the run's r/d not recorded ({s.stage})")
        elif not (_num(lo) - 1e-12 <= rd <= _num(hi) + 1e-12):
            out.append(f"the run's r/d {_frac(rd)} ({s.stage}) outside the measured "
                       f"{_frac(lo)}–{_frac(hi)}")
    return out


def _g(x: float) -> str:
    return "?" if math.isnan(x) else f"{x:g}"


def gate_reason(e2e: EndToEnd | None, key: str, settings: Sequence[RunSetting],
                n_units: int) -> str:
    """Why row ``key`` is not validated at the run's setting ("" when it is)."""
    if e2e is None:
        return ("no end-to-end validation run (a reproduce writes it to validate/end-to-end; "
                "`tangentlab report RUN --validation DIR` reads another)")
    if e2e.stale:
        more = f" and {len(e2e.stale) - 3} more" if len(e2e.stale) > 3 else ""
        return "certificate stale: " + ", ".join(e2e.stale[:3]) + more
    rec = e2e.rows.get(key)
    if rec is None:
        return NOT_VALIDATED.get(key, "the end-to-end run has no check of this row")
    why = []
    run_wide = e2e.rows.get("")  # checks of the whole run (every simulation ran)
    if run_wide is not None and run_wide.failed:
        why.append("a simulation raised, so nothing is certified: " + ", ".join(run_wide.failed))
    if rec.failed:
        more = f" and {len(rec.failed) - 3} more" if len(rec.failed) > 3 else ""
        why.append("checks failed: " + ", ".join(rec.failed[:3]) + more)
    if not rec.bound_checked:
        why.append(f"point rates only ({e2e.setting.get('sims', '?')} simulation(s) per null; "
                   f"the Wilson bound needs >= {_BOUND_SIMS})")
    s = e2e.setting
    if not s:
        why.append("its manifest records no setting (rerun `tangentlab validate --end-to-end`)")
    else:
        left = [n for n in s.get("scenarios_known") or () if n not in (s.get("scenarios") or ())]
        if left:
            why.append(f"{len(left)} null(s) not run ({', '.join(left[:3])}"
                       + (", ..." if len(left) > 3 else "") + ")")
        why += [f"setting differs: {w}" for w in weaker(s, settings, n_units)]
    return "; ".join(why)


def _judged(v: Any, *, external: bool) -> list[str]:
    if external:
        return [s.stage for s in v.sources if s.external]
    return [s.stage for s in v.sources if v.pooled or not s.external]


def _reason(e2e: EndToEnd | None, certificates: Sequence[EndToEnd], key: str,
            settings: Sequence[RunSetting], n_units: int) -> tuple[str, str]:
    """``(why not validated, "")``, or ``("", certificate)`` when one validates the row.

    The run's own end-to-end run is asked first, then each certificate; the reasons of all of
    them are kept when none validates it.
    """
    why = gate_reason(e2e, key, settings, n_units)
    if not why:
        return "", (e2e.certificate if e2e is not None else "")
    reasons = [why]
    for cert in certificates:
        why_cert = gate_reason(cert, key, settings, n_units)
        if not why_cert:
            return "", cert.certificate
        reasons.append(f"{cert.certificate}: {why_cert}")
    return "; ".join(reasons), ""


def gate(verdicts: Sequence[Any], e2e: EndToEnd | None, stages: Mapping[str, Stage],
         certificates: Sequence[EndToEnd] = ()) -> list[Any]:
    """The verdicts, each prediction row gated on the end-to-end run ``e2e`` (see the module).

    ``stages``: the opened run's stages by name (the settings of the measurements a row read);
    ``certificates``: shipped certificates (:func:`read_certificate_evidence`), any of which may
    validate a row the run's own end-to-end run does not.
    """
    out = []
    for v in verdicts:
        if v.section != "prediction":
            out.append(v)
            continue
        if v.status in (R.SUPPORTED, R.NOT_SUPPORTED):
            why, by = _reason(e2e, certificates, v.key,
                              run_settings([stages[s] for s in _judged(v, external=False)]),
                              len(v.units))
            if why:
                v = replace(v, status=R.INCONCLUSIVE, raw_status=v.status, gated=why,
                            reason=f"not validated end to end ({why}); raw: {v.status}; {v.reason}")
            elif by:
                v = replace(v, certified=by, reason=f"validated by {by}; {v.reason}")
        if v.external_status in (R.SUPPORTED, R.NOT_SUPPORTED):
            why, by = _reason(e2e, certificates, v.key,
                              run_settings([stages[s] for s in _judged(v, external=True)]),
                              len(v.external_units))
            if why:
                v = replace(v, external_status=R.INCONCLUSIVE,
                            external_reason=f"not validated end to end ({why}); raw: "
                                            f"{v.external_status}; {v.external_reason}")
            elif by:
                v = replace(v, external_reason=f"validated by {by}; {v.external_reason}")
        out.append(v)
    return out


def status_text(v: Any) -> str:
    """What a row's status reads: :data:`GATED_TEXT` for a gated row, else its status word."""
    return GATED_TEXT if getattr(v, "gated", "") else v.status


def end_to_end_rows(verdicts: Sequence[Any], e2e: EndToEnd | None,
                    stages: Mapping[str, Stage],
                    certificates: Sequence[EndToEnd] = ()) -> list[tuple[str, ...]]:
    """One row per prediction verdict for the "validated end to end" table (:data:`END_TO_END_HEADER`).

    The row's evidence is the certificate that validated it, else the run's own end-to-end run.
    """
    out = []
    for v in verdicts:
        if v.section != "prediction":
            continue
        shown = next((c for c in certificates if v.certified and c.certificate == v.certified),
                     e2e)
        why, by = (v.gated, "") if v.gated else _reason(
            e2e, certificates, v.key, run_settings([stages[s] for s in _judged(v, external=False)]),
            len(v.units))
        if not why:
            result = f"yes ({by})" if by else "yes"
        elif v.gated:
            result = f"no: gated ({v.gated}); raw {v.raw_status}"
        else:
            result = f"no ({why}); the rules said {v.status}, which gating leaves as it is"
        rec = shown.rows.get(v.key) if shown is not None else None
        if rec is None:
            out.append((v.title, shown.setting_text() if shown is not None else "no end-to-end run",
                        "no check of this row" if shown is not None else "", "", "", "", result))
            continue
        n_ok = sum(ok for _, ok in rec.nulls)
        bad = [n for n, ok in rec.nulls if not ok]
        nulls = f"{n_ok}/{len(rec.nulls)} pass" + (f"; fail: {', '.join(bad)}" if bad else "")
        out.append((v.title, shown.setting_text(), nulls,
                    rec.worst_wrong.text() if rec.worst_wrong else "n/a",
                    rec.power.text() if rec.power else "n/a",
                    "yes" if rec.bound_checked else "no (point rates only)", result))
    return out

"""A certificate: a finished end-to-end run's checks kept as data, tied to the code that made them.

``tangentlab validate certify RUN --out FILE`` (issue 35, item 5) turns a finished end-to-end run
directory into one small JSON file that can be committed with the code:

- ``kind`` (:data:`CERTIFICATE_KIND`), ``created`` (when the run finished), ``commit`` (the git
  commit every simulation ran at), ``setting`` (the run's ``EndToEndConfig.setting()``: sims,
  units, schedule, windows, replicates, r/d, nulls), ``config`` and ``config_hash``;
- ``checks``: every check of the run (row, null, truth, metric, measured, target, n, Wilson
  interval, passed, bound checked), the wrong-status table a reader can audit;
- ``rows``: per prediction row, whether every one of its checks passed with its bound checked
  and no simulation raised (the gate's own reading, :func:`tangentlab.report.gating.read_end_to_end`);
- ``statuses``: every simulation's statuses, compactly (``rows``, one letter per status word in
  ``codes``, and per null one string per simulation), so that :func:`spot_check` can re-run any
  of them and compare;
- ``fingerprints``: :func:`tangentlab.claims.fingerprints.verdict_path_fingerprints` of the code
  the simulations ran, read from that commit's files in git (``git archive``), so a certificate
  can be written from any clean checkout that has the commit. When a module on the verdict path
  changes, :func:`tangentlab.claims.fingerprints.stale_modules` names it, and the certificate no
  longer speaks for the code.

Reading one (:func:`~tangentlab.claims.certificates.read_certificate`, :data:`CERTIFICATE_KIND`,
:func:`~tangentlab.claims.certificates.certificate_stale`) lives in the claims package, where the
report reads the certificates that ship with the code. :func:`spot_check` re-runs a few of a
certificate's simulations with today's code (the reproduce's validate stage does, for every
fresh shipped certificate) and says whether their statuses come back identical.

A certificate is only written for a finished run (not a shard) whose simulations ran at a clean,
known commit.

The shipped certificates' tables are a generated block of ``docs/validation.md``
(:func:`certificates_markdown`); regenerate it with one command::

    python -m tangentlab.validate.certificate docs/validation.md        # or: make docs

and ``--check`` exits 1 when the page's block is out of date.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tangentlab.claims.certificates import CERTIFICATE_KIND, certificate_stale, read_certificate
from tangentlab.errors import DataError
from tangentlab.validate.end_to_end_records import _num  # a cell as a finite float, or None

__all__ = ["CERTIFICATE_KIND", "make_certificate", "write_certificate", "read_certificate",
           "certificate_stale", "fingerprints_at", "spot_check", "certificate_markdown",
           "certificates_markdown", "checks_table", "DOCS_BLOCK", "main"]

#: The name of the generated block in ``docs/validation.md`` (:func:`main`).
DOCS_BLOCK = "certificates"


def fingerprints_at(commit: str) -> dict[str, str]:
    """The verdict-path fingerprints of ``commit``'s files (read from git, not the working tree).

    DataError when this checkout's git does not have the commit.
    """
    import io
    import subprocess
    import tarfile
    import tempfile

    from tangentlab.claims.fingerprints import verdict_path_fingerprints

    repo = Path(__file__).resolve().parents[2]
    try:
        tar = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit,
                              "tangentlab"], capture_output=True, check=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise DataError(f"cannot read commit {commit[:12]}'s files from git in {str(repo)!r} "
                        f"({exc}); certify in a clone that has the commit the simulations ran "
                        "at") from None
    with tempfile.TemporaryDirectory(prefix="tangentlab-certify-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
            try:
                archive.extractall(tmp, filter="data")
            except TypeError:  # Python < 3.10.12 has no extraction filters (git's own archive)
                archive.extractall(tmp)  # noqa: S202
        return verdict_path_fingerprints(Path(tmp) / "tangentlab")


def _statuses(run: Path) -> dict[str, Any]:
    """Every simulation's statuses, compactly (module docstring), from ``statuses.csv``."""
    import csv

    from tangentlab.validate.end_to_end_records import STATUSES_NAME

    by: dict[str, dict[int, dict[str, str]]] = {}
    with open(run / STATUSES_NAME, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r.get("metric") == "status":
                by.setdefault(r["null"], {}).setdefault(int(r["sim"]), {})[r["row"]] = r["value"]
    rows = sorted({k for sims in by.values() for st in sims.values() for k in st})
    words = sorted({w for sims in by.values() for st in sims.values() for w in st.values()})
    codes = {w: "abcdefghijklmnopqrstuvwxyz"[i] for i, w in enumerate(words)}
    return {"rows": rows, "codes": codes,
            "by_null": {null: ["".join(codes[st[k]] if k in st else "-" for k in rows)
                               for _, st in sorted(sims.items())]
                        for null, sims in by.items()}}


def recorded_statuses(cert: dict[str, Any], null: str, sim: int) -> dict[str, str]:
    """Simulation ``sim`` of ``null``'s statuses as ``cert`` recorded them (row → status word)."""
    st = cert.get("statuses") or {}
    words = {code: word for word, code in (st.get("codes") or {}).items()}
    line = (st.get("by_null") or {}).get(null, [])
    if sim >= len(line):
        raise DataError(f"the certificate records no simulation {sim} of {null!r}")
    return {row: words[c] for row, c in zip(st["rows"], line[sim]) if c != "-"}


def make_certificate(run_dir: str | Path) -> dict[str, Any]:
    """The certificate of finished end-to-end run ``run_dir`` (module docstring).

    DataError for an unfinished run, a shard, a run of another kind, simulations run at a dirty
    or unknown commit, or a commit this checkout's git does not have.
    """
    from tangentlab.readers import read_json
    from tangentlab.report.gating import read_end_to_end
    from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME
    from tangentlab.validate.end_to_end_records import require_finished

    run = Path(run_dir)
    require_finished(run)
    e2e = read_end_to_end(run)  # refuses another kind of run (a shard included)
    manifest = read_json(run / MANIFEST_NAME)
    sims_git = manifest.get("simulations_git") or {}
    commit, dirty = sims_git.get("commit"), sims_git.get("dirty")
    if not commit or dirty is not False:
        raise DataError(f"the simulations of {str(run)!r} ran at commit {commit!r} (dirty: "
                        f"{dirty}); a certificate needs a clean, known commit: commit, rerun "
                        "the end-to-end run, then certify it")
    keep = ("row", "null", "truth", "metric", "measured", "target", "n", "ci_low", "ci_high",
            "passed", "bound_checked")
    checks = [{k: c.get(k) for k in keep} for c in read_json(run / CHECKS_NAME, expect=list)]
    raised = e2e.rows.get("")
    rows = {key: bool(rec.passed and not (raised is not None and raised.failed))
            for key, rec in e2e.rows.items() if key}
    return {"kind": CERTIFICATE_KIND, "created": manifest.get("created"), "commit": commit,
            "setting": manifest.get("setting") or {}, "config": manifest.get("config") or {},
            "config_hash": manifest.get("config_hash"), "checks": checks, "rows": rows,
            "statuses": _statuses(run), "fingerprints": fingerprints_at(commit)}


def spot_check(cert: dict[str, Any], name: str, *, k: int, work: str | Path,
               seed: int = 0) -> list[dict[str, Any]]:
    """Re-run ``k`` of ``cert``'s simulations with today's code; one check per simulation.

    The simulations are drawn without replacement from every (null, sim) the certificate
    recorded (``numpy.random.default_rng(seed)``), run as the end-to-end run ran them (a
    simulation that raises reads "not run" in every row) at the certificate's own config, and
    each check passes when every row's status is the recorded one. A check is a dict in the battery's
    form (``name``, ``kind``, ``measured``, ``target``, ``passed``, ``detail``).
    """
    import numpy as np

    from tangentlab.config import config_from_mapping
    from tangentlab.validate.end_to_end import _shared_text, _simulate_or_record
    from tangentlab.validate.end_to_end_config import EndToEndConfig

    cfg = config_from_mapping(EndToEndConfig, cert["config"], where=f"certificate {name}")
    pairs = [(null, i) for null, line in sorted(((cert.get("statuses") or {}).get("by_null")
                                                 or {}).items()) for i in range(len(line))]
    if not pairs:
        raise DataError(f"certificate {name} records no simulation statuses to re-run; write it "
                        "again with `tangentlab validate certify`")
    picks = np.random.default_rng(seed).choice(len(pairs), size=min(k, len(pairs)), replace=False)
    text, out = _shared_text(cfg), []
    for null, sim in (pairs[int(i)] for i in picks):
        want = recorded_statuses(cert, null, sim)
        got = _simulate_or_record(cfg, null, sim, text, Path(work)).statuses
        same = all(got.get(row) == word for row, word in want.items())
        diff = "; ".join(f"{row}: recorded {word}, now {got.get(row)}"
                         for row, word in want.items() if got.get(row) != word)
        out.append({"name": f"certificate {name}: simulation {null} #{sim} comes back identical",
                    "kind": "certificate spot check", "measured": float(same),
                    "target": "1 (every row's status as recorded)", "low": 1.0, "high": None,
                    "passed": bool(same), "n": 1, "certificate": name,
                    "detail": diff or f"every row's status is the recorded one ({len(want)} rows)"})
    return out


def _check_out(out: Path) -> None:
    """OutputPathError unless ``out`` is new or an earlier certificate (never a user's file)."""
    from tangentlab.errors import OutputPathError

    if out.is_dir():
        raise OutputPathError(f"--out {str(out)!r} is a directory; give a file name, e.g. "
                              f"{str(out / 'certificate.json')!r}")
    for folder in out.parents:
        if (folder / "manifest.json").is_file():
            raise OutputPathError(f"--out {str(out)!r} lies inside the run directory "
                                  f"{str(folder)!r}; write the certificate outside any run")
    if out.exists():
        try:
            read_certificate(out)
        except DataError:
            raise OutputPathError(f"--out {str(out)!r} exists and is not a certificate; "
                                  "choose a new file (only a certificate is replaced)") from None


def write_certificate(run_dir: str | Path, out: str | Path) -> Path:
    """Write the certificate of ``run_dir`` to ``out`` atomically; returns ``out``.

    ``out`` is checked first and the certificate built in full before anything is written: a
    refused path or run writes nothing, and a kill leaves at most a temporary file that is
    never read as a certificate. Only an earlier certificate is replaced.
    """
    from tangentlab.atomic import atomic_write_json

    out = Path(out)
    _check_out(out)
    return atomic_write_json(out, make_certificate(run_dir))


def _number(x: Any) -> str:
    """A rate or bound to three decimals; "n/a" when missing or not a finite number."""
    v = _num(x)
    return "n/a" if v is None else f"{v:.3f}"


def checks_table(checks: Sequence[dict[str, Any]]) -> str:
    """End-to-end checks as a Markdown table, one line each, in their order.

    Columns: row and null ("(all)" for a check over every row or null), truth, check (the
    metric), count (``k/n`` with ``k = measured × n``; for ``errors``, how many simulations
    raised), rate, Wilson 95%, target, judged ("Wilson bound": a certifying run's criteria;
    "screen": too few simulations for the bound) and result. A number that is missing or not
    finite reads "n/a".
    """
    lines = ["| row | null | truth | check | count | rate | Wilson 95% | target | judged | result |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        m, n = _num(c.get("measured")), int(_num(c.get("n")) or 0)
        if c.get("metric") == "errors":
            count, rate, ci = ("n/a" if m is None else f"{m:.0f} of {n} raised"), "", ""
        else:
            count = "n/a" if m is None or n <= 0 else f"{round(m * n)}/{n}"
            rate, ci = _number(m), f"[{_number(c.get('ci_low'))}, {_number(c.get('ci_high'))}]"
        cells = (c.get("row") or "(all)", c.get("null") or "(all)", c.get("truth") or "",
                 c.get("metric") or "", count, rate, ci, c.get("target") or "",
                 "Wilson bound" if c.get("bound_checked") else "screen",
                 "pass" if c.get("passed") else "**FAIL**")
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    return "\n".join(lines)


def certificate_markdown(name: str, cert: dict[str, Any]) -> str:
    """One certificate as Markdown, every figure read from ``cert``.

    Who made it and when, whether today's code is its code (:func:`certificate_stale` against
    today's tree), its setting, the rows it validates, and every check (:func:`checks_table`, in
    the certificate's order). DataError when ``cert`` lacks a field a certificate has.
    """
    from tangentlab.claims.certificates import certificate_text

    for field, kind in (("checks", list), ("rows", dict), ("fingerprints", dict)):
        if not isinstance(cert.get(field), kind):
            raise DataError(f"certificate {name!r} has no {kind.__name__} field {field!r}; "
                            "write it again with `tangentlab validate certify`")
    stale = certificate_stale(cert)
    code = ("**stale**: " + "; ".join(stale) + " (it validates nothing until re-run)" if stale
            else "**fresh**: every module on the verdict path is as its simulations ran it")
    setting = cert.get("setting") or {}
    out = [f"#### Certificate `{name}`", "", f"{certificate_text(name, cert)}; {code}.", "",
           "Setting: " + "; ".join(f"`{k}` {json.dumps(v)}" for k, v in sorted(setting.items())
                                   if k not in ("name", "scenarios_known")) + ".", "",
           "| row | validated |", "|---|---|"]
    out += [f"| {row} | {'yes' if ok else 'no'} |" for row, ok in sorted(cert["rows"].items())]
    return "\n".join(out) + "\n\n" + checks_table(cert["checks"]) + "\n"


def certificates_markdown(paths: list[Path] | None = None) -> str:
    """The generated block of ``docs/validation.md``, its markers included.

    Every certificate in ``paths`` (default: the shipped ones,
    :func:`tangentlab.claims.certificates.shipped_certificates`) by name, or a line saying none
    ships.
    """
    from tangentlab.claims.certificates import shipped_certificates

    paths = shipped_certificates() if paths is None else paths
    head = (f"<!-- BEGIN {DOCS_BLOCK} (generated by `python -m tangentlab.validate.certificate "
            "docs/validation.md` from tangentlab/claims/shipped/*.json; do not edit) -->\n\n")
    if not paths:
        body = ("No certificate ships with this version: `tangentlab/claims/shipped/` holds "
                "none,\nso no report's prediction row is validated by one.\n")
    else:
        body = "\n".join(certificate_markdown(p.stem, read_certificate(p)) for p in paths)
    return head + body + f"\n<!-- END {DOCS_BLOCK} -->\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m tangentlab.validate.certificate [PAGE] [--check]``.

    Writes (or with ``--check`` compares) the shipped certificates' block of PAGE (default
    ``docs/validation.md``).
    """
    from tangentlab.cli_reference import write_generated_page

    return write_generated_page(argv, module="tangentlab.validate.certificate",
                                default="docs/validation.md",
                                description="Write the shipped certificates' tables into the "
                                            "validation page.",
                                render=certificates_markdown, block=DOCS_BLOCK)


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(main())

"""A certificate: a finished end-to-end run's checks kept as data, tied to the code that made them.

``tangentlab validate certify RUN --out FILE`` (issue 35, item 5) turns a finished end-to-end run
directory into one small JSON file that can be committed with the code:

- ``kind`` (:data:`CERTIFICATE_KIND`), ``created`` (when the run finished), ``commit`` (the git
  commit every simulation ran at), ``setting`` (the run's ``EndToEndConfig.setting()``: sims,
  units, schedule, windows, replicates, r/d, nulls), ``config`` and ``config_hash``;
- ``checks``: every check of the run (row, null, metric, measured, n, Wilson interval, passed,
  bound checked), the wrong-status table a reader can audit;
- ``rows``: per prediction row, whether every one of its checks passed with its bound checked
  and no simulation raised (the gate's own reading, :func:`tangentlab.report.gating.read_end_to_end`);
- ``fingerprints``: :func:`tangentlab.claims.fingerprints.verdict_path_fingerprints` of the code at that
  commit. When a module on the verdict path changes, :func:`tangentlab.claims.fingerprints.stale_modules`
  names it, and the certificate no longer speaks for the code.

Reading one (:func:`~tangentlab.claims.certificates.read_certificate`, :data:`CERTIFICATE_KIND`,
:func:`~tangentlab.claims.certificates.certificate_stale`) lives in the claims package, where the
report reads the certificates that ship with the code.

A certificate is only written for a finished run (not a shard) whose simulations ran at a clean
commit that is also the checkout's current one: the fingerprints are read from the working tree,
so they must be that commit's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tangentlab.claims.certificates import CERTIFICATE_KIND, certificate_stale, read_certificate
from tangentlab.errors import DataError

__all__ = ["CERTIFICATE_KIND", "make_certificate", "write_certificate", "read_certificate",
           "certificate_stale"]


def make_certificate(run_dir: str | Path) -> dict[str, Any]:
    """The certificate of finished end-to-end run ``run_dir`` (module docstring).

    DataError for an unfinished run, a shard, a run of another kind, or simulations run at a
    dirty or unknown commit, or at another commit than the checkout's.
    """
    from tangentlab.claims.fingerprints import verdict_path_fingerprints
    from tangentlab.readers import read_json
    from tangentlab.report.gating import read_end_to_end
    from tangentlab.runs import CHECKS_NAME, MANIFEST_NAME, git_commit
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
    here = git_commit()
    if here.get("commit") != commit or here.get("dirty") is not False:
        raise DataError(f"the checkout is at {str(here.get('commit'))[:12]} (dirty: "
                        f"{here.get('dirty')}), the simulations ran at {commit[:12]}: the "
                        "fingerprints are read from the working tree, so certify at that commit")
    keep = ("row", "null", "metric", "measured", "n", "ci_low", "ci_high", "passed",
            "bound_checked")
    checks = [{k: c.get(k) for k in keep} for c in read_json(run / CHECKS_NAME, expect=list)]
    raised = e2e.rows.get("")
    rows = {key: bool(rec.passed and not (raised is not None and raised.failed))
            for key, rec in e2e.rows.items() if key}
    return {"kind": CERTIFICATE_KIND, "created": manifest.get("created"), "commit": commit,
            "setting": manifest.get("setting") or {}, "config": manifest.get("config") or {},
            "config_hash": manifest.get("config_hash"), "checks": checks, "rows": rows,
            "fingerprints": verdict_path_fingerprints()}


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

"""Fingerprints of the source modules a verdict runs through, to tie a certificate to its code.

Part of the claims package (a leaf: it reads files with the standard library and imports no
pillar), so the report can tell a stale certificate without importing the code it fingerprints.

An end-to-end certificate (:mod:`tangentlab.validate.certificate`) is only evidence for the code
that produced it. :func:`verdict_path_fingerprints` hashes every module on the verdict path
(:data:`VERDICT_PATH`: the measurement, the rules, the report's builders and gate, the planted
family and the battery's judge); :func:`stale_modules` names those that changed since a
certificate recorded them, so a report can say "certificate stale: MODULE changed" and a
developer knows to re-run it.

Module names are dotted (``tangentlab.measure.batch_test``); a fingerprint is the first 16 hex
digits of the SHA-256 of the file's bytes. Files are read, never imported (fast, and safe in a
process that must not load torch).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["VERDICT_PATH", "module_files", "verdict_path_fingerprints", "stale_modules"]

#: Packages and modules whose code decides a verdict: what a certificate's fingerprint covers.
VERDICT_PATH: tuple[str, ...] = (
    "tangentlab.measure",  # the statistics
    "tangentlab.empirical.loading",  # models, checkpoints, sites, capture, eval batches
    "tangentlab.empirical.measurement",  # the measurement protocol
    "tangentlab.claims",  # the rules and the claims table
    "tangentlab.report.units",
    "tangentlab.report.late",
    "tangentlab.report.load",  # what the gate reads of a run, and the spot checks that stale it
    "tangentlab.report.verdicts",
    "tangentlab.report.gating",
    "tangentlab.validate.planted",
    "tangentlab.validate.planted_trajectories",
    "tangentlab.validate.planted_scenarios",
    "tangentlab.validate.end_to_end",
    "tangentlab.validate.end_to_end_checks",
    "tangentlab.validate.twin",
)


def _root() -> Path:
    """The ``tangentlab`` package folder."""
    return Path(__file__).resolve().parent.parent


def module_files(names: tuple[str, ...] = VERDICT_PATH, root: Path | None = None
                 ) -> dict[str, Path]:
    """Dotted module name → source file, for every module under ``names`` (packages walked)."""
    root = _root() if root is None else Path(root)
    out: dict[str, Path] = {}
    for name in names:
        rel = Path(*name.split(".")[1:])
        folder, single = root / rel, (root / rel).with_suffix(".py")
        if folder.is_dir():
            for f in sorted(folder.rglob("*.py")):
                parts = f.relative_to(root).with_suffix("").parts
                out[".".join(("tangentlab", *parts))] = f
        elif single.is_file():
            out[name] = single
    return out


def verdict_path_fingerprints(root: Path | None = None) -> dict[str, str]:
    """Module name → fingerprint (16 hex digits of SHA-256) of every verdict-path module."""
    return {name: hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            for name, path in sorted(module_files(root=root).items())}


def stale_modules(recorded: Mapping[str, str], current: Mapping[str, str] | None = None
                  ) -> list[str]:
    """The modules whose fingerprint differs from ``recorded``, with what happened to each.

    ``"tangentlab.x changed"``, ``"tangentlab.x removed"`` or ``"tangentlab.x added"``, sorted;
    empty when the code is the code the certificate recorded.
    """
    now = verdict_path_fingerprints() if current is None else dict(current)
    out = [f"{n} changed" for n in recorded if n in now and now[n] != recorded[n]]
    out += [f"{n} removed" for n in recorded if n not in now]
    out += [f"{n} added" for n in now if n not in recorded]
    return sorted(out)

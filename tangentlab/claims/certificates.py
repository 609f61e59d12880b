"""Certificates shipped with the code: finished end-to-end runs kept as data, and how to read one.

A certificate (written by ``tangentlab validate certify RUN --out FILE``,
:mod:`tangentlab.validate.certificate`) is one JSON object: ``kind`` (:data:`CERTIFICATE_KIND`),
``created``, ``commit``, ``setting`` (the end-to-end run's setting: sims per null, units,
schedule, windows, replicates, r/d, nulls), ``checks`` (every wrong-status and power check, with
its Wilson interval), ``rows`` and ``fingerprints`` (:mod:`tangentlab.claims.fingerprints`).

The certificates in :data:`SHIPPED` (``tangentlab/claims/shipped/*.json``) travel with the
package: the report (:mod:`tangentlab.report.gating`) lets one decide a prediction row of a run
whose setting it covers, and only while no module on the verdict path changed since it was
written (:func:`stale_modules`).

A leaf module: the standard library and :mod:`tangentlab.errors` only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tangentlab.claims.fingerprints import stale_modules
from tangentlab.errors import DataError

__all__ = ["CERTIFICATE_KIND", "SHIPPED", "shipped_certificates", "read_certificate",
           "certificate_stale", "certificate_text", "sims_per_null"]

#: ``kind`` of a certificate file.
CERTIFICATE_KIND = "validate/end-to-end certificate"
#: The folder of the certificates that ship with the package.
SHIPPED = Path(__file__).resolve().parent / "shipped"
_HINT = "write it with `tangentlab validate certify RUN --out FILE` from a finished end-to-end run"
_FIELDS = {"kind": str, "commit": str, "setting": dict, "checks": list, "rows": dict,
           "fingerprints": dict}


def shipped_certificates() -> list[Path]:
    """The certificate files that ship with the package, by name."""
    return sorted(SHIPPED.glob("*.json")) if SHIPPED.is_dir() else []


def read_certificate(path: str | Path) -> dict[str, Any]:
    """A certificate file's content; DataError when it is missing, damaged or not a certificate."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"certificate {str(p)!r} does not exist; {_HINT}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"certificate {str(p)!r} cannot be read ({exc}); {_HINT}") from None
    if not isinstance(data, dict):
        raise DataError(f"{str(p)!r} must hold a JSON object, got {type(data).__name__}; {_HINT}")
    for name, kind in _FIELDS.items():
        if not isinstance(data.get(name), kind):
            raise DataError(f"{str(p)!r} has no {kind.__name__} field {name!r}, so it is not a "
                            f"certificate; {_HINT}")
    if data["kind"] != CERTIFICATE_KIND:
        raise DataError(f"{str(p)!r} is a {data['kind']!r} file, not a certificate; {_HINT}")
    return data


def certificate_stale(cert: dict[str, Any]) -> list[str]:
    """What changed on the verdict path since ``cert`` was written (empty: it still applies)."""
    return stale_modules(cert["fingerprints"])


def sims_per_null(cert: dict[str, Any]) -> str:
    """The simulations each null ran, in words: ``50``, or ``50–200`` where some were extended.

    Counted from the certificate's per-simulation ``statuses``; the ``setting``'s ``sims`` where
    a certificate keeps none.
    """
    by_null = (cert.get("statuses") or {}).get("by_null") or {}
    counts = sorted({len(line) for line in by_null.values()})
    if not counts:
        return str((cert.get("setting") or {}).get("sims", "?"))
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def certificate_text(name: str, cert: dict[str, Any]) -> str:
    """``certificate NAME (commit 0123456789ab, 2026-12-06, 50 simulations per null)``."""
    created = str(cert.get("created") or "date not recorded")[:10]
    return (f"certificate {name} (commit {str(cert.get('commit'))[:12]}, {created}, "
            f"{sims_per_null(cert)} simulations per null)")

"""The validate stage of ``tangentlab reproduce``: the battery, then the end-to-end battery.

:func:`write_validation` writes the validation battery's run directory (``tangentlab
validate``), then the end-to-end battery's (``tangentlab validate --end-to-end``) at the path the
report reads it from (:data:`tangentlab.contract.END_TO_END_DIR` inside the run directory):

- ``reproduce --quick``: the quick battery and the quick end-to-end setting (about 35 s on one
  core; it certifies nothing: one simulation per null);
- a default reproduce: the full battery and the standard end-to-end setting (every null,
  4 simulations of one unit; about 10 minutes on one core). It too is a screen, not a
  certificate: the report gates every prediction until a full end-to-end run at the run's
  setting passes (``tangentlab report RUN --validation DIR``, :mod:`tangentlab.report.gating`).

Then, for every certificate that ships with the package, is not stale
(:mod:`tangentlab.claims.certificates`) and whose checkpoint schedule the run's training reaches
(a quick reproduce's 60 steps never reach a default certificate's 1000), it re-runs a few of the certificate's simulations with
today's code (:func:`tangentlab.validate.certificate.spot_check`: 1 in a quick reproduce, 3 in a
default one) and appends one check per simulation to the battery's ``checks.json``: the shipped
table is shown to come from today's code, or the check fails and the report stops reading the
certificate (:mod:`tangentlab.report.load`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["write_validation", "spot_check_certificates", "SPOT_CHECK_KIND"]

#: ``kind`` of a certificate's spot check in the battery's ``checks.json``.
SPOT_CHECK_KIND = "certificate spot check"


def write_validation(out: str | Path, end_to_end: str | Path, *, quick: bool, seed: int = 0,
                     setting: str | None = None,
                     certificates: Sequence[str | Path] | None = None,
                     trained_to: int | None = None) -> tuple[bool, bool]:
    """Write the battery to ``out`` and then the end-to-end run to ``end_to_end``.

    ``setting`` names the end-to-end setting (``quick`` or ``standard``; default: ``quick`` when
    ``quick``, else ``standard``), so that the pipeline's stage hash records it.

    ``end_to_end`` may lie inside ``out`` (the reproduce layout): the battery's directory is
    written (and atomically replaced) first. Returns (every battery check passed, every
    end-to-end check passed); a failed check is a finding, not an error. ``certificates``: the
    certificate files to spot-check (default: the shipped ones); a failed spot check counts as a
    failed battery check. ``trained_to``: the run's last training step (None: not known); a
    certificate validated at a later step is not spot-checked (:func:`spot_check_certificates`).
    """
    from tangentlab.validate.battery import BatteryConfig, write_battery
    from tangentlab.validate.end_to_end import EndToEndConfig, write_end_to_end
    from tangentlab.validate.end_to_end_records import write_enrichment_figure

    battery = BatteryConfig.quick(seed) if quick else BatteryConfig.full(seed)
    battery.validate()
    _, battery_ok = write_battery(out, battery, quick=quick)
    setting = setting or ("quick" if quick else "standard")
    if setting not in ("quick", "standard"):
        from tangentlab.errors import ConfigError

        raise ConfigError(f"end-to-end setting {setting!r} is not one the validate stage runs: "
                          "use 'quick' or 'standard'")
    e2e = EndToEndConfig.quick(seed) if setting == "quick" else EndToEndConfig.standard(seed)
    e2e_dir, e2e_ok = write_end_to_end(Path(end_to_end), e2e, quick=quick)
    write_enrichment_figure(e2e_dir)
    spot_ok = spot_check_certificates(out, certificates, k=1 if quick else 3, seed=seed,
                                      trained_to=trained_to)
    return bool(battery_ok and spot_ok), bool(e2e_ok)


def spot_check_certificates(out: str | Path, certificates: Sequence[str | Path] | None = None, *,
                            k: int, seed: int = 0, trained_to: int | None = None) -> bool:
    """Re-run ``k`` simulations of each fresh certificate; append the checks to ``out``'s checks.

    ``certificates``: files (default: the shipped ones); a stale one is skipped (the report
    already reads it as stale, naming the modules), and so is one whose checkpoint schedule
    ends after ``trained_to``, the run's last training step (None: every fresh one is checked):
    no checkpoint of the run lies there, so the gate cannot lift a row with it (its schedule
    must equal the run's), and its simulations (about two minutes each at the default setting)
    would only cost a quick reproduce time. Returns whether every spot check passed (True when
    there was nothing to check).
    """
    import tempfile

    from tangentlab.atomic import atomic_write_json
    from tangentlab.claims.certificates import shipped_certificates
    from tangentlab.readers import read_json
    from tangentlab.runs import CHECKS_NAME
    from tangentlab.validate.certificate import certificate_stale, read_certificate, spot_check

    checks = []
    for path in map(Path, shipped_certificates() if certificates is None else certificates):
        cert = read_certificate(path)
        if certificate_stale(cert) or (trained_to is not None
                                       and _last_step(cert, path) > trained_to):
            continue
        with tempfile.TemporaryDirectory(prefix="tangentlab-spot-") as work:
            checks += spot_check(cert, path.name, k=k, work=work, seed=seed)
    if checks:
        target = Path(out) / CHECKS_NAME
        atomic_write_json(target, [*read_json(target, expect=list), *checks])
    return all(c["passed"] for c in checks)


def _last_step(cert: dict, path: Path) -> float:
    """The last checkpoint step of certificate ``cert``'s setting (0 when it records none).

    DataError naming the file when ``setting.steps`` is not a list of numbers.
    """
    from tangentlab.errors import DataError

    steps = (cert.get("setting") or {}).get("steps") or []
    if not isinstance(steps, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in steps):
        raise DataError(f"certificate {str(path)!r}: setting.steps must be a list of checkpoint "
                        f"steps (numbers); got {steps!r}; write it again with `tangentlab "
                        "validate certify`")
    return float(max(steps, default=0))

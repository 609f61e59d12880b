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
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_validation"]


def write_validation(out: str | Path, end_to_end: str | Path, *, quick: bool, seed: int = 0,
                     setting: str | None = None) -> tuple[bool, bool]:
    """Write the battery to ``out`` and then the end-to-end run to ``end_to_end``.

    ``setting`` names the end-to-end setting (``quick`` or ``standard``; default: ``quick`` when
    ``quick``, else ``standard``), so that the pipeline's stage hash records it.

    ``end_to_end`` may lie inside ``out`` (the reproduce layout): the battery's directory is
    written (and atomically replaced) first. Returns (every battery check passed, every
    end-to-end check passed); a failed check is a finding, not an error.
    """
    from tangentlab.validate.battery import BatteryConfig, write_battery
    from tangentlab.validate.end_to_end import EndToEndConfig, write_end_to_end

    battery = BatteryConfig.quick(seed) if quick else BatteryConfig.full(seed)
    battery.validate()
    _, battery_ok = write_battery(out, battery, quick=quick)
    setting = setting or ("quick" if quick else "standard")
    if setting not in ("quick", "standard"):
        from tangentlab.errors import ConfigError

        raise ConfigError(f"end-to-end setting {setting!r} is not one the validate stage runs: "
                          "use 'quick' or 'standard'")
    e2e = EndToEndConfig.quick(seed) if setting == "quick" else EndToEndConfig.standard(seed)
    _, e2e_ok = write_end_to_end(Path(end_to_end), e2e, quick=quick)
    return bool(battery_ok), bool(e2e_ok)

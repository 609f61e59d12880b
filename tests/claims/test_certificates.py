"""The certificates that ship with the package: each is read as the report reads it, and a stale
one names every module that changed since it was written (so a developer knows to re-run it)."""

from __future__ import annotations

import warnings

import pytest

from tangentlab.claims.certificates import (
    SHIPPED,
    certificate_stale,
    certificate_text,
    read_certificate,
    shipped_certificates,
    sims_per_null,
)
from tangentlab.claims.fingerprints import VERDICT_PATH
from tangentlab.report.gating import gate_reason, read_certificate_evidence


def test_the_shipped_folder_holds_only_certificates():
    names = [p.name for p in SHIPPED.iterdir()] if SHIPPED.is_dir() else []
    assert sorted(names) == sorted(p.name for p in shipped_certificates())


@pytest.mark.parametrize("path", shipped_certificates(), ids=lambda p: p.name)
def test_a_shipped_certificate_is_read_and_a_stale_one_names_its_modules(path):
    cert = read_certificate(path)
    assert cert["setting"].get("sims", 0) >= 45, "a certificate needs >= 45 simulations per null"
    assert len(cert["commit"]) == 40 and cert["fingerprints"]
    assert all(any(m == p or m.startswith(p + ".") for p in VERDICT_PATH)
               for m in cert["fingerprints"])
    evidence = read_certificate_evidence(path)
    stale = certificate_stale(cert)
    assert list(evidence.stale) == stale
    if stale:  # the report gates every row on it, naming the modules; say which to re-run
        warnings.warn(f"{path.name} is stale (re-run its end-to-end twin and certify it): "
                      + ", ".join(stale), stacklevel=1)
        assert gate_reason(evidence, "enrichment", [], 1).startswith(
            "certificate stale: " + ", ".join(stale[:3]))


def test_simulations_per_null_are_counted_from_the_statuses_it_keeps():
    """A null extended from 50 to 200 simulations shows as a range, not the setting's 50."""
    cert = {"commit": "ab" * 20, "created": "2026-12-06T10:00:00", "setting": {"sims": 50},
            "statuses": {"rows": ["enrichment"], "codes": {"supported": "a"},
                         "by_null": {"no-effect": ["a"] * 50, "effect": ["a"] * 50}}}
    assert sims_per_null(cert) == "50"
    cert["statuses"]["by_null"]["bursty"] = ["a"] * 200
    assert sims_per_null(cert) == "50–200"
    assert certificate_text("c.json", cert) == ("certificate c.json (commit abababababab, "
                                                "2026-12-06, 50–200 simulations per null)")
    assert sims_per_null({"setting": {"sims": 50}}) == "50"  # one that keeps no statuses

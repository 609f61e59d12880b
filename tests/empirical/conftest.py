"""Session-scoped tiny training runs shared by the empirical tests (trained once per session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """Both architectures trained at the ``tiny`` preset: {'decoder': Path, 'encoder': Path}."""
    from tangentlab.empirical.train import train_model

    root = tmp_path_factory.mktemp("tiny_runs")
    return {arch: train_model(arch, root / arch, preset="tiny", device="cpu", seed=0)
            for arch in ("decoder", "encoder")}

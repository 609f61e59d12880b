"""Session-scoped tiny training runs shared by the empirical tests (trained once per session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """Both architectures trained at the ``tiny`` preset: {'decoder': Path, 'encoder': Path}."""
    from tangentlab.empirical.training.train import train_model

    root = tmp_path_factory.mktemp("tiny_runs")
    return {arch: train_model(arch, root / arch, preset="tiny", device="cpu", seed=0)
            for arch in ("decoder", "encoder")}


#: A small measure config for tests (20 controls so that p can reach its floor 1/21; 8 eval
#: batches split into a fit half and a test half of 4, 2 of them for the causal check).
TEST_MEASURE = {"n_batches": 8, "batch_size": 4, "sample_rows": 512, "n_boot": 50,
                "causal_checkpoints": 2, "causal_batches": 2, "causal_controls": 3,
                "learning_steps": 2, "learning_controls": 2}


@pytest.fixture(scope="session")
def measured(tiny_runs, tmp_path_factory):
    """The protocol run on both tiny trajectories: {'decoder': Path, 'encoder': Path}."""
    from tangentlab.empirical.measurement.protocol import measure_trajectory

    root = tmp_path_factory.mktemp("measured")
    return {arch: measure_trajectory(run, root / arch, device="cpu", seed=0,
                                     overrides=TEST_MEASURE)
            for arch, run in tiny_runs.items()}

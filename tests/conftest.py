"""Shared pytest set-up: offline Hugging Face, hypothesis profiles, quiet progress bars."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TANGENTLAB_QUIET", "1")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "default", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=25, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


import pytest  # noqa: E402

#: Fixtures that train, measure or reproduce a real model: a test that uses one is a ``model``
#: test (``make test-unit`` leaves it out; ``make test`` runs it).
MODEL_FIXTURES = frozenset({
    "tiny_runs", "measured", "quick_reproduce", "uninterrupted", "failed_run", "hub",
    "gpt2_suite", "quick_runs",
})
#: Test modules that train, measure or reproduce in their test bodies (every test in them is a
#: ``model`` test), and single tests that do so in modules that are otherwise quick.
MODEL_MODULES = (
    "tests/empirical/measurement/test_distributed_measure.py",
    "tests/empirical/training/test_distributed_train.py",
    "tests/empirical/training/test_train.py",
    "tests/empirical/measurement/test_protocol.py",
    "tests/empirical/measurement/test_validity.py",
    "tests/empirical/test_cli.py",
    "tests/pipeline/test_kill_resume.py",
    "tests/pipeline/test_reproduce.py",
    "tests/pipeline/test_parallel.py",
    "tests/report/test_render.py",
    "tests/report/test_report_inputs.py",
    "tests/test_distributed.py",
    "tests/test_examples.py",
    "tests/validate/test_battery.py",
)
MODEL_TESTS = (
    "tests/test_cli.py::test_sigterm_exits_143_and_leaves_no_partial_run",
    "tests/test_cli.py::test_a_killed_attempts_half_built_run_is_cleared_by_the_next",
    "tests/empirical/loading/test_capture.py::test_gradients_equal_autograd_of_the_same_loss",
    "tests/test_bad_input.py::test_weights_of_another_width_under_an_unchanged_config_are_exit_2",
    "tests/test_distributed.py::test_ddp_training_reduces_the_loss_every_n_steps_and_times_each_phase",
    "tests/empirical/measurement/test_learning_arms.py::test_the_projection_hook_moves_only_what_it_keeps",
    "tests/empirical/measurement/test_learning_arms.py::test_an_enriched_gradient_mean_is_found_and_a_null",
    "tests/empirical/measurement/test_learning_arms.py::test_a_loaded_planted_checkpoint_trains_only_its",
    "tests/empirical/measurement/test_update_energy.py::test_a_run_that_kept_every_optimizer_state",
)


@pytest.fixture(autouse=True)
def _one_thread_for_unit_tests(request):
    """Unit tests run numpy's BLAS, OpenMP and torch on one thread (model tests keep the default).

    Their arrays are small (d <= 128, a few hundred rows), so a second thread mostly waits:
    with torch on two threads, the 200 nulls of a control-calibration test took 22.5 s of CPU
    against 1.7 s on one (test_causal's steep spectra: 19.5 s against 7.8 s). torch is imported
    here (once) so that a test importing it for the first time is covered too. Results do not
    depend on the thread count beyond float rounding.
    """
    if request.node.get_closest_marker("model") is not None:
        yield
        return
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    with threadpool_limits(limits=1):
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(before)


#: Session fixtures that run a real model once for every test that reads them: the tests that
#: read one share a process (``scripts/test_tiers.py``'s first tier).
SESSION_MODEL_FIXTURES = frozenset({"quick_reproduce", "tiny_runs", "measured", "quick_runs"})
#: Model tests that read no session fixture but run in the model tier anyway, so that the two
#: processes take about as long: once the fork server took the stages' imports off the quick
#: reproduce, a fresh clone's tiers took 440 s and 515 s (1f27d33), and the first test about
#: 30 s. The unit tier still ended last in each of the seven fresh clones of sessions 13 and 14
#: (by 20-64 s; 6076abf: 441 s and 471 s), so the second (about 18 s there) moved too
#: (c0e8ba5: 453.30 s and 453.31 s).
MODEL_TIER_PINNED = (
    "tests/empirical/training/test_distributed_train.py::test_ddp_kill_one_rank_then_resume",
    "tests/test_distributed.py::test_ddp_training_reduces_the_loss_every_n_steps_and_times_each_phase",
)


def _module_fixtures(item) -> set[str]:
    """The module- and class-scoped fixtures ``item`` reads (they run once per module)."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}) or {}
    return {name for name, fixdefs in defs.items()
            if fixdefs and fixdefs[-1].scope in ("module", "class")}


def pytest_collection_modifyitems(config, items):
    """Tier the tests: ``model`` for what trains, measures or reproduces (see the lists above).

    A model test is also ``standalone`` when it reads no session fixture
    (:data:`SESSION_MODEL_FIXTURES`) and no module-scoped fixture that a test reading one also
    reads, and is not pinned to the model tier (:data:`MODEL_TIER_PINNED`): ``make test`` runs
    the standalone tests beside the unit tests, in its second process, so that the two
    processes take about as long, and no fixture runs twice.
    """
    model_items = []
    for item in items:
        nodeid = item.nodeid
        if (MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ()))
                or nodeid.split("::")[0] in MODEL_MODULES
                or nodeid.startswith(MODEL_TESTS)):
            item.add_marker(pytest.mark.model)
            model_items.append(item)
    shared = [item for item in model_items
              if SESSION_MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ()))]
    held = {(item.nodeid.split("::")[0], name) for item in shared
            for name in _module_fixtures(item)}
    shared_ids = {item.nodeid for item in shared}
    for item in model_items:
        module = item.nodeid.split("::")[0]
        if item.nodeid not in shared_ids and not item.nodeid.startswith(MODEL_TIER_PINNED) \
                and not any((module, name) in held for name in _module_fixtures(item)):
            item.add_marker(pytest.mark.standalone)


@pytest.fixture(scope="session")
def quick_reproduce(tmp_path_factory):
    """A real ``tangentlab reproduce --quick --jobs N``, run at most once per N per session.

    Returns ``run(jobs) -> (run_dir, exit_code, stderr_text, seconds)``: the report, contract,
    synthetic and validation tests read the ``--jobs 2`` one, and the kill-and-resume test holds
    a small ``--jobs 1`` run, killed and resumed, to its stages' bytes.
    """
    import contextlib
    import io
    import time

    from tangentlab.cli import main

    runs: dict[int, tuple] = {}

    def run(jobs: int):
        if jobs not in runs:
            out = tmp_path_factory.mktemp(f"quick-jobs{jobs}") / "run"
            err = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stderr(err):
                rc = main(["reproduce", "--quick", "--out", str(out), "--device", "cpu",
                           "--jobs", str(jobs)])
            runs[jobs] = (out, rc, err.getvalue(), time.perf_counter() - start)
        return runs[jobs]

    return run

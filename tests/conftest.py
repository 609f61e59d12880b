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


@pytest.fixture(scope="session")
def quick_reproduce(tmp_path_factory):
    """A real ``tangentlab reproduce --quick --jobs N``, run at most once per N per session.

    Returns ``run(jobs) -> (run_dir, exit_code, stderr_text, seconds)``; the end-to-end report
    test and the --jobs equivalence test share the runs (each takes about a minute).
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
            # the validation battery runs in the --jobs 2 run only (tests/validate covers it;
            # the equivalence test compares the stages both runs have)
            extra = [] if jobs == 2 else ["--set", "validate=false"]
            with contextlib.redirect_stderr(err):
                rc = main(["reproduce", "--quick", "--out", str(out), "--device", "cpu",
                           "--jobs", str(jobs), *extra])
            runs[jobs] = (out, rc, err.getvalue(), time.perf_counter() - start)
        return runs[jobs]

    return run

"""Test-only pause points, so that a test can kill a process at a known place.

**For tests only.** Code that writes run files calls :func:`pause_point` at places where a kill
is interesting (inside an atomic write, before a rename). It does nothing unless the environment
variable ``TANGENTLAB_TEST_PAUSE_AT`` names that point. Then, when the point is reached, the
process writes the file named by ``TANGENTLAB_TEST_PAUSE_FILE`` (holding its pid and the point) and
sleeps ``TANGENTLAB_TEST_PAUSE_SECONDS`` (default 120) before going on, so that a test can send
it SIGKILL at exactly that point (see ``tests/killing.py``: ``kill_at``).

A point is named ``NAME`` or ``NAME:DETAIL`` (e.g. ``checkpoint:3``, the checkpoint of step 3,
after its files are written and before it is renamed into place). ``TANGENTLAB_TEST_PAUSE_AT``
matches a point when it equals its full name or its bare ``NAME``.

Points in the code base:

- ``checkpoint:STEP``: :mod:`tangentlab.empirical.training.train`, a checkpoint fully written under its
  temporary name, not yet renamed to ``checkpoints/step_NNNNNN``.
- ``atomic_directory``: :func:`tangentlab.runs.atomic_directory`, the run built under its
  temporary name, not yet renamed into place.
"""

from __future__ import annotations

import os
import time

__all__ = ["pause_point", "PAUSE_AT_ENV", "PAUSE_FILE_ENV", "PAUSE_SECONDS_ENV"]

PAUSE_AT_ENV = "TANGENTLAB_TEST_PAUSE_AT"
PAUSE_FILE_ENV = "TANGENTLAB_TEST_PAUSE_FILE"
PAUSE_SECONDS_ENV = "TANGENTLAB_TEST_PAUSE_SECONDS"


def pause_point(name: str, detail: object = None) -> bool:
    """Pause here if ``TANGENTLAB_TEST_PAUSE_AT`` names this point; returns whether it paused."""
    wanted = os.environ.get(PAUSE_AT_ENV)
    if not wanted:
        return False
    full = name if detail is None else f"{name}:{detail}"
    if wanted not in (name, full):
        return False
    marker = os.environ.get(PAUSE_FILE_ENV)
    if marker:
        tmp = f"{marker}.tmp-{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(f"{os.getpid()} {full}\n")
        os.replace(tmp, marker)
    time.sleep(float(os.environ.get(PAUSE_SECONDS_ENV, "120")))
    return True

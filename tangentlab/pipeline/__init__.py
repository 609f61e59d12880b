"""The reproduce job: the stage graph, its orchestration, and the stage checks.

``pipeline`` is the only package that knows all the others. It runs the theory, synthetic and
empirical stages (independent ones in parallel, in separate processes) into one run directory,
then the report, which reads that directory only.

- :func:`reproduce` / :class:`ReproduceConfig` / :data:`DEFAULT` / :data:`QUICK`: the job and its
  configs (:mod:`tangentlab.pipeline.reproduce`);
- :func:`run_stages`, :class:`Stage`, :class:`StageContext`, :class:`RunSummary`: the resumable
  stage runner (:mod:`tangentlab.pipeline.stages`). Stage records live in
  :class:`tangentlab.runs.StageRecord`, so the report can read them without this package.
"""

from __future__ import annotations

from tangentlab._lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "reproduce": ("reproduce", "ReproduceConfig", "DEFAULT", "QUICK", "resolve_config",
                  "config_toml", "build_stages", "new_run_dir"),
    "stages": ("run_stages", "Stage", "StageContext", "RunSummary", "stage_hash"),
})

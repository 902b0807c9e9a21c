"""The `rag-sweep` CLI's driver: what runs a sweep from a terminal, tests and benchmarks. A deployment
never imports it: what both need lives in rag_assets/orchestration/ (re-exported here for the CLI's users).

- `run_sweep`: materialize a sweep end to end in this process (`SweepRun`: its leaderboard and artifacts),
  a stage's due partitions in one Dagster run (rag_core/planning/batches.py);
- `load_plan`, `steps`, `completed`, `holdout_steps`, `SearchController`, `begin_search`: from
  rag_assets/orchestration/ (the plan, what is complete, the adaptive search's controller);
- `exclusive`: one run per data dir; `close_abandoned_runs`: end the Dagster runs a killed run left started;
- `load_data`, `bill`: the data as a run reads it, and what a run would compute (rag_sweep/runner/estimate.py);
- `up_to_date`: an unchanged rerun answered without importing Dagster.

The names are imported when first used (PEP 562), so `rag_sweep.runner.up_to_date` is imported without Dagster.
"""

from __future__ import annotations

import importlib

# name -> the module it is defined in
_EXPORTS = {
    "RUNNER_PID_TAG": "rag_sweep.runner.instance",
    "CheckFailed": "rag_sweep.runner.errors",
    "DataDirError": "rag_sweep.runner.errors",
    "SearchController": "rag_assets.orchestration.search",
    "SearchReport": "rag_assets.orchestration.search",
    "SearchState": "rag_assets.orchestration.search",
    "StepFailed": "rag_sweep.runner.errors",
    "SweepRun": "rag_sweep.runner.sweep",
    "asset_key": "rag_assets.stage_asset",
    "begin_search": "rag_assets.orchestration.search",
    "bill": "rag_sweep.runner.estimate",
    "close_abandoned_runs": "rag_sweep.runner.instance",
    "completed": "rag_assets.orchestration.todo",
    "exclusive": "rag_sweep.runner.lock",
    "holdout_steps": "rag_assets.orchestration.todo",
    "load_data": "rag_sweep.runner.estimate",
    "load_plan": "rag_assets.orchestration.plans",
    "local_instance": "rag_sweep.runner.instance",
    "run_sweep": "rag_sweep.runner.sweep",
    "runner_definitions": "rag_sweep.runner.sweep",
    "stale_snapshots": "rag_assets.orchestration.todo",
    "steps": "rag_assets.orchestration.todo",
    "unobserved": "rag_assets.orchestration.todo",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rag_sweep.runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)

"""The `rag-sweep` CLI's driver: what runs a sweep from a terminal, tests and benchmarks. A deployment
never imports it: what both need lives in orchestration/ (re-exported here for the CLI's users).

- `run_sweep`: materialize a sweep end to end in this process (`SweepRun`: its leaderboard and artifacts),
  a stage's due partitions in one Dagster run (rag_core/planning/batches.py);
- `load_plan`, `steps`, `completed`, `holdout_steps`, `SearchController`, `begin_search`: from
  orchestration/ (the plan, what is complete, the adaptive search's controller);
- `exclusive`: one run per data dir; `close_abandoned_runs`: end the Dagster runs a killed run left started;
- `load_data`, `bill`: the data as a run reads it, and what a run would compute (runner/estimate.py);
- `up_to_date`: an unchanged rerun answered without importing Dagster.

The names are imported when first used (PEP 562), so `runner.up_to_date` is imported without Dagster.
"""

from __future__ import annotations

import importlib

# name -> the module it is defined in
_EXPORTS = {
    "RUNNER_PID_TAG": "runner.instance",
    "CheckFailed": "runner.errors",
    "DataDirError": "runner.errors",
    "SearchController": "orchestration.search",
    "SearchReport": "orchestration.search",
    "SearchState": "orchestration.search",
    "StepFailed": "runner.errors",
    "SweepRun": "runner.sweep",
    "asset_key": "rag_assets.stage_asset",
    "begin_search": "orchestration.search",
    "bill": "runner.estimate",
    "close_abandoned_runs": "runner.instance",
    "completed": "orchestration.todo",
    "exclusive": "runner.lock",
    "holdout_steps": "orchestration.todo",
    "load_data": "runner.estimate",
    "load_plan": "orchestration.plans",
    "local_instance": "runner.instance",
    "run_sweep": "runner.sweep",
    "runner_definitions": "runner.sweep",
    "stale_snapshots": "orchestration.todo",
    "steps": "orchestration.todo",
    "unobserved": "orchestration.todo",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = sorted(_EXPORTS)

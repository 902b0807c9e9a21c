"""The `rag-sweep` CLI's driver: what runs a sweep from a terminal, tests and benchmarks. A deployment
never imports it: what both need lives in orchestration/ (re-exported here for the CLI's users).

- `run_sweep`: materialize a sweep end to end in this process (`SweepRun`: its leaderboard and artifacts),
  a stage's due partitions in one Dagster run (rag_core/planning/batches.py);
- `load_plan`, `steps`, `completed`, `holdout_steps`, `SearchController`, `begin_search`: from
  orchestration/ (the plan, what is complete, the adaptive search's controller);
- `exclusive`: one run per data dir; `close_abandoned_runs`: end the Dagster runs a killed run left started;
- `load_data`, `bill`: the data as a run reads it, and what a run would compute (runner/estimate.py).
"""

from orchestration.plans import asset_key, load_plan, runner_definitions
from orchestration.search import SearchController, SearchReport, SearchState, begin_search
from orchestration.todo import completed, holdout_steps, stale_snapshots, steps, unobserved
from runner.errors import CheckFailed, DataDirError, StepFailed
from runner.estimate import bill, load_data
from runner.instance import RUNNER_PID_TAG, close_abandoned_runs, local_instance
from runner.lock import exclusive
from runner.sweep import SweepRun, run_sweep

__all__ = [
    "RUNNER_PID_TAG",
    "CheckFailed",
    "DataDirError",
    "SearchController",
    "SearchReport",
    "SearchState",
    "StepFailed",
    "SweepRun",
    "asset_key",
    "begin_search",
    "bill",
    "close_abandoned_runs",
    "completed",
    "exclusive",
    "holdout_steps",
    "load_data",
    "load_plan",
    "local_instance",
    "run_sweep",
    "runner_definitions",
    "stale_snapshots",
    "steps",
    "unobserved",
]

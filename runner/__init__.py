"""The sweep runner: what runs a sweep, shared by the `rag-sweep` CLI, the deployment, tests and benchmarks.

- `load_plan`: a sweep file's plan with the deployment's settings (the one place that builds it);
- `run_sweep`: materialize a sweep end to end in this process (`SweepRun`: its leaderboard and artifacts);
- `steps`, `completed`, `holdout_steps`: what a run has to do, what is complete (runner/todo.py);
- `SearchController`, `begin_search`: an adaptive search as state in the data dir, driven by the CLI in
  process or by a deployment's sensor (runner/search.py);
- `exclusive`: one run per data dir; `close_abandoned_runs`: end the Dagster runs a killed run left started;
- `load_data`, `bill`: the data as a run reads it, and what a run would compute (runner/estimate.py).
"""

from runner.errors import CheckFailed, DataDirError, StepFailed
from runner.estimate import bill, load_data
from runner.instance import RUNNER_PID_TAG, close_abandoned_runs, local_instance
from runner.lock import exclusive
from runner.plans import asset_key, load_plan, runner_definitions
from runner.search import SearchController, SearchReport, SearchState, begin_search
from runner.sweep import SweepRun, run_sweep
from runner.todo import completed, holdout_steps, stale_snapshots, steps, unobserved

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

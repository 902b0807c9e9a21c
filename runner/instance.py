"""The Dagster instance a sweep runs on, and the runs a killed runner left started."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from resources.environment import dagster_home

PROJECT_ROOT = Path(__file__).resolve().parents[1]
RUNNER_PID_TAG = "rag/cli_pid"  # the process that ran a Dagster run in process (rag-sweep or a worker)


def local_instance(data_dir: Path) -> dg.DagsterInstance:
    """$DAGSTER_HOME's instance, else `<data-dir>/dagster_home`, created with the repo's dagster.yaml (the
    same run queue and pools as `dagster dev` from the repo root)."""
    if dagster_home():
        return dg.DagsterInstance.get()
    home = data_dir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    return dg.DagsterInstance.from_config(str(home))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def close_abandoned_runs(instance: dg.DagsterInstance) -> int:
    """Mark as failed the Dagster runs a killed `rag-sweep run` left started: it ran them in its own
    process, which is gone, so nothing else will ever end them (the UI would show them running forever)."""
    live = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    abandoned = [
        r
        for r in instance.get_runs(filters=dg.RunsFilter(statuses=live))
        if RUNNER_PID_TAG in r.tags and not _alive(int(r.tags[RUNNER_PID_TAG]))
    ]
    for r in abandoned:
        instance.report_run_failed(
            r,
            f"the rag-sweep run (pid {r.tags[RUNNER_PID_TAG]}) that ran this ended before it finished (killed)",
        )
    return len(abandoned)

"""The Dagster instance a sweep runs on, and the runs a killed runner left started."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import dagster as dg

from rag_sweep.legacy_modules import new_name
from rag_sweep.runner.errors import DataDirError
from resources.environment import celery_broker_url, dagster_home, mlflow_tracking_uri, shared_database_url
from resources.no_links import refuse_links_in
from resources.storage import atomic_write_bytes, is_remote

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNNER_PID_TAG = "rag/cli_pid"  # the process that ran a Dagster run in process (rag-sweep or a worker)


def require_deployment(data_dir) -> None:
    """A data dir on object storage is a deployment's: it needs the deployment's Dagster instance, database
    (locks, LLM call cache) and MLflow server, as no local file may hold them. One line naming what is
    missing, before any work."""
    if not is_remote(data_dir):
        return
    missing = [
        what
        for what, ok in (
            ("$DAGSTER_HOME (the deployment's instance: deploy/dagster.yaml)", dagster_home()),
            ("$DAGSTER_PG_HOST (its PostgreSQL: locks and the LLM call cache)", shared_database_url()),
            ("$MLFLOW_TRACKING_URI (its MLflow server)", mlflow_tracking_uri()),
        )
        if not ok
    ]
    if missing:
        raise DataDirError(
            f"data dir {data_dir} is on object storage, which needs a deployment: set {'; '.join(missing)} "
            "(docs/guides/deployment.md)"
        )


def require_fleet(data_dir) -> None:
    """Steps on a fleet ($RAG_EXECUTOR=celery) run on other machines: they reach the data dir, the
    instance, the database and MLflow over the network, and their tasks over the broker. One line naming
    what is missing, before any work."""
    if not is_remote(data_dir):
        raise DataDirError(
            f"$RAG_EXECUTOR=celery: the workers cannot reach data dir {data_dir} (a local directory): use "
            "object storage, s3://bucket/prefix (docs/guides/deployment.md)"
        )
    require_deployment(data_dir)
    if not celery_broker_url():
        raise DataDirError("$RAG_EXECUTOR=celery: set $CELERY_BROKER_URL, the broker the workers serve")


def local_instance(data_dir: Path) -> dg.DagsterInstance:
    """$DAGSTER_HOME's instance, else `<data-dir>/dagster_home`, created with the repo's dagster.yaml (the
    same run queue and pools as `dagster dev` from the repo root)."""
    if dagster_home():
        return dg.DagsterInstance.get()
    if is_remote(data_dir):
        raise DataDirError(
            f"data dir {data_dir}: on object storage the runs are recorded in the deployment's Dagster "
            "instance: set $DAGSTER_HOME (with PostgreSQL storage, deploy/dagster.yaml; see docs/guides/deployment.md)"
        )
    home = data_dir / "dagster_home"
    refuse_links_in(home)  # Dagster's SQLite stores and compute logs follow links (resources/no_links.py)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    written = config.read_text() if config.exists() else None
    text = written
    if text is None:  # the repo's settings; a new instance gets the storage below, Dagster's keeps its own
        text = (PROJECT_ROOT / "dagster.yaml").read_text()
        if not (home / "history").exists():
            text += STORAGE_MARK
    if STORAGE_MARK in text:  # its path follows the data dir when that moves
        text = text.split(STORAGE_MARK)[0] + storage_config(home)
    # an instance made before the move into rag_sweep names its classes by their old module paths
    text = re.sub(r"(?m)^(\s*module:\s*)(\S+)", lambda m: m[1] + new_name(m[2]), text)
    if text != written:
        atomic_write_bytes(config, text.encode())
    return dg.DagsterInstance.from_config(str(home))


# The storage of an instance `rag-sweep run` creates keeps its SQLite connections, and its event log is one
# file (the storages of resources/dagster_private.py): Dagster's default opens a connection per event and query, and gives each
# run a database of its own, created and migrated as the run starts. Its compute logs are Dagster's local
# ones, mirrored to the terminal without a watcher process per stream (rag_sweep/runner/compute_logs.py). `dagster dev`
# on this home reads the same files. An instance made before this keeps its layout.
STORAGE_MARK = "# rag-sweep run: this instance's storage"


def storage_config(home: Path) -> str:
    history = json.dumps(str(home.resolve() / "history"))
    logs = json.dumps(str(home.resolve() / "storage"))  # where Dagster's default keeps them
    return f"""{STORAGE_MARK} (the paths follow the data dir: rewritten when it moves)
compute_logs:
  module: rag_sweep.runner.compute_logs
  class: TailedComputeLogManager
  config:
    base_dir: {logs}
run_storage:
  module: resources.dagster_private
  class: PooledSqliteRunStorage
  config:
    base_dir: {history}
event_log_storage:
  module: resources.dagster_private
  class: PooledSqliteEventLogStorage
  config:
    base_dir: {history}
"""


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

"""A run on the deployment whose worker starts later than Dagster's default launch deadline (60 s), as on a
machine busy with a daemon restart and a schedule's burst of runs: the daemon's launch waits for it
(`DAGSTER_GRPC_TIMEOUT_SECONDS`, docker-compose.yml) and the run ends as it would, launched once. With
Dagster's 60 s the launch failed the run, its worker then started and was ignored, and each run retry met
the same deadline."""

from __future__ import annotations

import os
import time

import dagster as dg
import pytest

from tests.conftest import computing_runs, write_sweep
from tests.servers import deployment

pytestmark = pytest.mark.stack
LATE_S = 75  # past Dagster's 60 s, well inside run monitoring's start timeout (deploy/dagster.yaml)
# Every run worker the code server spawns (multiprocessing's spawn: `--multiprocessing-fork`) sleeps first.
LATE_WORKER = f"""
import os, sys, time
if "--multiprocessing-fork" in sys.orig_argv and os.environ.get("RAG_TEST_LATE_WORKER"):
    time.sleep({LATE_S})
"""


def test_a_run_whose_worker_starts_after_dagsters_launch_deadline_runs_once(
    slice_data, postgres_server, tmp_path
):
    site = tmp_path / "late_worker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LATE_WORKER)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    spec = write_sweep(
        tmp_path / "sweep.yaml",
        slice_data,
        name="late-worker",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 3},
    )
    env = {"PYTHONPATH": path, "RAG_TEST_LATE_WORKER": "1"}
    with deployment(tmp_path / "d", spec, tmp_path / "data", postgres_server, env) as d:
        instance = d.instance()
        t0 = time.monotonic()
        run_id = d.launch_run(
            "storage_cleanup", {"ops": {"remove_unneeded_storage": {"config": {"apply": False}}}}
        )
        while not (run := instance.get_run_by_id(run_id)).is_finished:
            assert time.monotonic() - t0 < 600, f"run {run_id} is {run.status.value}\n{d.log('daemon')}"
            time.sleep(2)
        waited = time.monotonic() - t0
        said = [e.message for e in instance.all_logs(run_id) if e.message]
        assert run.status == dg.DagsterRunStatus.SUCCESS, f"{said}\n{d.log('daemon')}"
        assert waited > LATE_S  # the worker did start late
        assert len(computing_runs(instance.get_runs())) == 1  # no retry: the launch itself succeeded

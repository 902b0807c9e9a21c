"""The deployment's run launcher (rag_sweep/run_launcher.py): a run whose code location the launching
process manages is executed by a worker forked from the warm fork server; any other run goes to the code
server as with Dagster's default launcher; terminating a forked worker interrupts it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.code_pointer import FileCodePointer
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.remote_origin import (
    GrpcServerCodeLocationOrigin,
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test, poll_for_finished_run
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import PythonFileTarget

from rag_sweep.run_launcher import WORKER_TAG, WarmRunLauncher

JOB_FILE = Path(__file__).parent / "launcher_code" / "job.py"


@pytest.fixture
def instance(tmp_path):
    (tmp_path / "dagster.yaml").write_text(
        "run_launcher:\n  module: rag_sweep.run_launcher\n  class: WarmRunLauncher\n"
        # a module nothing else here imports (the deployment's default preload is the heavy libraries)
        "  config:\n    preload_modules: [ftplib]\n"
        "telemetry:\n  enabled: false\n"
    )
    with dg.DagsterInstance.from_config(str(tmp_path)) as inst:
        yield inst


def test_a_run_of_a_code_location_this_process_manages_runs_in_a_forked_warm_worker(instance, tmp_path):
    assert isinstance(instance.run_launcher, WarmRunLauncher)
    instance.run_launcher.start_fork_server()  # as the daemon does at its start
    assert instance.run_launcher.fork_server_ready(timeout=120)
    target = PythonFileTarget(
        python_file=str(JOB_FILE),
        attribute=None,
        working_directory=str(JOB_FILE.parent),
        location_name="launched",
    )
    out = tmp_path / "where.json"
    with WorkspaceProcessContext(instance, target) as process_context:
        workspace = process_context.create_request_context()
        location = workspace.get_code_location("launched")
        job = location.get_repository("__repository__").get_full_job("forked")
        run = create_run_for_test(
            instance,
            job_name="forked",
            run_config={"ops": {"where": {"config": {"out": str(out), "module": "ftplib"}}}},
            remote_job_origin=job.get_remote_origin(),
            job_code_origin=job.get_python_origin(),
        )
        instance.launch_run(run.run_id, workspace)
        done = poll_for_finished_run(instance, run.run_id, timeout=180)
    assert done.status == DagsterRunStatus.SUCCESS, instance.all_logs(run.run_id)[-5:]
    where = json.loads(out.read_text())
    assert json.loads(done.tags[WORKER_TAG])["pid"] == where["pid"]
    assert "multiprocessing.forkserver" in where["parent"], where  # forked by the fork server ...
    assert where["preloaded"]  # ... that had imported what it preloads
    started = [e for e in instance.all_logs(run.run_id) if "Started process for run" in e.message]
    assert started and f"(pid: {where['pid']})" in started[0].message


def _run(executable: str, location) -> DagsterRun:
    repo = ReconstructableRepository(FileCodePointer(str(JOB_FILE), "defs"), executable_path=executable)
    return DagsterRun(
        job_name="forked",
        remote_job_origin=RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), "forked"),
        job_code_origin=repo.get_python_origin().get_job_origin("forked"),
    )


def test_only_a_managed_code_location_in_this_interpreter_is_forked():
    managed = ManagedGrpcPythonEnvCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, python_file=str(JOB_FILE)), "launched"
    )
    served = GrpcServerCodeLocationOrigin(host="code", port=4000, location_name="launched")
    assert WarmRunLauncher._warm(_run(sys.executable, managed))
    assert not WarmRunLauncher._warm(_run(sys.executable, served))  # its own server: Dagster's default
    assert not WarmRunLauncher._warm(_run("/opt/other/bin/python", managed))  # another interpreter


def test_terminate_marks_the_run_canceling_and_interrupts_its_worker(instance):
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(7)",
        ]
    )
    try:
        time.sleep(0.5)  # the worker's Python has started and installed its SIGINT handler
        run = create_run_for_test(
            instance,
            job_name="forked",
            status=DagsterRunStatus.STARTED,
            tags={WORKER_TAG: json.dumps({"host": socket.gethostname(), "pid": worker.pid})},
        )
        assert instance.run_launcher.terminate(run.run_id)
        assert worker.wait(timeout=10) == 7  # interrupted (SIGINT), as Dagster's code server does
        assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELING
        assert not instance.run_launcher.terminate("no-such-run")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)

"""`WarmRunLauncher`: Dagster's run launcher with run workers forked from a warm process.

Dagster's default launcher asks the code location's gRPC server to start each run, and the server spawns a
fresh Python for it: every run worker imports Dagster, MLflow, LanceDB, torch ... again before its first
step (~8 s on two cores), and a sweep from the UI is a chain of ~11 runs. Here, where the daemon started the
code location itself (a workspace's `python_module` or `python_file`, so the same machine, interpreter and
environment), a run's worker is forked from a fork server (Python's `multiprocessing` "forkserver") that
imported those libraries once (`rag_sweep/run_worker_preload.py`). The worker then does what
`dagster api execute_run` does, the command Dagster's container launchers run: it loads the job from the
run's code origin (so the definitions are read as they are now) and executes the run.

A code location served on its own (`grpc_server`, as in docker-compose), a run from another interpreter,
and any run launched while the fork server is still importing (it starts with the daemon: `rag-sweep-daemon`)
are launched as Dagster's default launcher does. Termination sends the worker SIGINT, as Dagster's code
server does to its own run workers; the worker's process is tagged `rag/run_worker` (host and pid).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from typing import Any

from dagster._core.launcher import DefaultRunLauncher
from dagster._core.launcher.base import LaunchRunContext
from dagster._serdes import ConfigurableClassData

WORKER_TAG = "rag/run_worker"
PRELOAD = "rag_sweep.run_worker_preload"

# one fork server per process (Python's), whichever launcher object starts it
_STARTING = threading.Lock()
_STARTED = threading.Event()
_READY = threading.Event()


def _ready() -> None:
    """The fork server's first child: it exists once the server has imported the libraries."""


def _work(serialized_args: str) -> None:
    """The run worker: `dagster api execute_run`'s body, in the forked child."""
    from dagster._cli.api import execute_run_command

    # the child of an idle fork server: its signal handlers are Python's defaults (SIGINT interrupts)
    execute_run_command.callback(serialized_args, None)


class WarmRunLauncher(DefaultRunLauncher):
    """Forks each run's worker from a warm fork server where the daemon manages the code location."""

    def __init__(
        self, inst_data: ConfigurableClassData | None = None, preload_modules: list[str] | None = None
    ):
        super().__init__(inst_data=inst_data)
        self._preload = list(preload_modules or [PRELOAD])
        self._context = None

    @classmethod
    def config_type(cls):
        from dagster import Array, Field

        return {
            "preload_modules": Field(
                Array(str),
                is_required=False,
                description=f"What the fork server imports before it forks a worker (default: {PRELOAD}).",
            )
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: dict[str, Any]):
        return cls(inst_data=inst_data, preload_modules=config_value.get("preload_modules"))

    def _fork_server(self):
        if self._context is None:
            import multiprocessing

            context = multiprocessing.get_context("forkserver")
            # one fork server per process (start_fork_server), then it stays
            context.set_forkserver_preload(self._preload)
            self._context = context
        return self._context

    def start_fork_server(self) -> None:
        """Start the fork server in the background (the daemon does at its start); runs launched before it
        is ready go through the code server, so no run waits on its imports."""
        from multiprocessing import forkserver

        context = self._fork_server()
        with _STARTING:
            if _STARTED.is_set():
                return
            _STARTED.set()

        def start() -> None:
            forkserver.ensure_running()  # returns once the server is spawned, before its imports ...
            first = context.Process(target=_ready, name="warm-run-workers-ready")
            first.start()  # ... which this waits for: the server forks only when they are done
            first.join()
            _READY.set()

        threading.Thread(target=start, name="warm-run-workers", daemon=True).start()

    def fork_server_ready(self, timeout: float | None = None) -> bool:
        return _READY.wait(timeout)

    @staticmethod
    def _warm(run) -> bool:
        """The daemon manages this run's code location, in this interpreter: fork its worker."""
        from dagster._core.remote_origin import ManagedGrpcPythonEnvCodeLocationOrigin

        origin = run.remote_job_origin
        code = run.job_code_origin
        if origin is None or code is None:
            return False
        location = origin.repository_origin.code_location_origin
        if not isinstance(location, ManagedGrpcPythonEnvCodeLocationOrigin):
            return False
        return os.path.realpath(code.executable_path or "") == os.path.realpath(sys.executable)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if not self._warm(run):
            return super().launch_run(context)
        if not _READY.is_set():  # still importing: this run starts as Dagster's own would
            self.start_fork_server()
            return super().launch_run(context)
        from dagster._grpc.types import ExecuteRunArgs
        from dagster._serdes import serialize_value

        args = ExecuteRunArgs(
            job_origin=run.job_code_origin, run_id=run.run_id, instance_ref=self._instance.get_ref()
        )
        process = self._fork_server().Process(
            target=_work, args=(serialize_value(args),), name=f"dagster-run-{run.run_id}"
        )
        process.start()
        # The worker outlives this launch (and this daemon, as a code server's workers do): no join at exit.
        import multiprocessing.process as mp_process

        getattr(mp_process, "_children", set()).discard(process)
        self._instance.add_run_tags(
            run.run_id, {WORKER_TAG: json.dumps({"host": socket.gethostname(), "pid": process.pid})}
        )
        self._run_ids.add(run.run_id)

    def terminate(self, run_id: str) -> bool:
        if not self.has_instance:
            return False
        run = self._instance.get_run_by_id(run_id)
        if not run or run.is_finished:
            return False
        worker = run.tags.get(WORKER_TAG)
        if worker is None:  # launched through the code server
            return super().terminate(run_id)
        self._instance.report_run_canceling(run)
        where = json.loads(worker)
        if where["host"] != socket.gethostname():
            self._instance.report_engine_event(
                f"The run's worker is on {where['host']}; it can only be terminated from there.",
                dagster_run=run,
                cls=self.__class__,
            )
            return False
        try:
            os.kill(int(where["pid"]), signal.SIGINT)  # as Dagster's code server interrupts its workers
        except ProcessLookupError:
            return False
        return True

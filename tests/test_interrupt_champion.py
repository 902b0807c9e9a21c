"""Ctrl-C while `rag-sweep run` registers the champion model ends the run as interrupted (exit 130, the
`interrupted` line), wherever it lands: in the registration itself, or in Dagster's own work around it (storing
the run's events), where Dagster defers an interrupt to its next checkpoint and the in-process executor has
none after the last step, so the run ended with exit 0 as if nothing had happened.

The moment is made reliable by a sitecustomize in the child only (a test hook, nothing in the project): it
writes a marker file at the chosen point and waits there until the signal comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import write_sweep

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

HOOK = textwrap.dedent(
    """
    import os, time
    from pathlib import Path

    POINT, MARKER = os.environ["CHAMPION_HOOK_POINT"], Path(os.environ["CHAMPION_HOOK_MARKER"])

    def wait_here():
        MARKER.write_text(str(os.getpid()))
        for _ in range(100):  # the test's SIGINT comes at once: 10 s
            time.sleep(0.1)

    if POINT == "registration":  # inside the champion step's own code
        import resources.shipping.registry as registry

        original = registry.register_champion

        def register_champion(tracking, bundle):
            wait_here()
            return original(tracking, bundle)

        registry.register_champion = register_champion
    elif POINT == "run_end":  # Dagster storing the champion run's success, after the step's code returned
        import dagster as dg

        handle, champion_runs = dg.DagsterInstance.handle_new_event, set()

        def handle_new_event(self, event, **kwargs):
            handle(self, event, **kwargs)
            e = event.dagster_event
            if e is None:
                return
            if e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key.path[-1] == "champion_model":
                champion_runs.add(event.run_id)
            elif e.event_type_value == "PIPELINE_SUCCESS" and event.run_id in champion_runs:
                wait_here()

        dg.DagsterInstance.handle_new_event = handle_new_event
    """
)


def _run(spec: Path, data: Path, hooks: Path, point: str | None) -> subprocess.Popen:
    marker = data.parent / f"{point}.marker"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hooks), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "CHAMPION_HOOK_POINT": point or "",
        "CHAMPION_HOOK_MARKER": str(marker),
    }
    if point is None:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    args = [sys.executable, "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(data)]
    # a session of its own: SIGINT goes to its whole process group, as a terminal's Ctrl-C does
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _interrupt_at(proc: subprocess.Popen, marker: Path, timeout: float = 600) -> tuple[int, str]:
    t0 = time.monotonic()
    while not marker.exists():
        assert proc.poll() is None, f"the run ended before the champion: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() - t0 < timeout, "the champion was never registered"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    return proc.returncode, stderr


def test_ctrl_c_while_the_champion_is_registered_ends_the_run_as_interrupted(slice_data, tmp_path):
    from mlflow import MlflowClient

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    spec = write_sweep(
        tmp_path / "champion.yaml",
        slice_data,
        name="champion",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
    )
    data = tmp_path / "data"
    for point in ("registration", "run_end"):  # the first run computes the sweep; the next only the champion
        proc = _run(spec, data, hooks, point)
        code, stderr = _interrupt_at(proc, tmp_path / f"{point}.marker")
        assert code == 130, (point, code, stderr[-3000:])
        assert "interrupted: every complete artifact is kept" in stderr, (point, stderr[-3000:])

    proc = _run(spec, data, hooks, None)  # run again: the champion is registered
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    champion = MlflowClient(f"sqlite:///{data / 'mlflow.db'}").get_model_version_by_alias(
        "champion", "champion"
    )
    assert champion.tags["kind"] == "champion"

"""Prompt optimization on a deployment. The sensor's requests, tick by tick; then with the real Dagster
daemon: after the leaderboard, the daemon's sensor requests the recommended config's optimization, the
daemon loads the code location again and finds the optimized config, the sensor requests its answers, and
the automation sensor carries them through the evaluation to a new leaderboard that ranks the optimized
config first. No CLI takes part after the first leaderboard."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from rag_assets.board_files import leaderboard_path
from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep
from tests.openai_stub import OpenAIStub
from tests.servers import _stop
from tests.test_prompt_optimization_sweep import Scripted

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _sweeps(slice_data, tmp_path, name: str) -> tuple[str, str]:
    """(a sweep file without `optimize:`, the same sweep optimizing its recommended config's answer prompt):
    the first ranks the sweep's own config, as a deployment's leaderboard has before any optimization."""
    sections = dict(
        name=name,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": 3},
        generation={"model": "openai/generator", "max_tokens": 32},
    )
    plain = write_sweep(tmp_path / "plain.yaml", slice_data, **sections)
    spec = write_sweep(
        tmp_path / "deploy.yaml",
        slice_data,
        **sections,
        optimize={"reflection_model": "openai/reflector", "budget": {"max_metric_calls": 40}},
    )
    return str(plain), str(spec)


def test_a_deployment_optimizes_after_its_leaderboard_and_requests_the_optimized_config(
    slice_data, tmp_path, monkeypatch
):
    """On a deployment the sensor `<sweep>__prompt_optimization` does what `rag-sweep run` does after the
    leaderboard: it requests the recommended config's optimization once the leaderboard has decided, and,
    once the code location has loaded what it found, the optimized config's first optimized stage (its
    later stages follow through the automation sensor); what is complete is never requested again."""
    import dagster as dg

    from rag_assets.orchestration.plans import load_plan
    from rag_sweep.runner.step_runs import StepRunner
    from rag_sweep.sweep_defs import sweep_definitions
    from resources import build_resources

    qa = pl.read_parquet(slice_data["qa"])
    plain, spec = _sweeps(slice_data, tmp_path, "gepa_deploy")
    data = tmp_path / "data"
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        before = load_plan(spec, data_dir=data)  # a new deployment: no leaderboard yet, nothing to ask
        with dg.instance_for_test() as fresh:
            from sensors.prompt_optimization import next_requests, optimization_jobs

            requests, why = next_requests(before, data, fresh, optimization_jobs(before))
            assert not requests and why.startswith("no leaderboard decision yet")
        run = run_sweep(plain, str(data), progress=False)  # the sweep's own configs, ranked

        def tick(plan):
            defs = dg.Definitions.merge(
                sweep_definitions(plan, None, str(data)), dg.Definitions(resources=build_resources(str(data)))
            )
            sensor = defs.get_sensor_def(f"{plan.prefix}__prompt_optimization")
            result = sensor.evaluate_tick(dg.build_sensor_context(instance=run.instance, definitions=defs))
            step = StepRunner(defs, run.instance, {}, False, plan)
            return result, step

        loaded = load_plan(spec, data_dir=data)  # the code location as it loads before any optimization
        (recommended,) = loaded.optimization_starts({"recommended": run.board["config_key"][0]})
        result, step = tick(loaded)
        (request,) = result.run_requests
        assert (request.job_name, request.partition_key) == ("gepa_deploy__optimize", recommended)
        step("prompt_optimizations", request.partition_key)  # the run the daemon would launch
        result, _ = tick(loaded)
        assert not result.run_requests and "·optimized found" in result.skip_message

        reloaded = load_plan(spec, data_dir=data)  # the code location loaded again
        (optimized,) = reloaded.optimized_from
        result, step = tick(reloaded)
        (request,) = result.run_requests
        answers = reloaded.key_of(reloaded.config(optimized), "answers")
        assert (request.job_name, request.partition_key) == ("gepa_deploy__optimized_answers", answers)
        step("answers", answers)
        result, _ = tick(reloaded)
        assert not result.run_requests and "complete" in result.skip_message


@pytest.mark.stack
def test_the_daemon_optimizes_after_the_leaderboard_and_ranks_the_optimized_config(
    slice_data, tmp_path, monkeypatch
):
    qa = pl.read_parquet(slice_data["qa"])
    plain, spec = _sweeps(slice_data, tmp_path, "gepa_daemon")
    data = tmp_path / "data"
    board_path = leaderboard_path(data, "gepa_daemon")
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        first = run_sweep(plain, str(data), progress=False)  # the sweep's own config, ranked
        assert first.board["label"].to_list() == ["bm25·k3"]
        env = {
            **os.environ,
            "DAGSTER_HOME": str(data / "dagster_home"),  # the instance that run made
            "RAG_SWEEP": spec,
            "RAG_DATA_DIR": str(data),
            "RAG_VECTOR_STORE": "lancedb",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "DAGSTER_DISABLE_TELEMETRY": "1",
        }
        log = tmp_path / "daemon.log"
        daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline, board = time.monotonic() + 480, None
            while time.monotonic() < deadline:
                time.sleep(10)
                board = pl.read_parquet(board_path)
                if board.height > 1:
                    break
            assert board is not None and board.height > 1, log.read_text()[-4000:]
        finally:
            _stop(daemon)
    rows = {r["label"]: r for r in board.iter_rows(named=True)}
    assert set(rows) == {"bm25·k3", "bm25·k3·optimized"}
    optimized, seed = rows["bm25·k3·optimized"], rows["bm25·k3"]
    assert optimized["rank"] == 1 and optimized["recommended"]
    assert optimized["overall_score"] > seed["overall_score"] and optimized["tier"] < seed["tier"]

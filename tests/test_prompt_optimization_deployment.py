"""Prompt optimization on a deployment, with the real Dagster daemon: after the leaderboard, the daemon's
sensor requests the recommended config's optimization, the daemon loads the code location again and finds
the optimized config, the sensor requests its answers, and the automation sensor carries them through the
evaluation to a new leaderboard that ranks the optimized config first. No CLI takes part after the first
leaderboard."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from rag_assets.leaderboard import leaderboard_path
from runner import run_sweep
from tests.conftest import write_sweep
from tests.openai_stub import OpenAIStub
from tests.servers import _stop
from tests.test_prompt_optimization_sweep import Scripted

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.stack]


def test_the_daemon_optimizes_after_the_leaderboard_and_ranks_the_optimized_config(
    slice_data, tmp_path, monkeypatch
):
    qa = pl.read_parquet(slice_data["qa"])
    sections = dict(
        name="gepa_daemon",
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
    data = tmp_path / "data"
    board_path = leaderboard_path(data, "gepa_daemon")
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        first = run_sweep(str(plain), str(data), progress=False)  # the sweep's own config, ranked
        assert first.board["label"].to_list() == ["bm25·k3"]
        env = {
            **os.environ,
            "DAGSTER_HOME": str(data / "dagster_home"),  # the instance that run made
            "RAG_SWEEP": str(spec),
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

"""A sweep states no evidence it does not have: when every LLM call fails nothing is recommended, confirmed
or registered; a holdout whose calls failed confirms nothing, and a rerun that asks them again does; a
failed drift check is printed. End to end through `rag-sweep run`, against a local OpenAI-protocol server."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import pytest

from rag_core.decision.holdout import holdout_ids
from tests.conftest import ROOT, write_sweep
from tests.openai_stub import GoldAnswers, OpenAIStub

pytestmark = pytest.mark.slow
MODEL = "openai/stub-model"


def _cli(api_base: str, *args) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "RAG_LLM_API_BASE": api_base,
        "OPENAI_API_KEY": "sk-test",
        "RAG_LLM_MAX_RETRIES": "0",
    }
    return subprocess.run(
        [sys.executable, "-m", "rag_sweep.cli", "run", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _spec(tmp_path, slice_data, name: str):
    gen = {"max_tokens": 16}
    return write_sweep(
        tmp_path / f"{name}.yaml",
        slice_data,
        name=name,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [2, 3]},
        generation={"model": MODEL, **gen},
        decision={"holdout": 0.3},
    )


def _registered(data, name: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    return list(client.search_model_versions(f"name = '{name}'"))


def _board_run(data, name: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    (run,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    return run


def test_when_every_call_fails_nothing_is_recommended_confirmed_or_registered(slice_data, tmp_path):
    spec, data = _spec(tmp_path, slice_data, "outage"), tmp_path / "data"
    with OpenAIStub(lambda p: (401, "invalid api key", 0.0)) as stub:
        out = _cli(stub.api_base, spec, "--data-dir", data)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert (
        "Recommended: none" in out.stdout
        and "no config qualifies: of 2 configs, 2 had LLM calls fail" in text
    )
    assert "confirmed" not in text.replace("not confirmed", "") and "Ship the winner" not in text
    assert "No champion registered" in out.stdout and "error: the sweep recommends nothing" in out.stderr
    assert _registered(data, "outage") == []
    board = pl.read_parquet(data / "leaderboards" / "outage.parquet")
    assert (
        board["too_many_errors"].all() and board["tier"].null_count() == 2 and not board["recommended"].any()
    )


def test_a_failed_holdout_confirms_nothing_and_a_rerun_asks_its_calls_again(slice_data, tmp_path):
    """The provider fails (500) on the holdout's questions only: the verdict says the holdout failed, counts
    the calls, registers nothing and exits non-zero; once the provider is back, a rerun asks only those
    calls again, confirms, and registers the champion."""
    qa = pl.read_parquet(slice_data["qa"])
    held = holdout_ids(qa["query_id"].to_list(), 0.3, 0)
    held_questions = set(qa.filter(pl.col("query_id").is_in(list(held)))["question"])
    gold, state = GoldAnswers(qa), {"down": True}

    def respond(prompt: str):
        question = gold.question(prompt)
        if question in held_questions and state["down"]:
            return 500, "upstream error", 0.0
        return 200, gold.answer[question], 0.0

    spec, data = _spec(tmp_path, slice_data, "holdout-outage"), tmp_path / "data"
    with OpenAIStub(respond) as stub:
        first = _cli(stub.api_base, spec, "--data-dir", data)
        registered_first = _registered(data, "holdout-outage")
        board_run_first = _board_run(data, "holdout-outage")
        asked = len(stub.requests)
        state["down"] = False
        second = _cli(stub.api_base, spec, "--data-dir", data)
        again = stub.requests[asked:]
    text = first.stdout + first.stderr
    assert first.returncode == 1, text
    assert "not confirmed, the holdout failed" in first.stdout and "rerun asks the failed calls again" in text
    assert "the winner's curse" not in text and "Ship the winner" not in text
    assert registered_first == []
    tags, metrics = board_run_first.data.tags, board_run_first.data.metrics
    assert tags["holdout_status"] == "failed" and "holdout_score" not in metrics
    assert tags["holdout_confirmed"] == "none"

    assert second.returncode == 0, second.stdout + second.stderr
    # only the failed holdout calls were asked again: one per holdout question of each finalist
    assert again and all(gold.question(r["body"]["messages"][-1]["content"]) in held_questions for r in again)
    assert "Holdout (6 of 20 questions): confirmed:" in second.stdout
    assert "Ship the winner" in second.stdout and len(_registered(data, "holdout-outage")) == 1

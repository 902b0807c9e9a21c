"""Prompt optimization inside a sweep, offline against a local OpenAI-protocol server: the generator
answers well only when its prompt carries an instruction that the scripted reflection model proposes once
it has seen failed questions. The sweep optimizes its recommended config, the optimized config joins the
plan (sharing every partition before the answers), ranks above the seed prompt's config on the selection
questions, is confirmed on the holdout, which the optimizer never saw; MLflow keeps each candidate; a
rerun pays for nothing."""

from __future__ import annotations

import html
import re

import mlflow
import polars as pl
import pytest

from rag_assets.prompt_optimization import optimized_prompts
from rag_sweep.runner import run_sweep
from tests.conftest import cli, write_sweep
from tests.openai_stub import GoldAnswers, OpenAIStub

pytestmark = pytest.mark.slow

INSTRUCTION = "Reply with the exact name or phrase from the context, nothing else."


class Scripted:
    def __init__(self, qa: pl.DataFrame):
        self.gold = GoldAnswers(qa)
        self.reflection_prompts: list[str] = []

    def __call__(self, prompt: str, model: str):
        if model == "reflector":
            self.reflection_prompts.append(prompt)
            current = re.search(r"```\n(.*?)\n```", prompt, re.S).group(1)
            if "exactly one of the gold answers" not in prompt or INSTRUCTION in current:
                return 200, f"```\n{current}\n```", 0.0
            return 200, f"```\n{INSTRUCTION}\n{current}\n```", 0.0
        answer = self.gold.answer[self.gold.question(prompt)]
        if INSTRUCTION in prompt:
            return 200, answer, 0.0
        return 200, f"Judging by the context, perhaps it is {answer}, though I am not sure", 0.0


def test_a_sweep_optimizes_its_recommended_prompt_and_ranks_the_optimized_config(
    slice_data, tmp_path, monkeypatch
):
    qa = pl.read_parquet(slice_data["qa"])
    spec = str(
        write_sweep(
            tmp_path / "gepa.yaml",
            slice_data,
            name="gepa",
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={"mode": "bm25", "top_k": 3},
            generation={"model": "openai/generator", "max_tokens": 32},
            decision={"holdout": 0.3},
            optimize={
                "components": ["answer_prompt"],
                "reflection_model": "openai/reflector",
                "configs": "recommended",
                "budget": {"max_metric_calls": 60},
            },
        )
    )
    data = tmp_path / "data"
    script = Scripted(qa)
    planned = cli("plan", spec, "--data-dir", data)  # what it would cost, before anything runs
    assert planned.returncode == 0, planned.stderr
    assert re.search(r"LLM calls, prompt_optimizations: \d+", planned.stdout), planned.stdout
    with OpenAIStub(script, by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        run = run_sweep(spec, str(data), progress=False)
        asked = len(stub.requests)
        again = run_sweep(spec, str(data), progress=False)
        assert len(stub.requests) == asked  # a rerun pays for nothing
    plan, board = run.plan, run.board
    (optimized,) = plan.optimized_from
    base = plan.optimized_from[optimized]
    assert plan.labels[optimized].endswith("·optimized")
    # the optimized config shares every partition before the answers with the config it started from
    for stage in ("chunksets", "embeddings", "vector_index", "retrievals", "rerankings"):
        assert plan.key_of(plan.config(optimized), stage) == plan.key_of(plan.config(base), stage)
    assert INSTRUCTION in plan.config(optimized).generation.prompt_template
    rows = {r["config_key"]: r for r in board.iter_rows(named=True)}
    assert rows[optimized]["rank"] == 1 and rows[optimized]["overall_score"] > rows[base]["overall_score"]
    assert rows[base]["tier"] != rows[optimized]["tier"]  # significantly better on the selection questions
    assert rows[optimized]["recommended"]
    assert rows[optimized]["holdout_overall_score"] is not None  # a finalist, scored on the holdout
    import json

    decision = json.loads((data / "leaderboards" / "gepa.decision.json").read_text())
    assert decision["holdout"]["verdict"].startswith("confirmed"), decision["holdout"]

    # the optimizer never saw the holdout: its questions are the selection's, the reflection model's
    # prompts name no holdout question
    found = optimized_prompts(data, plan.prefix)[base]
    held = set(qa["query_id"]) - set(found["train_ids"]) - set(found["val_ids"])
    from rag_core.decision.holdout import holdout_ids

    holdout = holdout_ids(qa["query_id"].to_list(), 0.3, 0)
    selection = set(qa["query_id"]) - holdout
    assert set(found["train_ids"]) | set(found["val_ids"]) == selection and held == holdout
    holdout_questions = qa.filter(pl.col("query_id").is_in(list(holdout)))["question"].to_list()
    assert script.reflection_prompts
    assert not any(q in p for q in holdout_questions for p in script.reflection_prompts)

    # the ship report: the seed and the optimized prompt side by side, the questions it now answers
    report = (data / "leaderboards" / "gepa.report.md").read_text()
    assert f"## Prompt optimization: {html.escape(plan.labels[optimized])}" in report
    assert html.escape(INSTRUCTION) in report and "now answers better" in report

    # MLflow: the optimization's run, a child run per candidate, the best prompt as an artifact
    client = mlflow.MlflowClient(f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("gepa").experiment_id
    (parent,) = client.search_runs([exp], "tags.kind = 'prompt_optimization'")
    children = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == len(run.artifact("prompt_optimizations", base)) >= 2
    assert parent.data.metrics["best_val_score"] > parent.data.metrics["seed_val_score"]
    best = client.download_artifacts(parent.info.run_id, "best/answer_prompt.txt", str(tmp_path))
    assert INSTRUCTION in open(best).read()
    # the board before the optimized config joined is superseded: one current board, recommending it
    (current,) = client.search_runs([exp], "tags.kind = 'leaderboard' and tags.current = 'true'")
    assert current.data.tags["recommended_config"] == optimized
    assert {r.info.run_name for r in client.search_runs([exp], "tags.kind = 'leaderboard'")} == {
        "leaderboard",
        "leaderboard (superseded)",
    }
    # the rerun: the same board, no second optimization run
    assert again.board["config_key"].to_list() == board["config_key"].to_list()
    assert len(client.search_runs([exp], "tags.kind = 'prompt_optimization'")) == 1


HINT = "Search with the question's own words."


class ScriptedSearch:
    """The query writer searches for a useless word unless its prompt carries HINT (then the question
    itself); the LLM reranker keeps the retrieval order; the generator answers the gold answer only when
    its context holds it; the reflection model adds HINT to the query prompt once it sees that no gold
    document was retrieved."""

    def __init__(self, qa: pl.DataFrame):
        self.gold = GoldAnswers(qa)
        self.reflected: list[str] = []

    def __call__(self, prompt: str, model: str):
        if model == "reflector":
            current = re.search(r"```\n(.*?)\n```", prompt, re.S).group(1)
            self.reflected.append(current)
            if (
                re.search(r"## Retrieval\nof the \d+ retrieved, 0 of", prompt)
                and "{query}" in current
                and HINT not in current
            ):
                return 200, f"```\n{HINT}\n{current}\n```", 0.0
            return 200, f"```\n{current}\n```", 0.0
        question = self.gold.question(prompt)
        if model == "writer":
            return 200, (question if HINT in prompt else "information"), 0.0
        if model == "reranker":
            return 200, "1, 2, 3, 4, 5", 0.0
        answer = self.gold.answer[question]
        return 200, (answer if answer.lower() in prompt.split("Question:")[0].lower() else "unknown"), 0.0


def test_a_sweep_optimizes_its_query_and_rerank_prompts_from_the_retrieval_on(
    slice_data, tmp_path, monkeypatch
):
    """The query transformation and LLM reranking prompts: the optimization reads the config's vector
    index, searches the real store again with each candidate's prompt, and the optimized config shares
    every partition before its retrievals."""
    qa = pl.read_parquet(slice_data["qa"])
    spec = str(
        write_sweep(
            tmp_path / "search.yaml",
            slice_data,
            name="gepa_search",
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={
                "mode": "bm25",
                "top_k": 3,
                "query_transform": "rewrite",
                "query_model": "openai/writer",
            },
            rerank={"method": "llm", "model": "openai/reranker", "candidates": 5},
            generation={"model": "openai/generator", "max_tokens": 32},
            decision={"holdout": 0.3},
            optimize={
                "components": ["rewrite_prompt", "rerank_prompt"],
                "reflection_model": "openai/reflector",
                "budget": {"max_metric_calls": 60},
            },
        )
    )
    data = tmp_path / "data"
    script = ScriptedSearch(qa)
    with OpenAIStub(script, by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        run = run_sweep(spec, str(data), progress=False)
        asked = len(stub.requests)
        run_sweep(spec, str(data), progress=False)
        assert len(stub.requests) == asked  # a rerun pays for nothing
    plan, board = run.plan, run.board
    (optimized,) = plan.optimized_from
    base = plan.optimized_from[optimized]
    o, c = plan.config(optimized), plan.config(base)
    assert HINT in o.retrieval.query_prompt and o.rerank == c.rerank  # the reranking prompt stayed the seed's
    for stage in ("chunksets", "embeddings", "vector_index"):
        assert plan.key_of(o, stage) == plan.key_of(c, stage)
    assert "-qp" in plan.key_of(o, "retrievals") and plan.key_of(o, "retrievals") != plan.key_of(
        c, "retrievals"
    )
    rows = {r["config_key"]: r for r in board.iter_rows(named=True)}
    assert rows[optimized]["rank"] == 1 and rows[optimized]["recall_at_k"] > rows[base]["recall_at_k"]
    assert rows[optimized]["overall_score"] > rows[base]["overall_score"]
    found = optimized_prompts(data, plan.prefix)[base]
    assert set(found["best"]) == {"rewrite_prompt", "rerank_prompt"} and found["improved"]
    assert any("QUESTION: {query}" in text for text in script.reflected)  # it was shown the query prompt
    client = mlflow.MlflowClient(f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("gepa_search").experiment_id
    (parent,) = client.search_runs([exp], "tags.kind = 'prompt_optimization'")
    best = client.download_artifacts(parent.info.run_id, "best/rewrite_prompt.txt", str(tmp_path))
    assert HINT in open(best).read()

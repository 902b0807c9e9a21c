"""An adaptive (bayesian) search in a real run: it evaluates max_configs configs of the planned space, each
an ordinary set of partitions, and a rerun with a larger budget resumes without evaluating any twice."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep

pytestmark = pytest.mark.slow


def _evaluations(instance) -> list[str]:
    records = instance.fetch_materializations(dg.AssetKey(["search", "evaluations"]), limit=1000).records
    return [r.partition_key for r in records]


def test_a_bayesian_search_evaluates_its_budget_and_resumes(slice_data, tmp_path):
    sections = dict(
        name="search",
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
        ],
        retrieval={"mode": ["vector", "bm25", "hybrid"], "top_k": [2, 5]},
    )
    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        search={"strategy": "bayesian", "budget": {"max_configs": 4}},
        **sections,
    )
    first = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
    assert len(first.plan.config_keys) == 12  # the plan holds the whole space
    assert len(first.search.evaluated) == 4 and first.search.resumed == 0
    assert sorted(first.board["config_key"]) == sorted(first.search.evaluated)
    assert 1 <= first.search.index_builds <= 2
    assert sorted(_evaluations(first.instance)) == sorted(first.search.evaluated)  # only what it chose

    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        search={"strategy": "bayesian", "budget": {"max_configs": 6}},
        **sections,
    )
    second = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
    assert second.search.resumed == 4 and sorted(second.search.evaluated[:4]) == sorted(
        first.search.evaluated
    )
    assert len(set(second.search.evaluated)) == 6 and second.board.height == 6
    evaluations = _evaluations(second.instance)
    assert len(evaluations) == len(set(evaluations)) == 6  # no config evaluated twice
    assert second.board.filter(second.board["recommended"]).height == 1


def test_halving_drops_a_worse_config_early_stops_at_its_budget_and_resumes(
    slice_data, tmp_path, monkeypatch
):
    """Successive halving in a real run over an OpenAI-protocol server: a model that never knows the
    answer is dropped at the first rung; an LLM-call budget stops the search and a rerun finishes it;
    no question is ever sent twice for the same model and prompt (the call cache), and an unchanged
    rerun computes and asks nothing."""
    import json

    import polars as pl
    from mlflow import MlflowClient

    from rag_assets.board_files import read_decision
    from tests.openai_stub import GoldAnswers, OpenAIStub

    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)

    def respond(prompt: str, model: str):
        question = gold.question(prompt)
        return 200, gold.answer[question] if model == "good" else "I really could not say.", 0.0

    def sweep(budget: dict) -> str:
        return str(
            write_sweep(
                tmp_path / "halving.yaml",
                slice_data,
                name="halving",
                chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
                retrieval={"mode": ["vector", "bm25"], "top_k": 3},
                generation={"model": ["openai/good", "openai/bad"], "max_tokens": 16},
                search={"strategy": "halving", "start_questions": 10, "growth": 2, "budget": budget},
            )
        )

    data = str(tmp_path / "data")
    with OpenAIStub(respond, by_model=True) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        first = run_sweep(sweep({"max_llm_calls": 12}), data, progress=False)
        assert first.search.stopped_by == "max_llm_calls" and 12 <= first.search.llm_calls <= 20
        assert (first.board["n_queries"] == 10).all()  # what it found so far: configs on the first rung

        second = run_sweep(sweep({}), data, progress=False)
        third = run_sweep(sweep({}), data, progress=False)
        sent = [(r["body"]["model"], r["body"]["messages"][-1]["content"]) for r in stub.requests]
        asked_before_third = len(sent)

    assert len(sent) == len(set(sent))  # no question asked twice, across rungs and runs
    assert second.search.stopped_by == "halving" and len(second.search.evaluated) == 4
    bad = {k for k in second.plan.config_keys if "__openai-bad-" in k}
    assert second.search.dropped and set(second.search.dropped) >= bad
    assert all(second.search.dropped[k] == 10 for k in bad)  # worse on every question: out at rung 1
    assert len(bad) == 2 and not bad & set(second.board["config_key"])
    assert (second.board["n_queries"] == 20).all()  # the survivors, on the whole QA set
    decision = read_decision(second.data, "halving")
    assert decision["questions"] == 20 and set(decision["not_ranked"]) >= bad
    assert "__openai-good-" in decision["recommended"]

    assert asked_before_third == len(sent) and third.search.resumed == 4  # nothing computed or asked
    assert third.board["config_key"].to_list() == second.board["config_key"].to_list()
    client = MlflowClient(tracking_uri=f"sqlite:///{second.data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("halving")
    rungs = client.search_runs([exp.experiment_id], filter_string="tags.questions = '10/20'")
    assert len(rungs) == 4 and all("(10/20 questions)" in r.info.run_name for r in rungs)
    assert json.loads((second.data / "searches" / "halving.json").read_text())["started"] > 0


@pytest.mark.parametrize("strategy", ["bayesian", "halving"])
def test_a_search_ranks_a_config_whose_generator_failed_on_a_question(
    slice_data, tmp_path, monkeypatch, strategy
):
    """One question the generator always fails on: the search goes on as a grid does (the config is ranked
    with its error counted), asks the failed call again at most once per step it runs, and a rerun ends the
    same way. (It crashed, or asked the failed call again forever.)"""
    import polars as pl

    from tests.openai_stub import GoldAnswers, OpenAIStub

    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    down = qa["question"][0]

    def respond(prompt: str):
        question = gold.question(prompt)
        return (500, "upstream error", 0.0) if question == down else (200, gold.answer[question], 0.0)

    spec = write_sweep(
        tmp_path / "fails.yaml",
        slice_data,
        name="fails",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [2, 3]},
        generation={"model": "openai/m", "max_tokens": 16},
        search={"strategy": strategy, "start_questions": 10, "budget": {"max_configs": 2}},
    )
    with OpenAIStub(respond) as stub:
        monkeypatch.setenv("RAG_LLM_API_BASE", stub.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("RAG_LLM_MAX_RETRIES", "0")
        first = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
        asked = [r["body"]["messages"][-1]["content"] for r in stub.requests]
        again = run_sweep(str(spec), str(tmp_path / "data"), progress=False)
        asked_again = len(stub.requests) - len(asked)
    assert first.board.height == 2 and (first.board["n_generation_errors"] == 1.0).all()
    assert first.board["n_queries"].to_list() == [20, 20]
    assert len(first.search.evaluated) == 2
    assert 2 <= sum(down in p for p in asked) <= 4  # each config's failure, asked once more at most
    assert again.board["config_key"].to_list() == first.board["config_key"].to_list()
    assert asked_again == 0

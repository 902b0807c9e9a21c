"""The bill of a sweep, before running it: partitions, texts to embed, LLM calls, tokens and cost."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rag_core.planning.bill import estimate
from rag_core.planning.plan import Plan
from rag_core.planning.spec import sweep_from_dict

RAW = {
    "name": "bill",
    "data": {"corpus": "c.parquet", "qa": "q.parquet"},
    "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    "retrieval": {
        "mode": "vector",
        "top_k": 2,
        "query_transform": ["none", "rewrite"],
        "query_model": "gpt-4o-mini",
    },
    "rerank": {"method": "llm", "model": "gpt-4o-mini", "candidates": 4},
    "generation": {"model": ["extractive", "ollama/unpriced"], "max_tokens": 10},
}


def test_llm_calls_tokens_and_cost_of_what_is_not_done():
    plan = Plan.resolve(sweep_from_dict(RAW, Path("/tmp/bill.yaml")))
    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})  # 100 tokens each

    def price(model: str, prompt: int, completion: int):
        return None if model.startswith("ollama") else (prompt + completion) * 1e-6

    done = {("retrievals", plan.keys("retrievals")[0])}  # one retrieval setting exists already
    bill = estimate(plan, done, lambda key: chunks, lambda model: {"unused"}, 10, price)
    assert bill.partitions["retrievals"] == (1, 1) and bill.partitions["answers"] == (0, 4)
    assert bill.texts_to_embed == 2  # distinct index texts, none cached
    assert bill.llm_calls == {"retrievals": 10, "rerankings": 20, "answers": 20}
    # rerank prompt: 64 + 4 candidates x 100 tokens, completion 64; 2 partitions x 10 queries
    assert bill.llm_tokens["rerankings"] == 20 * (64 + 400 + 64)
    assert bill.unpriced == {"ollama/unpriced"}  # its calls are counted, not priced
    priced = bill.llm_tokens["retrievals"] + bill.llm_tokens["rerankings"]
    assert abs(bill.cost_usd - priced * 1e-6) < 1e-12


def test_samples_multiply_the_answers_and_the_holdout_is_named():
    raw = {
        **RAW,
        "retrieval": {"mode": "vector", "top_k": 2},
        "rerank": {"method": "none"},
        "generation": {"model": "ollama/unpriced", "max_tokens": 10, "temperature": [0.0, 0.7]},
        "evaluation": {"samples": 3},
    }
    plan = Plan.resolve(sweep_from_dict(raw, Path("/tmp/bill.yaml")))
    assert sorted(c.generation.samples for c in plan.configs) == [1, 3]  # only the random generator samples
    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})
    bill = estimate(
        plan, set(), lambda key: chunks, lambda model: set(), 7, lambda *a: None, holdout_questions=3
    )
    assert bill.llm_calls == {"answers": 7 + 7 * 3}
    assert any("finalists on 3 holdout questions" in line for line in bill.lines())


def test_a_prompt_optimization_counts_its_budget_and_reflections():
    raw = {
        **RAW,
        "retrieval": {"mode": "vector", "top_k": 2},
        "rerank": {"method": "none"},
        "generation": {"model": ["extractive", "gpt-4o-mini"], "max_tokens": 10},
        "optimize": {"reflection_model": "gpt-4o", "budget": {"max_metric_calls": 40}, "minibatch": 4},
    }
    plan = Plan.resolve(sweep_from_dict(raw, Path("/tmp/bill.yaml")))
    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})
    bill = estimate(plan, set(), lambda key: chunks, lambda model: set(), 10, lambda *a: 0.0)
    # 40 questions scored + 10 answers of the optimized config by the generator, 40 // 8 reflections
    assert bill.llm_calls["prompt_optimizations"] == 40 + 5 + 10
    assert any("prompt optimization" in line for line in bill.lines())
    (start,) = plan.optimizable_keys  # the extractive reader has no answer prompt to optimize
    done = {("prompt_optimizations", start)}
    assert (
        "prompt_optimizations"
        not in estimate(plan, done, lambda k: chunks, lambda m: set(), 10, lambda *a: 0.0).llm_calls
    )


def test_a_query_and_rerank_prompt_optimization_counts_the_calls_of_the_stages_it_reruns():
    raw = {
        **RAW,
        "retrieval": {"mode": "bm25", "top_k": 2, "query_transform": "rewrite", "query_model": "gpt-4o-mini"},
        "rerank": {"method": "llm", "model": "gpt-4o-mini", "candidates": 5},
        "generation": {"model": "gpt-4o-mini", "max_tokens": 10},
        "optimize": {
            "reflection_model": "gpt-4o",
            "components": ["rewrite_prompt"],
            "budget": {"max_metric_calls": 40},
            "minibatch": 4,
        },
    }
    plan = Plan.resolve(sweep_from_dict(raw, Path("/tmp/bill.yaml")))
    assert plan.sweep.optimize.first_stage == "retrievals"
    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})
    bill = estimate(plan, set(), lambda key: chunks, lambda model: set(), 10, lambda *a: 0.0)
    # per question scored (40) and per question of the optimized config (10): a query transformation and a
    # reranking; then the answers (40 + 10) and 40 // 8 reflections
    assert bill.llm_calls["prompt_optimizations"] == (40 + 10) * 2 + (40 + 10) + 5


def test_the_time_of_llm_calls_follows_each_models_seconds_a_call_over_the_calls_in_flight():
    plan = Plan.resolve(sweep_from_dict(RAW, Path("/tmp/bill.yaml")))
    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})
    args = (plan, set(), lambda key: chunks, lambda model: set(), 10, lambda *a: 0.0)
    slow = {"gpt-4o-mini": 1.0, "ollama/unpriced": 7.0}  # a local model on a CPU: seconds a call
    one = estimate(*args, seconds_per_call=lambda m: slow[m], concurrency=1)
    two = estimate(*args, seconds_per_call=lambda m: slow[m], concurrency=2)
    rest = estimate(*args, seconds_per_call=lambda m: 0.0).seconds  # embedding and bookkeeping
    assert one.llm_models == {"gpt-4o-mini", "ollama/unpriced"}
    # 10 rewrites and 20 rerankings of gpt-4o-mini; 20 answers of the local model
    llm = (10 + 20) * 1.0 + 20 * 7.0
    assert abs(one.seconds - (llm + rest)) < 1e-9
    assert abs(two.seconds - (llm / 2 + rest)) < 1e-9


def test_a_models_seconds_a_call_are_the_median_of_its_latest_calls_in_the_ledger(tmp_path):
    from rag_core.common.completion import Completion
    from rag_sweep.runner.estimate import LLMSpeeds
    from resources.llm_cache import LLMCache

    cache = LLMCache(tmp_path / "llm_cache.sqlite")
    assert LLMSpeeds(tmp_path).seconds("openai/local") == 1.0  # no ledger: assumed, and none made
    assert not (tmp_path / "llm_cache.sqlite").exists()
    for i, ms in enumerate([3000.0, 9000.0, 4000.0, 9000.0, 5000.0]):
        cache.put(f"k{i}", "openai/local", Completion("x", None, 1, ms, 10, 2, 0.0))
    cache.put("failed", "openai/local", Completion("", "timeout", 1, 60000.0))  # not paid: not stored
    speeds = LLMSpeeds(tmp_path)
    assert speeds.seconds("openai/local") == 5.0
    assert speeds.seconds("gpt-4o-mini") == 1.0
    assert "~5.0 s a call measured here (the median of its latest 5 calls)" in speeds.line("openai/local")
    assert "assumed (no call to it recorded" in speeds.line("gpt-4o-mini")

"""Iterative retrieval on a constructed corpus where the second gold document is reachable only through a
name the first one mentions: the offline names rule and the LLM loop (against a local OpenAI-protocol
server) find it at hop 2 and stop there; single-shot retrieval keeps its keys and fingerprints."""

from __future__ import annotations

import polars as pl
import pytest

from rag_core.metrics.hops import hop_scores
from rag_core.planning.spec import RagConfig
from rag_core.retrieval.bm25 import BM25Index
from rag_core.retrieval.hops import coverage, names_in, next_query
from rag_core.retrieval.retrieve import Hit, retrieve

DOCS = [
    ("film_x", "Film X", "Film X is a 1999 drama film produced by Alpha Studio and shot in winter."),
    ("alpha", "Alpha Studio", "Alpha Studio is a company founded in the city of Reykjavik in 1980."),
    ("film_y", "Film Y", "Film Y is a 2001 comedy film produced by Beta Pictures."),
    ("beta", "Beta Pictures", "Beta Pictures is a company founded in the city of Oslo in 1975."),
    ("reykjavik", "Reykjavik", "Reykjavik is the capital of Iceland, a city by the sea."),
    ("winter", "Winter", "Winter is the coldest season of the year."),
]
QUESTION = "In which city was the company that produced Film X founded?"
GOLD = {"film_x", "alpha"}


class MemoryStore:
    """A keyword searcher over the chunks in memory (the project's BM25), in the stores' retrieve() shape."""

    def __init__(self, chunks: pl.DataFrame):
        self.rows = chunks.to_dicts()
        self.index = BM25Index([r["text"] for r in self.rows])
        self.queries: list[str] = []

    def retrieve(self, collection, mode, text, vector, k, alpha, fusion, where) -> list[Hit]:
        assert mode == "bm25"
        self.queries.append(text)
        return [
            Hit(self.rows[i]["chunk_id"], self.rows[i]["doc_id"], self.rows[i]["text"], s)
            for i, s in self.index.search(text, k)
        ]


def chunks() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "chunk_id": [f"{d}#0" for d, _, _ in DOCS],
            "doc_id": [d for d, _, _ in DOCS],
            "title": [t for _, t, _ in DOCS],
            "text": [x for _, _, x in DOCS],
        }
    )


def config(**retrieval) -> RagConfig:
    return RagConfig(
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        embedding={"model": "all-MiniLM-L6-v2"},
        index={"store": "lancedb"},
        retrieval={"mode": "bm25", "top_k": 1, **retrieval},
        generation={"model": "extractive"},
    )


QA = pl.DataFrame({"query_id": ["q1"], "question": [QUESTION]})


def no_embedding(texts):
    raise AssertionError("a keyword search embeds nothing")


def test_single_shot_finds_one_gold_document():
    row = retrieve(config(), QA, chunks(), MemoryStore(chunks()), "c", no_embedding, None).row(0, named=True)
    assert row["doc_ids"] == ["film_x"]
    assert "hops" not in row  # single-shot retrieval's rows are what they were


def test_the_names_rule_finds_the_bridge_at_hop_two_and_stops_there():
    store = MemoryStore(chunks())
    out = retrieve(config(max_hops=3), QA, chunks(), store, "c", no_embedding, None)
    row = out.row(0, named=True)
    assert row["hop_doc_ids"] == [["film_x"], ["alpha"]]
    assert row["hops"] == 2 and row["hop_stop"] == "sufficient"  # no third search
    assert row["hop_queries"][1] == f"{QUESTION} Alpha Studio"
    assert row["doc_ids"] == ["film_x", "alpha"] and row["hop_calls"] == 0
    # the first query twice: once untimed (the store's start-up), then timed as the question's
    assert store.queries == [QUESTION, QUESTION, f"{QUESTION} Alpha Studio"]
    scores = hop_scores(row["hop_doc_ids"], GOLD, 3)
    assert scores == {
        "recall_hop_1": 0.5,
        "recall_hop_2": 1.0,
        "recall_hop_3": 1.0,
        "stop_correct": 1.0,
        "wasted_hops": 0.0,
    }


def test_the_llm_loop_asks_whether_it_has_enough_and_searches_what_the_model_names():
    from resources.llm import LLMClient
    from tests.openai_stub import OpenAIStub

    def respond(prompt: str):
        if prompt.rstrip().endswith("ENOUGH:"):
            return 200, ("YES" if "Reykjavik in 1980" in prompt else "NO"), 0.0
        assert prompt.rstrip().endswith("NEXT QUERY:") and "Film X is a 1999 drama" in prompt
        return 200, "Alpha Studio founding city", 0.0

    with OpenAIStub(respond) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        c = config(max_hops=3, hop_policy="llm", hop_model="openai/stub-judge")
        row = retrieve(c, QA, chunks(), MemoryStore(chunks()), "c", no_embedding, llm).row(0, named=True)
        prompts = [r["body"]["messages"][-1]["content"] for r in stub.requests]
    # hop 2 decided (NO, then the query), hop 3 decided (YES): three calls, stopped as sufficient
    assert len(prompts) == 3 and row["hop_calls"] == 3 and row["hop_fallbacks"] == 0
    assert row["hop_queries"][1] == "Alpha Studio founding city"
    assert row["hop_doc_ids"] == [["film_x"], ["alpha"]]
    assert row["hops"] == 2 and row["hop_stop"] == "sufficient" and row["hop_tokens"] > 0
    scores = hop_scores(row["hop_doc_ids"], GOLD, 3)
    assert (scores["recall_hop_1"], scores["recall_hop_2"], scores["stop_correct"]) == (0.5, 1.0, 1.0)


def test_a_failed_llm_decision_falls_back_to_the_names_rule_and_is_counted():
    from resources.llm import LLMClient
    from tests.openai_stub import OpenAIStub

    with OpenAIStub(lambda p: (500, "down", 0.0)) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0, retry_backoff_s=0.01)
        c = config(max_hops=2, hop_policy="llm", hop_model="openai/stub-judge")
        row = retrieve(c, QA, chunks(), MemoryStore(chunks()), "c", no_embedding, llm).row(0, named=True)
    assert row["hop_fallbacks"] == 2  # the sufficiency and the query
    assert row["hop_queries"][1] == f"{QUESTION} Alpha Studio" and row["hop_doc_ids"][1] == ["alpha"]


def test_an_llm_outage_makes_the_names_rules_decisions_not_more_hops():
    """A hop model that fails every call: each decision is the names rule's (the README's fallback), so the
    loop stops where the names rule stops, and every call is counted as fallen back."""
    from resources.llm import LLMClient
    from tests.openai_stub import OpenAIStub

    names = retrieve(config(max_hops=3), QA, chunks(), MemoryStore(chunks()), "c", no_embedding, None)
    with OpenAIStub(lambda p: (500, "down", 0.0)) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0, retry_backoff_s=0.01)
        c = config(max_hops=3, hop_policy="llm", hop_model="openai/stub-judge")
        row = retrieve(c, QA, chunks(), MemoryStore(chunks()), "c", no_embedding, llm).row(0, named=True)
    expected = names.row(0, named=True)
    for col in ("hops", "hop_queries", "hop_doc_ids", "hop_stop", "doc_ids"):
        assert row[col] == expected[col], col
    assert row["hop_stop"] == "sufficient" and row["hops"] == 2
    # hop 2: sufficiency and query failed; hop 3: sufficiency failed, the passages cover the question
    assert row["hop_calls"] == 3 and row["hop_fallbacks"] == 3


def test_names_coverage_and_hop_scores():
    assert names_in("The studio moved. Alpha Studio joined the Bank of England in 1990.") == [
        "Alpha Studio",
        "Bank of England",
    ]
    assert next_query("Who made Film X?", ["Who made Film X?"], ["Film X"], ["Film X by Alpha Studio."]) == (
        "Who made Film X? Alpha Studio"
    )
    assert next_query("Who made Film X?", [], ["Film X", "Alpha Studio"], ["Film X by Alpha Studio."]) is None
    assert coverage("Which city was it founded in?", ["founded in a city"]) == 1.0
    assert coverage("Which city was it founded in?", ["nothing here"]) == 0.0
    # stopped early with a gold document missing; went on after completing the gold ones; never completed
    assert hop_scores([["a"]], {"a", "b"}, 3)["stop_correct"] == 0.0
    assert hop_scores([["a", "b"], ["c"]], {"a", "b"}, 2) | {} == {
        "recall_hop_1": 1.0,
        "recall_hop_2": 1.0,
        "stop_correct": 0.0,
        "wasted_hops": 1.0,
    }
    assert hop_scores([["a"], ["c"]], {"a", "b"}, 2)["stop_correct"] == 1.0  # used every hop it had
    assert hop_scores([["a"]], set(), 2)["recall_hop_1"] is None


def test_single_shot_keeps_its_keys_and_fingerprints(tmp_path, slice_data):
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import load_sweep
    from rag_core.planning.stages import _retrieval_settings
    from tests.conftest import write_sweep

    def plan(**retrieval) -> Plan:
        spec = write_sweep(
            tmp_path / "s.yaml",
            slice_data,
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={"mode": "hybrid", "top_k": 3, **retrieval},
        )
        return Plan.resolve(load_sweep(spec))

    inputs = {"corpus": "c" * 64, "qa_set": "q" * 64}
    before, once = plan(), plan(max_hops=1, hop_policy="llm", hop_model="openai/x")
    assert once.config_keys == before.config_keys
    assert once.fingerprints(inputs) == before.fingerprints(inputs)
    assert not {"max_hops", "hop_policy", "hop_model"} & set(_retrieval_settings(once.configs[0], None))
    twice = plan(max_hops=2)
    assert twice.config_keys[0].endswith("hops2-k3__none-k3__extractive")
    assert twice.fingerprints(inputs)[("retrievals", twice.keys("retrievals")[0])] not in set(
        before.fingerprints(inputs).values()
    )
    # every stage before retrieval is shared with single-shot
    for stage in ("chunksets", "embeddings", "vector_index"):
        assert twice.keys(stage) == before.keys(stage)


def test_the_llm_policy_needs_a_model():
    with pytest.raises(ValueError, match="hop_policy 'llm' needs hop_model"):
        config(max_hops=2, hop_policy="llm")


def test_the_hop_prompts_are_prompt_optimization_components():
    from rag_core.optimization.adapter import retrieval_texts
    from rag_core.planning.prompts import REFINE_PROMPT
    from rag_core.planning.spec import component_used

    c = config(max_hops=2, hop_policy="llm", hop_model="openai/x")
    assert component_used(c, "refine_prompt") and component_used(c, "sufficiency_prompt")
    assert not component_used(config(max_hops=2), "refine_prompt")  # the names rule reads no prompt
    assert c.text("refine_prompt") == REFINE_PROMPT
    evolved = c.with_texts({"refine_prompt": "Next query for {query} given {passages}:"})
    assert (
        evolved.retrieval.refine_prompt.startswith("Next query") and evolved.retrieval.key != c.retrieval.key
    )
    assert c.with_texts({"refine_prompt": REFINE_PROMPT}).retrieval.refine_prompt is None  # built-in: unset
    # the optimizer reuses a question's retrieval only for the same retrieval-side texts
    assert retrieval_texts({"refine_prompt": "a"}) != retrieval_texts({"refine_prompt": "b"})
    assert retrieval_texts({"answer_prompt": "a"}) == retrieval_texts({"answer_prompt": "b"})


def test_the_hops_example_compares_iterative_retrieval_with_single_shot_at_its_document_budget():
    """The README credited iterative retrieval with a gain over single-shot top_k 2; single-shot with the
    3-hop configs' budget (top_k 6) led the board. In each mode, the example holds single-shot at the
    depth of one search and at the largest budget an iterative config has (max_hops × top_k)."""
    from pathlib import Path

    from rag_core.planning.spec import load_sweep

    configs = load_sweep(Path(__file__).parents[1] / "examples" / "sweeps" / "hops.yaml").configs
    single = {(c.retrieval.mode, c.retrieval.top_k) for c in configs if c.retrieval.max_hops == 1}
    iterative = [c.retrieval for c in configs if c.retrieval.max_hops > 1]
    assert iterative
    for mode in {r.mode for r in iterative}:
        runs = [r for r in iterative if r.mode == mode]
        assert {(mode, r.top_k) for r in runs} <= single
        assert (mode, max(r.max_hops * r.top_k for r in runs)) in single

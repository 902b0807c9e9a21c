"""Speed between tied configs by the work a question costs, counted (rag_core/decision/work.py): the same
recommendation whatever the machine measured."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_core.decision.recommendation import Constraints, recommend
from rag_core.decision.work import describe_work, least_work, more_work, work_per_question

CHUNKINGS = {"para": (1074, 2608.7), "rec": (2080, 1353.8)}  # the example's: chunks, mean characters


def row(label: str, mode: str, score: float, p95: float, **extra) -> dict:
    chunking = label.split("·")[0]
    chunks, chars = CHUNKINGS[chunking]
    spread = p95 * 0.05  # the p95's interval over the questions
    return {
        "config_key": label,
        "overall_score": score,
        "tier": 1,
        "meets_constraints": True,
        "cost_per_1k_queries": 0.0,
        "p95_latency_ms": p95,
        "p95_latency_ci_low": p95 - spread,
        "p95_latency_ci_high": p95 + spread,
        "n_queries": 70.0,
        "retrieval.mode": mode,
        "retrieval.top_k": 5,
        "retrieval.query_transform": "none",
        "rerank.method": "none",
        "generation.model": "extractive",
        "chunk_count": float(chunks),
        "chunk_chars_mean": chars,
        **extra,
    }


def example_tier(hybrid_ms: float) -> pl.DataFrame:
    """The example's six tied configs (their scores), hybrid's p95 `hybrid_ms` against BM25's 4 ms."""
    return pl.DataFrame(
        [
            row("rec·hybrid", "hybrid", 0.4184, hybrid_ms),
            row("para·hybrid", "hybrid", 0.4112, hybrid_ms * 0.85),
            row("para·vector", "vector", 0.4096, 4.2),
            row("rec·bm25", "bm25", 0.4045, 4.0),
            row("para·bm25", "bm25", 0.4024, 3.7),
            row("rec·vector", "vector", 0.3985, 5.7),
        ]
    )


def test_the_example_recommends_the_same_config_wherever_hybrids_latency_falls_against_the_band():
    """Hybrid retrieval's p95 is about twice BM25's: measured on either side of the 2x band, the measured
    rule recommended `rec·hybrid` (within it) or `para·hybrid` (just past it) or, with both past it,
    `para·vector`; counted, a hybrid search does its vector and BM25 twins' together, on any machine."""
    picks = {
        ms: recommend(example_tier(ms), Constraints(prefer="cheapest"))[0]
        for ms in (6.0, 7.9, 8.5, 9.6, 30.0)
    }
    assert set(picks.values()) == {"para·vector"}, picks


def test_more_work_is_a_search_or_a_call_more_not_a_larger_index_or_context():
    tier = {r["config_key"]: work_per_question(r) for r in example_tier(8.0).iter_rows(named=True)}
    assert more_work(tier["para·hybrid"], tier["para·vector"])  # its vector half and a BM25 search
    assert more_work(tier["rec·hybrid"], tier["para·vector"])  # whatever its chunking
    # 2,080 chunks against 1,074, or top_k 4 against 1: a step's size, left to the measurement
    assert not more_work(tier["rec·vector"], tier["para·vector"])
    k4 = work_per_question(row("para·vector", "vector", 0.5, 4.0, **{"retrieval.top_k": 4}))
    k1 = work_per_question(row("para·vector", "vector", 0.5, 4.0, **{"retrieval.top_k": 1}))
    assert not more_work(k4, k1)
    assert not more_work(tier["para·vector"], tier["para·bm25"])  # a vector search against a BM25 one
    assert not more_work(tier["para·bm25"], tier["para·vector"])
    assert sorted(least_work(example_tier(8.0))["config_key"]) == [
        "para·bm25",
        "para·vector",
        "rec·bm25",
        "rec·vector",
    ]
    llm = work_per_question(
        row("para·vector", "vector", 0.5, 400.0, **{"generation.model": "openai/gpt-4o-mini"})
    )
    assert llm["llm_calls"] == 1 and more_work(llm, tier["para·vector"])
    sampled = {"generation.model": "openai/gpt-4o-mini", "generation.samples": 3}
    assert work_per_question(row("para·vector", "vector", 0.5, 400.0, **sampled))["llm_calls"] == 3
    multi = {"retrieval.query_transform": "multi_query", "retrieval.n_queries": 3, "mean_hops": 2.0}
    searched = work_per_question(row("para·hybrid", "hybrid", 0.5, 9.0, **multi))
    assert searched["searches_vector"] == searched["searches_keyword"] == 6 and searched["llm_calls"] == 1
    assert describe_work(searched) == "searches 6 vector + 6 keyword, LLM calls 1"
    plugin = work_per_question(row("para·vector", "splade", 0.5, 9.0))
    assert not more_work(plugin, tier["para·vector"]) and not more_work(tier["para·vector"], plugin)


def test_measured_latency_still_orders_configs_the_counts_cannot():
    """A vector search against a BM25 one: neither does more work, so a BM25 config 10x faster beyond
    both intervals is the faster, and one within the band is as fast (the better score decides)."""
    far = pl.DataFrame([row("para·vector", "vector", 0.42, 40.0), row("para·bm25", "bm25", 0.40, 4.0)])
    near = pl.DataFrame([row("para·vector", "vector", 0.42, 5.0), row("para·bm25", "bm25", 0.40, 4.0)])
    assert recommend(far, Constraints(prefer="cheapest"))[0] == "para·bm25"
    assert recommend(near, Constraints(prefer="cheapest"))[0] == "para·vector"
    why = recommend(near, Constraints(prefer="fastest"))[1]
    assert (
        "the fastest (the least work a question costs, counted;" in why and "then the cheapest, then" in why
    )


WORK = st.fixed_dictionaries(
    {k: st.sampled_from([0.0, 1.0, 2.0]) for k in ("llm_calls", "cross_encoder_pairs", "searches_vector")}
)


@settings(max_examples=200, deadline=None)
@given(st.lists(WORK, min_size=1, max_size=6))
def test_more_work_is_a_strict_order_and_some_config_always_does_least(works):
    for a in works:
        assert not more_work(a, a)
        for b in works:
            assert not (more_work(a, b) and more_work(b, a))
            for c in works:
                if more_work(a, b) and more_work(b, c):
                    assert more_work(a, c)
    least = [w for w in works if not any(more_work(w, o) for o in works)]
    assert least

import math

import numpy as np
import polars as pl
import pytest

from rag_core.common.text import normalize_answer
from rag_core.metrics import (
    RETRIEVAL_METRICS,
    evaluate_queries,
    exact_match,
    faithfulness,
    needs,
    percentile,
    retrieval_scores,
    scorable_metrics,
    summarize,
    token_f1,
    undefined_reasons,
)


def test_retrieval_hand_computed_with_duplicate_chunks():
    # chunks map to docs; d1 appears twice and counts once, at rank 1
    ranked = ["d1", "d1", "x", "d2", "y"]
    s = retrieval_scores(ranked, {"d1", "d2", "d3"}, k=5)
    # deduped: d1 x d2 y -> hits at ranks 1 and 3
    assert s["precision_at_k"] == pytest.approx(2 / 5)
    assert s["recall_at_k"] == pytest.approx(2 / 3)
    assert s["f1_at_k"] == pytest.approx(2 * 0.4 * (2 / 3) / (0.4 + 2 / 3))
    assert s["hit_rate_at_k"] == 1.0
    assert s["mrr"] == 1.0
    dcg = 1 / math.log2(2) + 1 / math.log2(4)
    idcg = 1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert s["ndcg_at_k"] == pytest.approx(dcg / idcg)


def test_retrieval_cutoff_and_misses():
    s = retrieval_scores(["x", "y", "d1"], {"d1"}, k=2)
    assert set(s.values()) == {0.0}
    s = retrieval_scores(["x", "d1"], {"d1"}, k=2)
    assert s["mrr"] == 0.5 and s["ndcg_at_k"] == pytest.approx(1 / math.log2(3))
    assert retrieval_scores([], {"d1"}, k=3)["recall_at_k"] == 0.0
    with pytest.raises(ValueError):
        retrieval_scores(["d1"], set(), k=1)


@pytest.mark.parametrize(
    "pred,gold,em,f1",
    [
        ("The Eiffel Tower", "eiffel tower", 1.0, 1.0),
        ("an apple.", "Apple", 1.0, 1.0),
        ("Paris, France", "Paris", 0.0, 2 / 3),
        ("", "Paris", 0.0, 0.0),
        ("the", "a", 1.0, 0.0),  # both normalize to empty: SQuAD v1.1 EM 1, F1 0
        ("Zürich", "zürich", 1.0, 1.0),
        ("1,000 people", "1000 people", 1.0, 1.0),
    ],
)
def test_squad_em_and_f1(pred, gold, em, f1):
    assert exact_match(pred, [gold]) == em
    assert token_f1(pred, [gold]) == pytest.approx(f1)


def test_max_over_gold_answers_and_normalization():
    assert exact_match("NYC", ["New York", "nyc"]) == 1.0
    assert token_f1("new york city", ["New York", "city"]) == pytest.approx(0.8)
    assert normalize_answer("  The  Big, Apple! ") == "big apple"


def test_faithfulness():
    assert faithfulness("Paris is big", ["Paris is a big city"]) == 1.0
    assert faithfulness("Paris is huge", ["Paris is a big city"]) == pytest.approx(2 / 3)
    assert faithfulness("", ["anything"]) == 0.0
    assert faithfulness("Paris", []) == 0.0


def test_percentile_matches_numpy_linear():
    xs = [5.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 95) == pytest.approx(4.7)
    assert percentile([], 50) == 0.0


def test_evaluate_and_summarize_count_left_out_queries():
    qa = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3"],
            "question": ["?", "?", "?"],
            "answers": [["Paris"], [], ["Rome"]],
            "relevant_doc_ids": [["d1"], ["d2"], []],
        }
    )
    ret = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3"],
            "doc_ids": [["d1", "x"], ["x", "d2"], ["x"]],
            "texts": [["Paris is here"], ["nothing"], ["Rome"]],
            "latency_ms": [1.0, 2.0, 3.0],
        }
    )
    ans = pl.DataFrame(
        {
            "query_id": ["q1", "q2", "q3"],
            "answer": ["Paris", "foo", ""],
            "error": [None, None, "Timeout"],
            "latency_ms": [10.0, 20.0, 30.0],
        }
    )
    per = evaluate_queries(qa, ret, ans, top_k=2)
    s = summarize(per)
    assert s["n_queries"] == 3
    assert s["n_queries_without_gold"] == 1 and s["n_queries_without_answers"] == 1
    assert s["n_generation_errors"] == 1
    assert s["recall_at_k"] == 1.0  # q1 and q2 both found their doc; q3 left out
    assert s["mrr"] == pytest.approx((1 + 0.5) / 2)
    assert s["exact_match"] == pytest.approx(0.5)  # q1 right, q3 (error) wrong, q2 left out
    assert s["retrieval_p50_ms"] == 2.0 and s["generation_p95_ms"] == pytest.approx(29.0)
    assert not any(isinstance(v, float) and math.isnan(v) for v in s.values())


def test_chunking_metrics():
    import numpy as np

    from rag_core.metrics.chunking import answer_coverage, cohesion_separation, length_stats

    assert length_stats([2, 4, 6]) == {
        "chunk_tokens_mean": 4.0,
        "chunk_tokens_std": pytest.approx(np.std([2, 4, 6])),
        "chunk_tokens_min": 2.0,
        "chunk_tokens_max": 6.0,
        "chunk_truncated_share": 0.0,  # no limit known: nothing counted as truncated
    }
    assert length_stats([2, 4, 6], max_tokens=4)["chunk_truncated_share"] == pytest.approx(1 / 3)
    assert length_stats([])["chunk_tokens_mean"] == 0.0
    # "Paris" covered; "New York" split across chunks is not; articles/case normalized
    assert (
        answer_coverage(["The capital is Paris.", "in New", "York it rains"], [["paris"], ["New York"]])
        == 0.5
    )
    assert answer_coverage(["x"], [[]]) == 0.0
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    # chunk A: two identical sentences (cohesion 1); chunk B: orthogonal pair (cohesion 0); A vs B centroid
    coh, sep = cohesion_separation([[e1, e1], [e1, e2], None, [e2]])
    assert coh == pytest.approx(0.5)
    assert sep == pytest.approx(1 - 1 / np.sqrt(2))  # only the adjacent pair inside the first document
    assert cohesion_separation([]) == (0.0, 0.0)


def test_bootstrap_ci_and_paired_p():
    import numpy as np

    from rag_core.metrics.stats import bootstrap_ci, bootstrap_p, resample_indices, resample_means

    lo, hi = bootstrap_ci(np.r_[np.ones(50), np.zeros(50)])
    assert lo < 0.5 < hi and hi - lo < 0.3
    assert bootstrap_ci([np.nan, np.nan]) is None  # nothing defined: no interval
    assert bootstrap_ci([0.25] * 7) is None  # no spread: no interval (stats.why_no_estimate)
    rng = np.random.default_rng(1)
    a = rng.uniform(size=100)
    idx = resample_indices(100)
    assert bootstrap_p(resample_means(a, idx) - resample_means(a - 0.2, idx)) < 0.01  # clearly better
    assert bootstrap_p(resample_means(a, idx) - resample_means(a, idx)) == 1.0  # same scores: tied


def test_a_config_whose_generations_failed_is_ranked_last_and_marked_not_tied():
    from rag_core.decision.leaderboard import compare_to_leader, rank_configs

    def summary(key, f1, errors):
        return {
            "config_key": key,
            "token_f1": f1,
            "n_queries": 10.0,
            "n_generation_errors": errors,
            "cost_usd": 0.0,
            "retrieval_p50_ms": 1.0,
            "generation_p50_ms": 1.0,
        }

    # "outage" scores best, but 4 of its 10 answers are failed calls; "weak" failed once (10%: kept).
    rows = [summary("outage", 0.6, 4.0), summary("sound", 0.5, 0.0), summary("weak", 0.2, 1.0)]
    per_query = {
        "outage": pl.DataFrame({"query_id": [str(i) for i in range(10)], "token_f1": [0.0] * 4 + [1.0] * 6}),
        "sound": pl.DataFrame({"query_id": [str(i) for i in range(10)], "token_f1": [0.5] * 10}),
        "weak": pl.DataFrame({"query_id": [str(i) for i in range(10)], "token_f1": [0.2] * 10}),
    }
    weights = {"token_f1": 1.0}
    board = compare_to_leader(rank_configs(pl.DataFrame(rows), weights), per_query, weights)
    assert board["config_key"].to_list() == ["sound", "weak", "outage"]
    assert board["vs_leader"].to_list() == ["leader", "worse", "too many errors"]
    assert board["too_many_errors"].to_list() == [False, False, True]
    assert board["generation_error_share"].to_list() == [0.0, 0.1, 0.4]
    assert not board["tied_with_leader"][2]


def test_cohesion_costs_its_sample_whatever_one_documents_size():
    """One document of 400 chunks of 50,000 characters (a 20 MB file): the cap was checked only between
    documents, so every chunk's every sentence was embedded (over 5 minutes for one evaluation). The
    sentences embedded are now bounded by the sample: chunks, sentences per chunk and characters each."""
    import time

    import numpy as np
    import polars as pl

    from rag_core.evaluation.evaluate import (
        COHESION_SAMPLE,
        SENTENCE_CHARS,
        SENTENCES_PER_CHUNK,
        chunk_cohesion_separation,
    )

    def chunk(c: int) -> str:  # ~50,000 characters of distinct sentences
        return "".join(f"The river floods valley {c}-{i} every spring. " for i in range(1200))

    chunks = pl.DataFrame(
        {"doc_id": ["big"] * 400 + ["next"], "text": [chunk(c) for c in range(400)] + ["One."]}
    )
    embedded = []

    def embed(texts):
        embedded.extend(texts)
        return [np.ones(4) + len(t) % 3 for t in texts]

    t0 = time.perf_counter()
    cohesion, separation = chunk_cohesion_separation(chunks, embed)
    assert time.perf_counter() - t0 < 30
    assert 0.0 < cohesion <= 1.0 and separation >= 0.0
    assert len(embedded) <= COHESION_SAMPLE * SENTENCES_PER_CHUNK
    assert max(map(len, embedded)) <= SENTENCE_CHARS


def test_undefined_metrics_are_explained_by_what_each_needs():
    """The CLI said "(retrieval metrics need queries with gold documents)" for a BEIR set's exact_match and
    token_f1, which are undefined for want of reference answers."""
    assert undefined_reasons(["exact_match", "token_f1"]) == (
        "exact_match, token_f1 need reference answers (answers)"
    )
    assert undefined_reasons(["recall_at_k", "bleu", "ndcg_at_k"]) == (
        "recall_at_k, ndcg_at_k need gold document ids (relevant_doc_ids); bleu needs reference answers (answers)"
    )
    assert "judge" in undefined_reasons(["faithfulness_judge"])
    # every metric a question can leave undefined (no gold documents, no answers, no citations, no verdict)
    qa = pl.DataFrame({"query_id": ["q"], "question": ["?"], "answers": [[]], "relevant_doc_ids": [[]]})
    ret = pl.DataFrame(
        {"query_id": ["q"], "chunk_ids": [["c"]], "doc_ids": [["d"]], "texts": [["t"]], "latency_ms": [1.0]}
    )
    ans = pl.DataFrame({"query_id": ["q"], "answer": ["a reply"], "error": [None], "latency_ms": [1.0]})
    per = evaluate_queries(
        qa,
        ret,
        ans,
        1,
        embed=lambda texts: np.ones((len(texts), 2)),
        chunk_vectors={"c": np.ones(2)},
        judge_scores={},
    )
    undefined = {m for m in per.columns if m not in ("answer", "error") and per[m].null_count()}
    assert undefined == {m for m in scorable_metrics() if needs(m)}
    assert all(needs(m).startswith("gold document ids") for m in RETRIEVAL_METRICS)

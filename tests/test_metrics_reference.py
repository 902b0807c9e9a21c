"""Every retrieval metric recomputed by an independent reference (ranx) on real retrievals of the example
data, equal to 1e-9 per query and on the mean; plus graded nDCG and generation-metric edge cases."""

from __future__ import annotations

import math

import polars as pl
import pytest
from ranx import Qrels, Run, evaluate

from rag_core.metrics import bleu, citation_accuracy, exact_match, rouge_l, token_f1
from rag_core.metrics.retrieval import context_diversity, dedupe, retrieval_scores

RANX = {
    "precision_at_k": "precision@{k}",
    "recall_at_k": "recall@{k}",
    "f1_at_k": "f1@{k}",
    "hit_rate_at_k": "hit_rate@{k}",
    "mrr": "mrr@{k}",
    "ndcg_at_k": "ndcg@{k}",
    "map_at_k": "map@{k}",
    "r_precision": "r-precision",
}


def _as_run(doc_ids: list[str]) -> dict[str, float]:
    # the deduplicated ranking, with strictly decreasing scores so ranx cannot reorder ties
    return {d: 1.0 / i for i, d in enumerate(dedupe(doc_ids), start=1)}


@pytest.mark.slow
def test_retrieval_metrics_equal_ranx_per_query_and_mean(sweep_run):
    plan, done = sweep_run["plan"], sweep_run["run"]
    qa = done.artifact("qa_set")
    checked = 0
    for c in plan.configs:
        k = c.retrieval.top_k
        per_query = done.artifact("evaluations", plan.key_of(c), "per_query").sort("query_id")
        ret = done.artifact("retrievals", plan.key_of(c, "retrievals"))
        runs = {r["query_id"]: _as_run(r["doc_ids"]) for r in ret.iter_rows(named=True)}
        with_gold = qa.filter(pl.col("relevant_doc_ids").list.len() > 0).sort("query_id")
        qids = with_gold["query_id"].to_list()
        qrels = Qrels(
            {r["query_id"]: dict.fromkeys(r["relevant_doc_ids"], 1) for r in with_gold.iter_rows(named=True)}
        )
        # ranx drops queries whose run is empty; give them a dummy non-relevant doc (identical scores)
        run = Run({q: runs[q] or {"__none__": 1.0} for q in qids})
        ours = per_query.filter(pl.col("query_id").is_in(qids)).sort("query_id")
        for metric, name in RANX.items():
            ref = evaluate(qrels, run, name.format(k=k), return_mean=False, make_comparable=True)
            mine = ours[metric].to_list()
            assert len(ref) == len(mine) == len(qids)
            for q, a, b in zip(qids, mine, ref, strict=True):
                assert a == pytest.approx(float(b), abs=1e-9), (plan.key_of(c), metric, q)
            mean_ref = evaluate(qrels, run, name.format(k=k), make_comparable=True)
            assert sum(mine) / len(mine) == pytest.approx(float(mean_ref), abs=1e-9)
            checked += len(qids)
    assert checked == len(plan.configs) * len(RANX) * 20


def test_graded_ndcg_and_map_equal_ranx():
    grades = {"a": 3, "b": 1, "c": 2}
    ranking = ["x", "b", "b", "a", "y", "c"]
    k = 5
    ours = retrieval_scores(ranking, grades, k)
    qrels, run = Qrels({"q": grades}), Run({"q": _as_run(ranking)})
    assert ours["ndcg_at_k"] == pytest.approx(float(evaluate(qrels, run, f"ndcg@{k}")), abs=1e-12)
    assert ours["map_at_k"] == pytest.approx(float(evaluate(qrels, run, f"map@{k}")), abs=1e-12)
    assert ours["r_precision"] == pytest.approx(float(evaluate(qrels, run, "r-precision")), abs=1e-12)
    # by hand: deduped x b a y c; DCG = 1/log2(3) + 3/log2(4) + 2/log2(6); IDCG = 3 + 2/log2(3) + 1/log2(4)
    dcg = 1 / math.log2(3) + 3 / 2 + 2 / math.log2(6)
    assert ours["ndcg_at_k"] == pytest.approx(dcg / (3 + 2 / math.log2(3) + 0.5))


@pytest.mark.parametrize(
    "pred,gold,em,f1",
    [
        ("The Beatles", "Beatles", 1.0, 1.0),  # article dropped
        ("an   Apple, Inc.", "apple inc", 1.0, 1.0),  # punctuation and whitespace
        ("Beyoncé", "beyoncé", 1.0, 1.0),  # unicode kept, case folded
        ("Beyonce", "Beyoncé", 0.0, 0.0),  # SQuAD does not strip accents
        ("", "", 1.0, 1.0),  # both empty
        ("", "x", 0.0, 0.0),
        ("a", "the", 1.0, 1.0),  # both normalize to nothing
        ("the the cat", "cat cat", 0.0, 2 / 3),  # token bags: 1 common; P = 1, R = 1/2
    ],
)
def test_squad_tricky_cases(pred, gold, em, f1):
    assert exact_match(pred, [gold]) == em
    assert token_f1(pred, [gold]) == pytest.approx(f1)


def test_bleu_rouge_citations_diversity():
    assert bleu("", ["x"]) == 0.0
    assert bleu("the cat sat on the mat", ["the cat sat on the mat"]) == pytest.approx(1.0)
    assert rouge_l("the cat sat", ["the cat sat on the mat"]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert citation_accuracy("Paris [1] and Rome [3][9]", ["d1", "d2", "d3"], {"d1"}) == pytest.approx(1 / 3)
    assert citation_accuracy("no markers", ["d1"], {"d1"}) is None
    import numpy as np

    assert context_diversity(np.eye(3)) == pytest.approx(1.0)
    assert context_diversity(np.ones((4, 2))) == pytest.approx(0.0)
    assert context_diversity(np.ones((1, 2))) == 0.0

"""Every retrieval metric recomputed by an independent reference (ranx) on real retrievals of the example
data, equal to 1e-9 per query and on the mean; plus graded nDCG and generation-metric edge cases."""

from __future__ import annotations

import math
import re

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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
        ("", "", 1.0, 0.0),  # both empty: SQuAD v1.1 gives EM 1, F1 0 (no common token)
        ("", "x", 0.0, 0.0),
        ("a", "the", 1.0, 0.0),  # both normalize to nothing
        ("the the cat", "cat cat", 0.0, 2 / 3),  # token bags: 1 common; P = 1, R = 1/2
    ],
)
def test_squad_tricky_cases(pred, gold, em, f1):
    assert exact_match(pred, [gold]) == em
    assert token_f1(pred, [gold]) == pytest.approx(f1)


def _squad_v11_normalize(s: str) -> str:
    """The official SQuAD v1.1 evaluation script's normalize_answer, verbatim in behaviour."""
    import string

    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def _squad_v11_f1(prediction: str, ground_truth: str) -> float:
    from collections import Counter

    prediction_tokens = _squad_v11_normalize(prediction).split()
    ground_truth_tokens = _squad_v11_normalize(ground_truth).split()
    common = Counter(prediction_tokens) & Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def test_em_and_f1_equal_the_squad_v11_script():
    """Brackets, Unicode punctuation and whitespace, hand-picked and fuzzed, against the official
    definition; EM and F1 are equal to it on every pair."""
    import random

    cases = [
        ("insulin [39] and heparin [40]", "insulin [39] and heparin [40]"),
        ("(1) the answer", "answer (1)"),
        ("“quoted” – dash…", '"quoted" - dash...'),
        ("non\u00a0breaking\tspace\n", "non breaking space"),
        ("Ça va? ¿Sí!", "ça va sí"),
        ("The", "an"),
        ("", "x"),
    ]
    rng = random.Random(0)
    alphabet = list("abc the an a [12] ( ) , . - – — … “ ” « » \u00a0\t\n é É ß 7") + ["the ", " an "]
    for _ in range(500):
        cases.append(
            tuple("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(2))
        )
    for pred, gold in cases:
        assert exact_match(pred, [gold]) == float(_squad_v11_normalize(pred) == _squad_v11_normalize(gold))
        assert token_f1(pred, [gold]) == pytest.approx(_squad_v11_f1(pred, gold), abs=1e-12), (pred, gold)


def test_citation_markers_are_removed_from_answer_and_gold_alike():
    from rag_core.metrics import evaluate_queries

    gold = "insulin [39] and low-molecular-weight heparin [40]"
    qa = pl.DataFrame(
        {"query_id": ["q"], "question": ["which drugs?"], "answers": [[gold]], "relevant_doc_ids": [["d1"]]}
    )
    ret = pl.DataFrame(
        {"query_id": ["q"], "chunk_ids": [["c1"]], "doc_ids": [["d1"]], "texts": [["t"]], "latency_ms": [1.0]}
    )
    ans = pl.DataFrame({"query_id": ["q"], "answer": [gold], "error": [None], "latency_ms": [1.0]})
    row = evaluate_queries(qa, ret, ans, top_k=1).row(0, named=True)
    assert row["exact_match"] == 1.0 and row["token_f1"] == 1.0


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


# ---- ROUGE-L against rouge-score itself --------------------------------------------------------------

_WORDS = [
    "the",
    "cat",
    "Cat.",
    "sat",
    "on",
    "a",
    "mat",
    "1990",
    "²",
    "É",
    "naïve",
    "İstanbul",
    "ß",
    "x-y",
    "snake_case",
    "don't",
    "...",
    "北京",
    "大学",
]


class _LanguageTokens:
    """rouge-score's tokenizer interface over a language's answer tokens, as rouge_l reads them."""

    def __init__(self, language):
        self.language = language

    def tokenize(self, text):
        from rag_core.metrics.languages import answer_tokens

        return answer_tokens(text, self.language)


@settings(max_examples=300, deadline=None)
@given(
    answer=st.one_of(st.text(max_size=40), st.lists(st.sampled_from(_WORDS), max_size=12).map(" ".join)),
    golds=st.lists(
        st.one_of(st.text(max_size=40), st.lists(st.sampled_from(_WORDS), max_size=12).map(" ".join)),
        min_size=1,
        max_size=3,
    ),
    language=st.sampled_from([None, "en", "zh", "de"]),
)
def test_rouge_l_equals_rouge_score(answer, golds, language):
    """rouge_l computes rouge-score's `rougeL` F-measure itself (rouge-score imports NLTK, ~2 s a process):
    the same float, with rouge-score's default tokenizer and with a language's tokens."""
    from rouge_score import rouge_scorer

    tokenizer = None if language is None else _LanguageTokens(language)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False, tokenizer=tokenizer)
    expected = max(scorer.score(g, answer)["rougeL"].fmeasure for g in golds)
    assert rouge_l(answer, golds, language) == expected

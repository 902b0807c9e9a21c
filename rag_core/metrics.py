"""Evaluation metrics: pure functions, per query, then aggregated over a polars frame.

Retrieval metrics are at document level: the ranked chunks map to their source documents and several
chunks of one document count once, at the rank of the first. Relevance is binary; k = the config's top_k.
Let D_k be the deduplicated documents of the top-k chunks (|D_k| <= k), R the gold documents.

- precision@k  = |D_k ∩ R| / k
- recall@k     = |D_k ∩ R| / |R|
- f1@k         = 2·P·R / (P + R), 0 when both are 0
- hit_rate@k   = 1 if D_k ∩ R is non-empty else 0
- mrr          = 1 / (rank of the first relevant document in D_k), 0 if none (MRR@k)
- ndcg@k       = DCG / IDCG, DCG = Σ_{i∈D_k relevant} 1/log2(i+1), IDCG = Σ_{i=1..min(|R|,k)} 1/log2(i+1)
A query with no gold documents has no retrieval metrics: it is left out of their means and counted
(`n_queries_without_gold`).

Generation metrics (SQuAD v1.1 normalization: lowercase, no punctuation, no articles, single spaces):
- exact_match  = 1 if the normalized answer equals any normalized gold answer, max over gold answers
- token_f1     = F1 of the normalized token bags of answer and gold, max over gold answers; two empty
                 token lists score 1, one empty scores 0
- faithfulness = share of the answer's normalized tokens that occur in the retrieved context (lexical
                 support); an empty answer scores 0 (nothing it says is supported, and it answers nothing)
A query with no gold answers is left out of exact_match/token_f1 and counted; a failed generation counts
as an empty answer (scores 0) and is counted in `n_generation_errors`.

Latency: p50 and p95 (linear interpolation) of per-query retrieval and generation milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import polars as pl

from rag_core.text import normalize_answer, tokens

RETRIEVAL_METRICS = ("precision_at_k", "recall_at_k", "f1_at_k", "hit_rate_at_k", "mrr", "ndcg_at_k")
GENERATION_METRICS = ("exact_match", "token_f1")
SUPPORT_METRICS = ("faithfulness",)
SCORABLE_METRICS = RETRIEVAL_METRICS + GENERATION_METRICS + SUPPORT_METRICS


def dedupe(doc_ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(doc_ids))


def retrieval_scores(ranked_doc_ids: Sequence[str], relevant: Iterable[str], k: int) -> dict[str, float]:
    """All retrieval metrics of one query; `ranked_doc_ids` are the source docs of the ranked chunks."""
    rel = set(relevant)
    if not rel:
        raise ValueError("retrieval metrics are undefined for a query without gold documents")
    docs = dedupe(ranked_doc_ids[:k])
    hits = [d in rel for d in docs]
    n_hit = sum(hits)
    precision = n_hit / k
    recall = n_hit / len(rel)
    f1 = 2 * precision * recall / (precision + recall) if n_hit else 0.0
    first = next((i for i, h in enumerate(hits, start=1) if h), None)
    dcg = sum(1.0 / math.log2(i + 1) for i, h in enumerate(hits, start=1) if h)
    idcg = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(rel), k) + 1))
    return {
        "precision_at_k": precision,
        "recall_at_k": recall,
        "f1_at_k": f1,
        "hit_rate_at_k": 1.0 if n_hit else 0.0,
        "mrr": 1.0 / first if first else 0.0,
        "ndcg_at_k": dcg / idcg,
    }


def exact_match(answer: str, golds: Sequence[str]) -> float:
    return max(float(normalize_answer(answer) == normalize_answer(g)) for g in golds)


def _f1(pred: list[str], gold: list[str]) -> float:
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


def token_f1(answer: str, golds: Sequence[str]) -> float:
    pred = tokens(answer)
    return max(_f1(pred, tokens(g)) for g in golds)


def faithfulness(answer: str, contexts: Sequence[str]) -> float:
    ans = tokens(answer)
    if not ans:
        return 0.0
    support = set(tokens(" ".join(contexts)))
    return sum(t in support for t in ans) / len(ans)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default); 0.0 for no values."""
    xs = sorted(values)
    if not xs:
        return 0.0
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def evaluate_queries(
    qa: pl.DataFrame, retrievals: pl.DataFrame, answers: pl.DataFrame, top_k: int
) -> pl.DataFrame:
    """One row per query with every metric; columns are null where a metric is undefined for the query.

    qa: query_id, question, answers, relevant_doc_ids; retrievals: query_id, doc_ids, texts, latency_ms;
    answers: query_id, answer, error, latency_ms.
    """
    joined = qa.join(retrievals.rename({"latency_ms": "retrieval_ms"}), on="query_id", how="left").join(
        answers.rename({"latency_ms": "generation_ms"}), on="query_id", how="left"
    )
    rows = []
    for r in joined.iter_rows(named=True):
        doc_ids = r["doc_ids"] or []
        answer = r["answer"] or ""
        row = {"query_id": r["query_id"], "answer": answer, "error": r["error"]}
        if r["relevant_doc_ids"]:
            row.update(retrieval_scores(doc_ids, r["relevant_doc_ids"], top_k))
        else:
            row.update(dict.fromkeys(RETRIEVAL_METRICS))
        golds = r["answers"] or []
        row["exact_match"] = exact_match(answer, golds) if golds else None
        row["token_f1"] = token_f1(answer, golds) if golds else None
        row["faithfulness"] = faithfulness(answer, r["texts"] or [])
        row["retrieval_ms"] = r["retrieval_ms"]
        row["generation_ms"] = r["generation_ms"]
        rows.append(row)
    schema = {"query_id": pl.String, "answer": pl.String, "error": pl.String}
    schema |= {m: pl.Float64 for m in SCORABLE_METRICS} | {
        "retrieval_ms": pl.Float64,
        "generation_ms": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def summarize(per_query: pl.DataFrame) -> dict[str, float]:
    """Means of every metric over the queries where it is defined, plus counts and latency percentiles."""
    out: dict[str, float] = {"n_queries": float(per_query.height)}
    for m in SCORABLE_METRICS:
        col = per_query[m].drop_nulls()
        out[m] = float(col.mean()) if col.len() else 0.0
    out["n_queries_without_gold"] = float(per_query["recall_at_k"].null_count())
    out["n_queries_without_answers"] = float(per_query["token_f1"].null_count())
    out["n_generation_errors"] = float(per_query["error"].drop_nulls().len())
    for stage in ("retrieval", "generation"):
        values = per_query[f"{stage}_ms"].drop_nulls().to_list()
        out[f"{stage}_p50_ms"] = percentile(values, 50)
        out[f"{stage}_p95_ms"] = percentile(values, 95)
    return out


def overall_score(summary: dict[str, float], weights: dict[str, float]) -> float:
    """Weighted mean of the chosen metrics (weights are normalized to sum to 1)."""
    total = sum(weights.values())
    return sum(summary[m] * w for m, w in weights.items()) / total

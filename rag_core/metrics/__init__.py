"""Evaluation metrics: pure per-query functions, evaluated over polars frames and summarized.

Every metric's formula, edge cases and reference implementation are in docs/metrics.md. No metric is NaN:
a metric undefined for a query (no gold documents, no gold answers, no citations) is null in the per-query
frame, left out of its mean and counted in the summary (`n_queries_without_gold`, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import polars as pl

from rag_core.common.registry import PluginError
from rag_core.metrics.generation import (
    bleu,
    citation_accuracy,
    exact_match,
    faithfulness,
    rouge_l,
    strip_citations,
    token_f1,
)
from rag_core.metrics.hops import hop_columns, hop_scores
from rag_core.metrics.registry import (
    METRICS,
    Metric,
    Question,
    needs,
    register,
    scorable_metrics,
)
from rag_core.metrics.retrieval import (
    RETRIEVAL_METRICS,
    context_diversity,
    dedupe,
    retrieval_scores,
)

GENERATION_METRICS = ("exact_match", "token_f1", "bleu", "rouge_l")
EMBEDDING_METRICS = ("semantic_similarity", "answer_relevance", "context_diversity")
for _metric in (  # computed by evaluate_queries with the embedder's vectors
    Metric(
        "semantic_similarity",
        "cosine of the answer's and the closest gold answer's embeddings",
        "embedding",
        needs="reference answers (answers)",
    ),
    Metric("answer_relevance", "cosine of the answer's and the question's embeddings", "embedding"),
    Metric("context_diversity", "1 - mean pairwise cosine of the retrieved chunks' vectors", "embedding"),
):
    register(_metric)


def undefined_reasons(metrics: Sequence[str]) -> str:
    """What the metrics undefined for every config need, per metric, grouped by what they need:
    'recall_at_k needs gold document ids (relevant_doc_ids); exact_match, token_f1 need reference answers
    (answers)'. A BEIR set has gold documents and no answers: its answer metrics are the undefined ones."""
    groups: dict[str, list[str]] = {}
    for m in metrics:
        groups.setdefault(needs(m) or "a value this sweep's evaluation computes", []).append(m)
    return "; ".join(
        f"{', '.join(names)} {'needs' if len(names) == 1 else 'need'} {need}"
        for need, names in groups.items()
    )


__all__ = [
    "METRICS",
    "RETRIEVAL_METRICS",
    "GENERATION_METRICS",
    "needs",
    "scorable_metrics",
    "dedupe",
    "retrieval_scores",
    "exact_match",
    "token_f1",
    "faithfulness",
    "bleu",
    "rouge_l",
    "citation_accuracy",
    "context_diversity",
    "percentile",
    "evaluate_queries",
    "summarize",
    "overall_score",
    "undefined_reasons",
]

Embed = Callable[[list[str]], np.ndarray]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default); 0.0 for no values."""
    xs = sorted(values)
    if not xs:
        return 0.0
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))


def embedded_texts(qa: pl.DataFrame, answers: pl.DataFrame) -> list[str]:
    """The texts `evaluate_queries` embeds (semantic_similarity, answer_relevance), unique, in the QA set's
    order: each question's answers (several where it was sampled), the question and its gold answers,
    citation markers stripped. A batch of evaluations embeds them for all its configs at once."""
    joined = qa.select("query_id", "question", "answers").join(
        answers.select("query_id", "answer"), on="query_id", how="left", maintain_order="left"
    )
    texts = [
        t
        for r in joined.iter_rows(named=True)
        for t in (
            strip_citations(r["answer"] or ""),
            r["question"],
            *map(strip_citations, r["answers"] or []),
        )
        if t.strip()
    ]
    return list(dict.fromkeys(texts))


def evaluate_queries(
    qa: pl.DataFrame,
    retrievals: pl.DataFrame,
    answers: pl.DataFrame,
    top_k: int,
    embed: Embed | None = None,
    chunk_vectors: dict[str, np.ndarray] | None = None,
    judge_scores: dict[str, float | None] | None = None,
    max_hops: int = 1,
    language: str | None = None,
) -> pl.DataFrame:
    """One row per query with every metric (null where undefined for that query).

    qa: query_id, question, answers, relevant_doc_ids[, relevant_doc_grades]; retrievals: query_id,
    chunk_ids, doc_ids, texts, latency_ms; answers: query_id, answer, error, latency_ms.
    `embed` (normalized vectors of texts) enables semantic_similarity and answer_relevance;
    `chunk_vectors` (chunk_id -> vector) enables context_diversity; `judge_scores` adds faithfulness_judge;
    `max_hops` > 1 (an iterative retrieval: `hop_doc_ids` in the retrievals) adds its hop-by-hop scores
    (rag_core/metrics/hops.py) and the hops each question made. A question's language (the QA set's
    `language` column, else `language`) picks its answer normalization (rag_core/metrics/languages.py).
    """
    joined = qa.join(retrievals.rename({"latency_ms": "retrieval_ms"}), on="query_id", how="left").join(
        answers.rename({"latency_ms": "generation_ms"}), on="query_id", how="left"
    )
    records = list(joined.iter_rows(named=True))
    qa_columns = set(qa.columns)
    scored = [m for m in map(METRICS.get, scorable_metrics()) if m.score is not None]
    vec: dict[str, np.ndarray] = {}
    if embed is not None:
        unique = embedded_texts(qa, answers)
        vec = dict(zip(unique, embed(unique), strict=True)) if unique else {}
    rows = []
    for r in records:
        doc_ids, raw = r["doc_ids"] or [], r["answer"] or ""
        # [n] markers are scored by citation_accuracy, not as answer words; gold answers copied from papers
        # carry bibliographic markers too, so both sides lose them the same way
        answer = strip_citations(raw)
        golds = [strip_citations(g) for g in r["answers"] or []]
        row = {"query_id": r["query_id"], "answer": raw, "error": r["error"]}
        relevant = r["relevant_doc_ids"] or []
        if relevant:
            grades = r.get("relevant_doc_grades")
            gold = dict(zip(relevant, grades, strict=True)) if grades else set(relevant)
            row.update(retrieval_scores(doc_ids, gold, top_k))
        else:
            row.update(dict.fromkeys(RETRIEVAL_METRICS))
        # what the generator saw (after context synthesis) when the answers record it
        seen_texts = r["context_texts"] if r.get("context_texts") is not None else (r["texts"] or [])
        seen_docs = r["context_doc_ids"] if r.get("context_doc_ids") is not None else doc_ids
        q = Question(
            query_id=r["query_id"],
            question=r["question"],
            answer=answer,
            raw_answer=raw,
            gold_answers=golds,
            doc_ids=list(doc_ids),
            relevant_doc_ids=set(relevant),
            context_texts=list(seen_texts),
            context_doc_ids=list(seen_docs),
            top_k=top_k,
            language=(r.get("language") or language or None),
            extra={k: v for k, v in r.items() if k in qa_columns},
        )
        for metric in scored:
            row[metric.name] = metric.checked(_score(metric, q), q.query_id)
        if embed is not None:
            a = vec.get(answer) if answer.strip() else None
            row["semantic_similarity"] = (
                (max(_cos(a, vec[g]) for g in golds if g.strip()) if a is not None else 0.0)
                if any(g.strip() for g in golds)
                else None
            )
            row["answer_relevance"] = _cos(a, vec[r["question"]]) if a is not None else 0.0
        if chunk_vectors is not None:
            row["context_diversity"] = context_diversity([chunk_vectors[c] for c in (r["chunk_ids"] or [])])
        if judge_scores is not None:
            row["faithfulness_judge"] = judge_scores.get(r["query_id"])
        if max_hops > 1:
            row.update(hop_scores(r["hop_doc_ids"] or [], set(relevant), max_hops))
            row["hops"] = float(r["hops"])
        row["retrieval_ms"] = r["retrieval_ms"]
        row["generation_ms"] = r["generation_ms"]
        rows.append(row)
    schema = {"query_id": pl.String, "answer": pl.String, "error": pl.String}
    metric_cols = [m for m in scorable_metrics() if rows and m in rows[0]]
    schema |= {m: pl.Float64 for m in metric_cols}
    if max_hops > 1:
        schema |= {m: pl.Float64 for m in [*hop_columns(max_hops), "hops"]}
    schema |= {"retrieval_ms": pl.Float64, "generation_ms": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def _score(metric: Metric, q: Question) -> float | None:
    try:
        return metric.score(q)
    except Exception as e:  # a plug-in's own failure: one error naming it and the question
        where = METRICS.origin(metric.name)
        raise PluginError(
            f"metric {metric.name!r} ({where}) failed on question {q.query_id!r}: {type(e).__name__}: {e}"
        ) from e


def metric_columns(per_query: pl.DataFrame) -> list[str]:
    return [m for m in scorable_metrics() if m in per_query.columns]


def summarize(per_query: pl.DataFrame) -> dict[str, float | None]:
    """Means of every metric over the queries where it is defined, plus counts and latency percentiles. A
    metric defined for no query (retrieval metrics without any gold documents) is None: undefined, not 0."""
    out: dict[str, float | None] = {"n_queries": float(per_query.height)}
    for m in metric_columns(per_query):
        col = per_query[m].drop_nulls()
        out[m] = float(col.mean()) if col.len() else None
    out["n_queries_without_gold"] = float(per_query["recall_at_k"].null_count())
    out["n_queries_without_answers"] = float(per_query["token_f1"].null_count())
    out["n_answers_without_citations"] = float(per_query["citation_accuracy"].null_count())
    if "faithfulness_judge" in per_query.columns:
        out["n_judge_failures"] = float(per_query["faithfulness_judge"].null_count())
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

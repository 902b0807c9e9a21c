"""Retrieval metrics at document level (pure functions; definitions in docs/metrics.md).

The ranked chunks map to their source documents; several chunks of one document count once, at the rank of
the first. D = the deduplicated documents of the top-k chunks (|D| <= k), R = the gold documents with grades
g(d) > 0 (1 for binary relevance), rel_i = 1 if the i-th document of D is in R.

- precision@k  = Σ rel_i / k                      recall@k = Σ rel_i / |R|
- f1@k         = 2PR / (P + R), 0 when P + R = 0   hit_rate@k = 1 if Σ rel_i > 0
- mrr@k        = 1 / (first i with rel_i), 0 if none
- ndcg@k       = DCG / IDCG, DCG = Σ_i g(d_i) / log2(i + 1) (linear gain, Järvelin & Kekäläinen),
                 IDCG = the DCG of the k best grades
- map@k        = (1 / |R|) Σ_i rel_i · precision@i      (trec_eval's map_cut / ranx map@k)
- r_precision  = Σ_{i <= |R|} rel_i / |R|              (precision at rank |R| of D)
These equal ranx's precision@k, recall@k, f1@k, hit_rate@k, mrr@k, ndcg@k, map@k and r-precision when D
is given to ranx as the run (tests/test_metrics_reference.py checks every query to 1e-9).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from rag_core.metrics.registry import Metric, register

RETRIEVAL_METRICS = (
    "precision_at_k",
    "recall_at_k",
    "f1_at_k",
    "hit_rate_at_k",
    "mrr",
    "ndcg_at_k",
    "map_at_k",
    "r_precision",
)
_DESCRIPTIONS = {
    "precision_at_k": "gold documents among the top-k documents, over k",
    "recall_at_k": "gold documents found in the top k, over all gold documents",
    "f1_at_k": "harmonic mean of precision@k and recall@k",
    "hit_rate_at_k": "1 when any gold document is in the top k",
    "mrr": "1 / rank of the first gold document",
    "ndcg_at_k": "graded DCG over the ideal DCG (linear gain)",
    "map_at_k": "mean of precision at each gold document's rank (trec_eval map_cut)",
    "r_precision": "precision at rank |gold|",
}
_LABELS = {"recall_at_k": "recall@k", "ndcg_at_k": "nDCG@k"}
for _name in RETRIEVAL_METRICS:  # computed together, by retrieval_scores (evaluate_queries)
    register(
        Metric(
            _name,
            _DESCRIPTIONS[_name],
            "retrieval",
            label=_LABELS.get(_name, ""),
            needs="gold document ids (relevant_doc_ids)",
        )
    )


def dedupe(doc_ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(doc_ids))


def retrieval_scores(
    ranked_doc_ids: Sequence[str], relevant: Iterable[str] | Mapping[str, float], k: int
) -> dict[str, float]:
    """All retrieval metrics of one query. `relevant` is a set of gold doc ids or a mapping doc -> grade."""
    grades = dict(relevant) if isinstance(relevant, Mapping) else dict.fromkeys(relevant, 1.0)
    grades = {d: float(g) for d, g in grades.items() if g > 0}
    if not grades:
        raise ValueError("retrieval metrics are undefined for a query without gold documents")
    docs = dedupe(ranked_doc_ids)[:k]
    hits = [d in grades for d in docs]
    n_rel, n_hit = len(grades), sum(hits)
    precision, recall = n_hit / k, n_hit / n_rel
    f1 = 2 * precision * recall / (precision + recall) if n_hit else 0.0
    first = next((i for i, h in enumerate(hits, start=1) if h), None)
    dcg = sum(grades.get(d, 0.0) / math.log2(i + 1) for i, d in enumerate(docs, start=1))
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    ap, seen = 0.0, 0
    for i, h in enumerate(hits, start=1):
        if h:
            seen += 1
            ap += seen / i
    return {
        "precision_at_k": precision,
        "recall_at_k": recall,
        "f1_at_k": f1,
        "hit_rate_at_k": 1.0 if n_hit else 0.0,
        "mrr": 1.0 / first if first else 0.0,
        "ndcg_at_k": dcg / idcg,
        "map_at_k": ap / n_rel,
        "r_precision": sum(hits[:n_rel]) / n_rel,
    }


def context_diversity(vectors: np.ndarray) -> float:
    """1 − mean pairwise cosine similarity of the retrieved chunks' (normalized) vectors; 0.0 for fewer
    than two chunks (no pair to be diverse)."""
    n = len(vectors)
    if n < 2:
        return 0.0
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sims = v @ v.T
    mean = (sims.sum() - np.trace(sims)) / (n * (n - 1))
    return float(1.0 - mean)

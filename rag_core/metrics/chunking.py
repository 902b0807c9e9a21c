"""Chunking metrics of a chunkset (pure functions; definitions in docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_core.common.text import normalize_answer


def truncated_share(token_counts: Sequence[int], max_tokens: int | None) -> float:
    """Share of chunks longer than the embedder reads (the rest of such a chunk is cut before embedding,
    so its vector does not see it); 0.0 when the limit is unknown or there are no chunks."""
    if not max_tokens or not len(token_counts):
        return 0.0
    return float(np.mean(np.asarray(token_counts) > max_tokens))


def length_stats(token_counts: Sequence[int], max_tokens: int | None = None) -> dict[str, float]:
    """Mean, population std, min and max of chunk lengths in tokens of the embedder's tokenizer, and the
    share of chunks the embedder truncates."""
    x = np.asarray(token_counts, dtype=np.float64)
    if x.size == 0:
        return {
            "chunk_tokens_mean": 0.0,
            "chunk_tokens_std": 0.0,
            "chunk_tokens_min": 0.0,
            "chunk_tokens_max": 0.0,
            "chunk_truncated_share": 0.0,
        }
    return {
        "chunk_tokens_mean": float(x.mean()),
        "chunk_tokens_std": float(x.std()),
        "chunk_tokens_min": float(x.min()),
        "chunk_tokens_max": float(x.max()),
        "chunk_truncated_share": truncated_share(token_counts, max_tokens),
    }


def answer_coverage(chunk_texts: Sequence[str], gold_answers: Sequence[Sequence[str]]) -> float:
    """Share of gold answers (over all queries) contained whole, after SQuAD normalization, in at least
    one chunk; 0.0 when there are no gold answers. An answer split across a chunk boundary is not covered."""
    answers = [normalize_answer(a) for golds in gold_answers for a in golds]
    answers = [a for a in answers if a]
    if not answers:
        return 0.0
    haystack = [f" {normalize_answer(t)} " for t in chunk_texts]
    return sum(any(f" {a} " in h for h in haystack) for a in answers) / len(answers)


def cohesion_separation(sentence_vectors: Sequence[np.ndarray]) -> tuple[float, float]:
    """Per chunkset: cohesion = mean over chunks with >= 2 sentences of the mean pairwise cosine of the
    chunk's sentence vectors; separation = mean over adjacent chunk pairs (same document, in order) of
    1 − cosine of their mean sentence vectors. `sentence_vectors` holds one (n_sentences, dim) array per
    chunk, in document order, with None between documents. Undefined parts give 0.0."""
    cohesions, separations = [], []
    prev = None
    for block in sentence_vectors:
        if block is None:
            prev = None
            continue
        v = np.asarray(block, dtype=np.float64)
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        n = len(v)
        if n >= 2:
            s = v @ v.T
            cohesions.append((s.sum() - np.trace(s)) / (n * (n - 1)))
        centroid = v.mean(axis=0)
        centroid /= max(np.linalg.norm(centroid), 1e-12)
        if prev is not None:
            separations.append(1.0 - float(centroid @ prev))
        prev = centroid
    return (
        float(np.mean(cohesions)) if cohesions else 0.0,
        float(np.mean(separations)) if separations else 0.0,
    )

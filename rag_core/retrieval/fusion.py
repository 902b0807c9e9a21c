"""Fusion of a vector ranking and a keyword ranking into one hybrid ranking (pure functions).

Both follow Weaviate's convention for `alpha`: 1.0 is pure vector, 0.0 pure keyword.
- rrf:      score(d) = alpha / (k0 + rank_vector(d)) + (1 - alpha) / (k0 + rank_keyword(d)), ranks 1-based,
            a term is 0 when d is absent from that list; k0 = 60 (Cormack et al., 2009).
- weighted: each list's scores are min-max normalized to [0, 1] (all-equal scores become 1.0), then
            score(d) = alpha * vector(d) + (1 - alpha) * keyword(d), absent = 0 (Weaviate's relativeScoreFusion).
Ties break by id so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

Ranked = Sequence[tuple[str, float]]  # (id, score), best first

RRF_K = 60


def rrf(vector: Ranked, keyword: Ranked, alpha: float = 0.5, k0: int = RRF_K) -> list[tuple[str, float]]:
    scores: dict[str, float] = {}
    for weight, ranking in ((alpha, vector), (1.0 - alpha, keyword)):
        for rank, (doc, _) in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + weight / (k0 + rank)
    return _sorted(scores)


def rrf_many(rankings: Sequence[Ranked], k0: int = RRF_K) -> list[tuple[str, float]]:
    """Unweighted RRF of any number of rankings (multi-query retrieval): score(d) = Σ 1 / (k0 + rank)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, (doc, _) in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k0 + rank)
    return _sorted(scores)


def min_max(ranking: Ranked) -> dict[str, float]:
    if not ranking:
        return {}
    values = [s for _, s in ranking]
    lo, hi = min(values), max(values)
    if hi == lo:
        return {doc: 1.0 for doc, _ in ranking}
    return {doc: (s - lo) / (hi - lo) for doc, s in ranking}


def weighted(vector: Ranked, keyword: Ranked, alpha: float = 0.5) -> list[tuple[str, float]]:
    scores: dict[str, float] = {}
    for weight, ranking in ((alpha, vector), (1.0 - alpha, keyword)):
        for doc, s in min_max(ranking).items():
            scores[doc] = scores.get(doc, 0.0) + weight * s
    return _sorted(scores)


def fuse(method: str, vector: Ranked, keyword: Ranked, alpha: float, top_k: int) -> list[tuple[str, float]]:
    if method == "rrf":
        fused = rrf(vector, keyword, alpha)
    elif method == "weighted":
        fused = weighted(vector, keyword, alpha)
    else:
        raise ValueError(f"unknown fusion {method!r}")
    return fused[:top_k]


def _sorted(scores: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))

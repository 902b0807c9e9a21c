"""Reranking of retrieved candidates (pure functions; the model calls live in the assets/resources).

- mmr: Maximal Marginal Relevance (Carbonell & Goldstein, 1998): greedily pick the candidate maximizing
  lambda · sim(query, d) − (1 − lambda) · max_{s in selected} sim(d, s), cosine similarities.
- llm: the model returns an ordering of candidate numbers; `parse_ordering` reads it robustly.
- cross_encoder: scores (query, text) pairs with a sentence-transformers CrossEncoder the user supplies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np


def mmr(query: np.ndarray, candidates: np.ndarray, k: int, lam: float = 0.5) -> list[int]:
    """Indices of the k candidates chosen by MMR, in pick order."""
    n = len(candidates)
    if n == 0:
        return []
    c = candidates / np.maximum(np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
    q = query / max(np.linalg.norm(query), 1e-12)
    relevance = c @ q
    sims = c @ c.T
    chosen: list[int] = []
    redundancy = np.full(n, -np.inf)
    for _ in range(min(k, n)):
        penalty = np.where(np.isinf(redundancy), 0.0, redundancy)
        score = lam * relevance - (1 - lam) * penalty
        score[chosen] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        redundancy = np.maximum(redundancy, sims[best])
    return chosen


LLM_RERANK_PROMPT = """Rank the passages by how useful they are to answer the question.
Reply with the passage numbers, most useful first, separated by commas (for example: 3, 1, 2).

QUESTION: {query}

{passages}

RANKING:"""


def llm_rerank_prompt(query: str, texts: Sequence[str]) -> str:
    passages = "\n\n".join(f"[{i}] {t}" for i, t in enumerate(texts, start=1))
    return LLM_RERANK_PROMPT.format(query=query, passages=passages)


def parse_ordering(reply: str, n: int) -> list[int] | None:
    """0-based candidate order from a reply like "3, 1, [2]" or "Passage 3 > Passage 1". Numbers outside
    1..n and repeats are ignored; candidates the reply does not list keep their original order after the
    listed ones. None when the reply lists no valid candidate (the caller falls back and counts it)."""
    listed: list[int] = []
    for m in re.findall(r"\d+", reply or ""):
        i = int(m) - 1
        if 0 <= i < n and i not in listed:
            listed.append(i)
    if not listed:
        return None
    return listed + [i for i in range(n) if i not in listed]

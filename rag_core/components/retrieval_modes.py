"""The retrieval modes a sweep can name (`retrieval.mode`), by name.

The built-ins are searches every store runs itself: `vector` (cosine over the embeddings), `bm25` (its
keyword index) and `hybrid` (both, fused by `fusion` with `hybrid_alpha`). A plug-in registers under the
entry-point group `rag_sweep.retrievers`: a function `search(searcher, query, vector, k) -> [Hit, ...]`
composing the store's own searches (`searcher.vector(vector, k)`, `.keyword(query, k)`, `.hybrid(query,
vector, k, alpha, fusion)`, each under the config's filter), or a `RetrievalMode` that also says whether it
reads the question's vector. Its hits are ranked by the one tie rule (score, then doc id, then chunk id).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rag_core.common.registry import Registry, function_or


@dataclass(frozen=True)
class RetrievalMode:
    name: str
    description: str
    search: Callable | None = None  # a plug-in's (searcher, query, vector, k) -> hits; None: the store's own
    reads_vector: bool = True  # the question is embedded for it
    reads_keywords: bool = True  # it searches the keyword index (text without spaces between words: warned)


RETRIEVAL_MODES = Registry(
    "retrieval mode",
    "rag_sweep.retrievers",
    modules=("rag_core.components.retrieval_modes",),
    adapt=function_or(RetrievalMode, "search", "search(searcher, query, vector, k)"),
)
RETRIEVAL_MODES.register(
    "vector", RetrievalMode("vector", "cosine similarity over the embeddings", reads_keywords=False)
)
RETRIEVAL_MODES.register(
    "bm25", RetrievalMode("bm25", "the store's BM25 keyword index (index.bm25_analyzer)", reads_vector=False)
)
RETRIEVAL_MODES.register(
    "hybrid",
    RetrievalMode("hybrid", "vector and BM25 fused (fusion: rrf or weighted, hybrid_alpha: 1 = vector only)"),
)


def retrieval_mode(name: str) -> RetrievalMode:
    return RETRIEVAL_MODES.get(name)

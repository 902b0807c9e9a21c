"""The vector-store interface every backend implements.

Shaped after Weaviate's v4 client: a collection per index partition, objects carrying precomputed
vectors, `near_vector`, `bm25` and `hybrid(alpha)` queries. Rows are dicts with `chunk_id`, `doc_id`,
`text` (the indexed text) and `metadata` (a JSON string).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from rag_core.fusion import fuse


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    doc_id: str
    text: str
    score: float


class VectorStore(abc.ABC):
    """One collection per index partition. Implementations are Dagster ConfigurableResources."""

    backend: str  # a short name; part of the fingerprint of every artifact built on the store

    @abc.abstractmethod
    def upsert(self, collection: str, rows: list[dict], vectors: np.ndarray) -> int:
        """Create the collection if needed and insert/replace rows with their vectors; return the count."""

    @abc.abstractmethod
    def vector_search(self, collection: str, vector: np.ndarray, k: int) -> list[Hit]:
        """Top-k by cosine similarity (score = cosine, higher is better)."""

    @abc.abstractmethod
    def keyword_search(self, collection: str, query: str, k: int) -> list[Hit]:
        """Top-k by BM25 over the indexed text."""

    def hybrid_search(
        self, collection: str, query: str, vector: np.ndarray, k: int, alpha: float, fusion: str
    ) -> list[Hit]:
        """Fuse vector and keyword rankings (alpha = 1 is pure vector). Backends with native hybrid
        search override this; the default fuses candidate lists of 4k from each side."""
        pool = max(4 * k, 20)
        vec, kw = self.vector_search(collection, vector, pool), self.keyword_search(collection, query, pool)
        by_id = {h.chunk_id: h for h in kw + vec}
        fused = fuse(
            fusion, [(h.chunk_id, h.score) for h in vec], [(h.chunk_id, h.score) for h in kw], alpha, k
        )
        return [Hit(cid, by_id[cid].doc_id, by_id[cid].text, score) for cid, score in fused]

    def retrieve(
        self,
        collection: str,
        mode: str,
        query: str,
        vector: np.ndarray | None,
        k: int,
        alpha: float,
        fusion: str,
    ) -> list[Hit]:
        """Dispatch one retrieval mode: vector, bm25 or hybrid."""
        if mode == "vector":
            return self.vector_search(collection, vector, k)
        if mode == "bm25":
            return self.keyword_search(collection, query, k)
        if mode == "hybrid":
            return self.hybrid_search(collection, query, vector, k, alpha, fusion)
        raise ValueError(f"unknown retrieval mode {mode!r}")

    @abc.abstractmethod
    def delete(self, collection: str) -> None:
        """Drop the collection; a missing one is not an error."""

    @abc.abstractmethod
    def info(self, collection: str) -> dict:
        """{'exists': bool, 'count': int, ...} for metadata and checks."""

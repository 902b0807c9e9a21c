"""Qdrant in local (embedded) mode: `QdrantClient(path=...)`, no server.

- Each build is its own storage folder (local mode locks a folder to one client); the collection name is
  an alias (embedded.AliasDirectory) moved to the finished build.
- Points carry a dense `dense` vector (cosine) and a sparse `bm25` vector: BM25 term weights computed here
  (rag_core/retrieval/bm25.py) with Qdrant applying the idf (`Modifier.IDF`), which makes keyword search BM25;
  of the text, or of a segmenting analyzer's (chinese, japanese, thai) `keywords`, split at spaces only.
- Payload: chunk_id, doc_id, text, metadata (JSON) and the filterable metadata fields; filters become
  `Filter(must=[FieldCondition(...)])` with MatchValue, MatchAny and Range.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

import numpy as np

from rag_core.retrieval import bm25
from rag_core.retrieval.keywords import FIELD, segments
from resources.vector_stores.base import Conditions, Hit
from resources.vector_stores.embedded import ClientCache, SingleClientStore

NAME = "chunks"  # the collection inside each build's folder


def _locked(e: Exception) -> bool:
    return "already accessed by another instance" in str(e)


CLIENTS = ClientCache("Qdrant", _locked)


def _open(path: str):
    from qdrant_client import QdrantClient

    return QdrantClient(path=path)


def qdrant_filter(where: Conditions):
    if not where:
        return None
    from qdrant_client import models

    must = []
    for c in where:
        if c.op == "$eq":
            must.append(models.FieldCondition(key=c.field, match=models.MatchValue(value=c.value)))
        elif c.op == "$in":
            must.append(models.FieldCondition(key=c.field, match=models.MatchAny(any=list(c.value))))
        else:
            bound = {"$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}[c.op]
            must.append(models.FieldCondition(key=c.field, range=models.Range(**{bound: c.value})))
    return models.Filter(must=must)


class QdrantStore(SingleClientStore):
    """Qdrant's local mode, embedded; BM25 term weights computed here (no stemmer)"""

    backend: ClassVar[str] = "qdrant"
    CLIENTS: ClassVar[ClientCache] = CLIENTS
    open_client: ClassVar = staticmethod(_open)
    batch_size: int = 256

    def _build(
        self, physical: str, rows: list[dict], vectors, fields: dict, values: list[dict], analyzer: str
    ) -> None:
        from qdrant_client import models

        client = self._client(physical)
        client.create_collection(
            NAME,
            vectors_config={
                "dense": models.VectorParams(size=int(vectors.shape[1]), distance=models.Distance.COSINE)
            },
            sparse_vectors_config={"bm25": models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        segmented = segments(analyzer)
        doc_weights = bm25.document_weights([r[FIELD if segmented else "text"] for r in rows], segmented)
        points = []
        for row, vec, attrs, terms in zip(rows, vectors, values, doc_weights, strict=True):
            weights = {bm25.term_id(t): w for t, w in terms.items()}
            points.append(
                models.PointStruct(
                    id=str(uuid.uuid5(uuid.NAMESPACE_URL, row["chunk_id"])),
                    vector={
                        "dense": np.asarray(vec, np.float32).tolist(),
                        "bm25": models.SparseVector(indices=list(weights), values=list(weights.values())),
                    },
                    payload={
                        **attrs,
                        "chunk_id": row["chunk_id"],
                        "text": row["text"],
                        "metadata": row.get("metadata", "{}"),
                    },
                )
            )
        for i in range(0, len(points), self.batch_size):
            client.upsert(NAME, points=points[i : i + self.batch_size])

    def _count(self, physical: str) -> int:
        return self._client(physical).count(NAME, exact=True).count

    def _query(self, collection: str, k: int, where: Conditions, **query) -> list[Hit]:
        def run(physical):
            res = self._client(physical).query_points(
                NAME, limit=k, query_filter=qdrant_filter(where), with_payload=True, **query
            )
            return [
                Hit(p.payload["chunk_id"], p.payload["doc_id"], p.payload["text"], p.score)
                for p in res.points
            ]

        return self._read(collection, run)

    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        return self._query(collection, k, where, query=np.asarray(vector, np.float32).tolist(), using="dense")

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        from qdrant_client import models

        segmented = self._segmentation(collection) is not None
        ids = sorted({bm25.term_id(t) for t in bm25.tokenize(query, segmented)})
        if not ids:
            return []
        sparse = models.SparseVector(indices=ids, values=[1.0] * len(ids))
        return [h for h in self._query(collection, k, where, query=sparse, using="bm25") if h.score > 0]

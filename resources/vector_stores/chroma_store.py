"""Chroma with its embedded persistent client (`chromadb.PersistentClient`), no server.

- Each build is its own persistent folder; the collection name is an alias (embedded.AliasDirectory)
  moved to the finished build. Vectors are self-provided (no embedding function), HNSW with cosine space.
- Chroma's embedded client has no keyword index (sparse/BM25 indexes are Chroma Cloud only), so keyword
  search ranks the build's texts with rag_core.retrieval.bm25 in process (filters there with rag_core.data.filters'
  `matches`); the texts are read once per build and process. A segmenting analyzer's (chinese, japanese,
  thai) build keeps each row's segmented text in its metadata (`keywords`), which that BM25 ranks, split at
  spaces only; the documents stay the chunks' own texts.
- Filters map onto Chroma's own `where` (the same operator names); ranges are split into `$and`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import ClassVar

import dagster as dg
import numpy as np

from rag_core.data.filters import matches
from rag_core.retrieval import bm25
from rag_core.retrieval.keywords import FIELD, segments
from resources.vector_stores.base import Conditions, Hit, brute_force
from resources.vector_stores.embedded import EmbeddedStore

NAME = "chunks"
# build folder -> (ids, metadatas, texts, index) of the build, read once per process
_BM25: dict[str, tuple[list[str], list[dict], list[str], bm25.BM25Index]] = {}
_BM25_LOCK = threading.Lock()


def chroma_where(where: Conditions) -> dict | None:
    parts = [{c.field: {c.op: list(c.value) if c.op == "$in" else c.value}} for c in where]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


class ChromaStore(dg.ConfigurableResource, EmbeddedStore):
    """Chroma, embedded; an in-process BM25 (no stemmer)"""

    backend: ClassVar[str] = "chroma"
    path: str
    batch_size: int = 1000

    @property
    def _root(self) -> str:
        return self.path

    def _collection(self, physical: str, create: bool = False, ann=None):
        import chromadb

        client = chromadb.PersistentClient(
            path=str(Path(self.path) / physical), settings=chromadb.Settings(anonymized_telemetry=False)
        )
        if create:
            hnsw = {"space": "cosine"}  # exact: Chroma's HNSW at its own defaults, as always
            if ann is not None:
                s = ann.settings()
                hnsw |= {
                    "max_neighbors": s["m"],
                    "ef_construction": s["ef_construction"],
                    "ef_search": s["ef"],
                }
            return client.create_collection(NAME, embedding_function=None, configuration={"hnsw": hnsw})
        return client.get_collection(NAME, embedding_function=None)

    def _build(
        self,
        physical: str,
        rows: list[dict],
        vectors,
        fields: dict,
        values: list[dict],
        analyzer: str,
        ann=None,
    ) -> None:
        coll = self._collection(physical, create=True, ann=ann)
        metas = [
            {**attrs, "chunk_id": r["chunk_id"], "metadata": r.get("metadata", "{}")}
            for r, attrs in zip(rows, values, strict=True)
        ]
        if segments(analyzer):
            metas = [{**m, FIELD: r[FIELD]} for m, r in zip(metas, rows, strict=True)]
        vecs = np.asarray(vectors, np.float32)
        for i in range(0, len(rows), self.batch_size):
            part = slice(i, i + self.batch_size)
            coll.add(
                ids=[r["chunk_id"] for r in rows[part]],
                embeddings=vecs[part],
                documents=[r["text"] for r in rows[part]],
                metadatas=metas[part],
            )

    def _count(self, physical: str) -> int:
        return self._collection(physical).count()

    def _build_folder(self, physical: str) -> Path | None:
        return Path(self.path) / physical

    def _drop(self, physical: str) -> None:
        import shutil

        folder = Path(self.path) / physical
        with _BM25_LOCK:
            _BM25.pop(str(folder), None)
        shutil.rmtree(folder, ignore_errors=True)

    def _exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions
    ) -> list[Hit]:
        def run(physical):
            got = self._collection(physical).get(
                where=chroma_where(where), include=["embeddings", "documents", "metadatas"]
            )
            rows = [
                {"chunk_id": cid, "doc_id": meta["doc_id"], "text": doc}
                for cid, meta, doc in zip(got["ids"], got["metadatas"], got["documents"], strict=True)
            ]
            return brute_force(rows, np.asarray(got["embeddings"]), vector, k)

        return self._read(collection, run)

    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        def run(physical):
            res = self._collection(physical).query(
                query_embeddings=np.asarray(vector, np.float32)[None, :],
                n_results=k,
                where=chroma_where(where),
                include=["documents", "metadatas", "distances"],
            )
            return [
                Hit(cid, meta["doc_id"], doc, 1.0 - float(dist))
                for cid, meta, doc, dist in zip(
                    res["ids"][0], res["metadatas"][0], res["documents"][0], res["distances"][0], strict=True
                )
            ]

        return self._read(collection, run)

    def _keyword_index(self, physical: str, segmented: bool):
        folder = str(Path(self.path) / physical)
        with _BM25_LOCK:
            if folder not in _BM25:
                got = self._collection(physical).get(include=["documents", "metadatas"])
                docs, metas = got["documents"], got["metadatas"]
                indexed = [m[FIELD] for m in metas] if segmented else docs
                _BM25[folder] = (got["ids"], metas, docs, bm25.BM25Index(indexed, segmented))
            return _BM25[folder]

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        segmented = self._segmentation(collection) is not None

        def run(physical):
            ids, metas, docs, index = self._keyword_index(physical, segmented)
            # idf stays over the whole build; the filter (applied to the metadata read with the texts)
            # only restricts which texts rank
            allowed = {i for i, m in enumerate(metas) if matches(where, m)} if where else None
            return [Hit(ids[i], metas[i]["doc_id"], docs[i], s) for i, s in index.search(query, k, allowed)]

        return self._read(collection, run)

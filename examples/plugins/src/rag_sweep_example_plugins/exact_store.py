"""A vector store plug-in: exact (brute-force) cosine search over one Parquet file per build.

No index, no approximation: each query compares the question with every chunk, which is what a small corpus
costs little and what an approximate store is measured against. Keyword search is rag-sweep's in-process
BM25. The builds, their aliases and atomic publishing are rag-sweep's EmbeddedStore; this file writes, counts,
drops and reads one build.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import dagster as dg
import numpy as np
import polars as pl

from rag_sweep.plugins import BM25Index, Conditions, EmbeddedStore, Hit, matches

FILE = "chunks.parquet"


@dataclass(frozen=True)
class Build:
    chunk_ids: list[str]
    doc_ids: list[str]
    texts: list[str]
    attributes: list[dict]
    vectors: np.ndarray  # unit length, one row per chunk
    keywords: BM25Index

    def hit(self, i: int, score: float) -> Hit:
        return Hit(self.chunk_ids[i], self.doc_ids[i], self.texts[i], float(score))

    def allowed(self, where: Conditions) -> set[int] | None:
        return {i for i, a in enumerate(self.attributes) if matches(where, a)} if where else None


@lru_cache(maxsize=8)  # a build never changes once written: read it once per process
def _load(file: str) -> Build:
    frame = pl.read_parquet(file)
    texts = frame["text"].to_list()
    return Build(
        frame["chunk_id"].to_list(),
        frame["doc_id"].to_list(),
        texts,
        [json.loads(a) for a in frame["attributes"]],
        np.asarray(frame["vector"].to_list(), dtype=np.float32),
        BM25Index(texts),
    )


class ExactStore(dg.ConfigurableResource, EmbeddedStore):
    """exact cosine search over every chunk (no approximate index), in-process BM25"""

    backend: ClassVar[str] = "exact"
    analyzers: ClassVar[tuple[str, ...]] = ("plain",)
    files: ClassVar[str] = "local"
    path: str

    @property
    def _root(self) -> str:
        return self.path

    def _file(self, physical: str) -> Path:
        return Path(self.path) / physical / FILE

    def _build(self, physical, rows, vectors, fields, values, analyzer) -> None:
        vecs = np.asarray(vectors, dtype=np.float32)
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        file = self._file(physical)
        file.parent.mkdir(parents=True)
        pl.DataFrame(
            {
                "chunk_id": [r["chunk_id"] for r in rows],
                "doc_id": [r["doc_id"] for r in rows],
                "text": [r["text"] for r in rows],
                "attributes": [json.dumps(v) for v in values],  # the filterable fields, typed
                "vector": vecs.tolist(),
            }
        ).write_parquet(file)

    def _count(self, physical: str) -> int:
        return pl.scan_parquet(self._file(physical)).select(pl.len()).collect().item()

    def _build_present(self, physical: str) -> bool:
        return self._file(physical).exists()

    def _drop(self, physical: str) -> None:
        shutil.rmtree(Path(self.path) / physical, ignore_errors=True)

    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        def run(physical):
            build = _load(str(self._file(physical)))
            q = np.asarray(vector, dtype=np.float32)
            scores = build.vectors @ (q / max(float(np.linalg.norm(q)), 1e-12))
            allowed = build.allowed(where)
            order = [int(i) for i in np.argsort(-scores, kind="stable") if allowed is None or i in allowed]
            return [build.hit(i, scores[i]) for i in order[:k]]

        return self._read(collection, run)

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        def run(physical):
            build = _load(str(self._file(physical)))
            return [build.hit(i, s) for i, s in build.keywords.search(query, k, build.allowed(where))]

        return self._read(collection, run)

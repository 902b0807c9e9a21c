"""Imported first by a benchmark's run (benchmarks/overhead.py's and autorag_comparable.py's instrumented
runs): times the embedding model's calls into `spent` ({"cpu": CPU seconds, "wall": seconds, "texts": n})
and the default vector store's searches into `searched` ({"cpu": CPU seconds, "searches": n})."""

from __future__ import annotations

import time

from resources.embedders import EmbeddingService
from resources.vector_stores.lancedb_store import LanceDBStore

spent = {"cpu": 0.0, "wall": 0.0, "texts": 0}
searched = {"cpu": 0.0, "searches": 0}
_original = EmbeddingService._model_embed
_read = LanceDBStore._read_table


def _timed(self, model, texts, *args, **kwargs):
    t0, w0 = time.process_time(), time.perf_counter()
    try:
        return _original(self, model, texts, *args, **kwargs)
    finally:
        spent["cpu"] += time.process_time() - t0
        spent["wall"] += time.perf_counter() - w0
        spent["texts"] += len(texts)


def _timed_search(self, collection, query):
    t0 = time.process_time()  # every thread's: LanceDB searches on threads of its own
    try:
        return _read(self, collection, query)
    finally:
        searched["cpu"] += time.process_time() - t0
        searched["searches"] += 1


EmbeddingService._model_embed = _timed
LanceDBStore._read_table = _timed_search

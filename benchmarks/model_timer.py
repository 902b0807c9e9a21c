"""Imported first by a benchmark's run (benchmarks/overhead.py's and autorag_comparable.py's instrumented
runs): times the embedding model's calls into `spent` ({"cpu": CPU seconds, "wall": seconds, "texts": n})."""

from __future__ import annotations

import time

from resources.embedders import EmbeddingService

spent = {"cpu": 0.0, "wall": 0.0, "texts": 0}
_original = EmbeddingService._model_embed


def _timed(self, model, texts, *args, **kwargs):
    t0, w0 = time.process_time(), time.perf_counter()
    try:
        return _original(self, model, texts, *args, **kwargs)
    finally:
        spent["cpu"] += time.process_time() - t0
        spent["wall"] += time.perf_counter() - w0
        spent["texts"] += len(texts)


EmbeddingService._model_embed = _timed

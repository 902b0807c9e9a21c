"""Imported first by a benchmark's run (benchmarks/overhead.py's instrumented run, or a warm process:
`rag-sweep warm --preload model_timer`): times the embedding model's calls into `spent` ({"cpu": CPU
seconds, "texts": n}), and appends `spent` to the file `$RAG_BENCH_MODEL_CPU` names when the process exits."""

from __future__ import annotations

import atexit
import json
import os
import time

from resources.embedders import EmbeddingService

spent = {"cpu": 0.0, "texts": 0}  # a warm process never embeds: each child forked from it starts at 0
_original = EmbeddingService._model_embed


def _timed(self, model, texts, *args, **kwargs):
    t0 = time.process_time()
    try:
        return _original(self, model, texts, *args, **kwargs)
    finally:
        spent["cpu"] += time.process_time() - t0
        spent["texts"] += len(texts)


EmbeddingService._model_embed = _timed


@atexit.register
def _write() -> None:
    if (path := os.environ.get("RAG_BENCH_MODEL_CPU")) and spent["texts"]:
        with open(path, "a") as f:
            f.write(json.dumps(spent) + "\n")

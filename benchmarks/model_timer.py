"""Imported first by a benchmark's run (benchmarks/overhead.py's and autorag_comparable.py's instrumented
runs): times the embedding model's calls into `spent` ({"cpu": CPU seconds, "wall": seconds, "texts": n}),
the default vector store's searches into `searched` ({"cpu": CPU seconds, "searches": n}) and MLflow's calls
(its client's methods and the champion's `save_model`, outermost calls only) into `tracked`
({"cpu": CPU seconds, "calls": n}). CPU seconds are the process's, every thread's."""

from __future__ import annotations

import inspect
import threading
import time

import mlflow.pyfunc
from mlflow.tracking import MlflowClient

from resources.embedders import EmbeddingService
from resources.vector_stores.lancedb_store import LanceDBStore

spent = {"cpu": 0.0, "wall": 0.0, "texts": 0}
searched = {"cpu": 0.0, "searches": 0}
tracked = {"cpu": 0.0, "calls": 0}
_original = EmbeddingService._model_embed
_read = LanceDBStore._read_table
_inside_mlflow = threading.local()


def _timed(self, model, texts, *args, **kwargs):
    t0, w0 = time.process_time(), time.perf_counter()
    try:
        return _original(self, model, texts, *args, **kwargs)
    finally:
        spent["cpu"] += time.process_time() - t0
        spent["wall"] += time.perf_counter() - w0
        spent["texts"] += len(texts)


def _timed_search(self, collection, query):
    t0 = time.process_time()  # LanceDB searches on threads of its own
    try:
        return _read(self, collection, query)
    finally:
        searched["cpu"] += time.process_time() - t0
        searched["searches"] += 1


def _timed_mlflow(call):
    def timed(*args, **kwargs):
        if getattr(_inside_mlflow, "yes", False):  # counted by the call it is part of
            return call(*args, **kwargs)
        _inside_mlflow.yes, t0 = True, time.process_time()
        try:
            return call(*args, **kwargs)
        finally:
            _inside_mlflow.yes = False
            tracked["cpu"] += time.process_time() - t0
            tracked["calls"] += 1

    return timed


EmbeddingService._model_embed = _timed
LanceDBStore._read_table = _timed_search
for _name, _method in list(vars(MlflowClient).items()):
    if not _name.startswith("_") and inspect.isfunction(_method):
        setattr(MlflowClient, _name, _timed_mlflow(_method))
mlflow.pyfunc.save_model = _timed_mlflow(mlflow.pyfunc.save_model)

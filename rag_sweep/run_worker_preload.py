"""What a warm run worker (`rag_sweep/run_launcher.py`) finds imported: Dagster and the heavy libraries that
a run's steps import, loaded once in the fork server instead of in every run worker (~7 s a run on two
cores: MLflow and its SQL store, LanceDB, ONNX Runtime, matplotlib, litellm).

Only libraries are loaded here, never the project's definitions: a run worker builds those from the files
as they are when it starts, as Dagster's own run workers do. Nothing here starts work: each library is idle
when the fork server forks, which is what makes the fork safe (LanceDB, the one that keeps a thread, resets
it in the child).
"""

from __future__ import annotations

import gc
import importlib
import warnings

import resources.environment  # noqa: F401  (the process defaults, before litellm and MLflow are imported)

# LanceDB warns in every forked child that its runtime was reset; from an idle fork server that is safe.
warnings.filterwarnings("ignore", message="lancedb fork support is experimental", category=RuntimeWarning)

# Not torch (sentence-transformers, ~11 CPU-s): the default embedding backend is ONNX Runtime, and torch
# is needed only by a cross-encoder reranker or a new model's export check. The fork server imports these
# while the first runs start, so what it loads is paid for beside them.
LIBRARIES = (
    "dagster",
    "dagster_postgres",
    "polars",
    "pyarrow",
    "mlflow.store.tracking.sqlalchemy_store",  # MLflow with the SQL store the runs log to
    "lancedb",
    "onnxruntime",
    "tokenizers",
    "matplotlib.pyplot",
    "litellm",
)

for _name in LIBRARIES:
    try:
        importlib.import_module(_name)
    except ImportError:  # not installed here: the run worker imports what it needs itself
        pass

# what is loaded so far stays out of the cyclic collector's walks, in this process and in every run worker
# forked from it: fewer CPU-s per full collection, fewer pages copied on write (Python's advice for a
# process that forks without exec)
gc.freeze()

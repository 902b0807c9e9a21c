"""The one module a rag-sweep plug-in imports: every extension point's base class and registry, and the
helpers a component of that kind uses. What is named in `__all__` is the plug-in API; everything else in the
project is internal and may move (as `pytest` is public in front of `_pytest`).

A plug-in is a function or class in its own package, declared under its extension point's entry-point group
(docs/guides/plugins.md, docs/reference/extension-points.md):

    from rag_sweep.plugins import EmbeddedStore, Hit, Conditions   # a vector store
    from rag_sweep.plugins import Metric, Question                  # a metric

A vector store subclasses `VectorStore`, or `EmbeddedStore`, whose hooks it fills in: `StoreHooks` states
them, with their signatures (`_root`, `_build`, `_count`, `_drop`, `_vector_search`, `_keyword_search`;
optionally `_build_present` and `_exact_vector_search`). Their names begin with an underscore because a sweep
never calls them: the store's public methods (`upsert`, `retrieve`, `info` ...) do, around them. They are
part of this API all the same, and keep their names and signatures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_core.chunking.base import CHUNKERS, Chunker, Measure, Span, pack
from rag_core.common.registry import PluginError, Registry, UnknownComponent
from rag_core.common.text import normalize_answer
from rag_core.components.embedders import EMBEDDERS, Embedder
from rag_core.components.readers import READERS, Reader
from rag_core.components.rerankers import RERANKERS, Reranker
from rag_core.components.retrieval_modes import RETRIEVAL_MODES, RetrievalMode
from rag_core.components.stores import STORES, Store
from rag_core.data.filters import matches
from rag_core.metrics.registry import METRICS, Metric, Question
from rag_core.retrieval.bm25 import BM25Index
from rag_core.retrieval.retrieve import Hit, ranked
from rag_core.search.strategies import STRATEGIES, SearchStrategy, Strategy

if TYPE_CHECKING:  # loaded on first use, below
    from resources.vector_stores.base import Conditions, Searcher, VectorStore
    from resources.vector_stores.embedded import EmbeddedStore
    from resources.vector_stores.hooks import StoreHooks

# the vector store bases import Dagster (a store is a ConfigurableResource): loaded when a plug-in asks for
# them, so that a chunker or a metric plug-in, read while a sweep is planned, costs no Dagster import
_STORE_BASES = {
    "VectorStore": "resources.vector_stores.base",
    "Conditions": "resources.vector_stores.base",
    "Searcher": "resources.vector_stores.base",
    "EmbeddedStore": "resources.vector_stores.embedded",
    "StoreHooks": "resources.vector_stores.hooks",
}


def __getattr__(name: str):
    if name in _STORE_BASES:
        import importlib

        return getattr(importlib.import_module(_STORE_BASES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # chunking methods (entry-point group rag_sweep.chunkers)
    "CHUNKERS",
    "Chunker",
    "Measure",
    "Span",
    "pack",
    # embedding models (rag_sweep.embedders)
    "EMBEDDERS",
    "Embedder",
    # vector stores (rag_sweep.vector_stores)
    "STORES",
    "Store",
    "VectorStore",
    "EmbeddedStore",
    "StoreHooks",
    "Hit",
    "Conditions",
    "matches",
    "BM25Index",
    # retrieval modes (rag_sweep.retrievers)
    "RETRIEVAL_MODES",
    "RetrievalMode",
    "Searcher",
    "ranked",
    # rerankers (rag_sweep.rerankers)
    "RERANKERS",
    "Reranker",
    # answer generators (rag_sweep.generators)
    "READERS",
    "Reader",
    # metrics (rag_sweep.metrics)
    "METRICS",
    "Metric",
    "Question",
    "normalize_answer",
    # search strategies (rag_sweep.search_strategies)
    "STRATEGIES",
    "SearchStrategy",
    "Strategy",
    # errors a plug-in meets
    "PluginError",
    "UnknownComponent",
    "Registry",
]

"""Vector stores behind one interface (see base.VectorStore); LanceDB is the embedded default.

`vector_store_for` names every store a sweep (`index.store`) or $RAG_VECTOR_STORE can choose: the four
embedded ones keep their data under the data dir; Weaviate is a server (WEAVIATE_URL, WEAVIATE_GRPC_PORT).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rag_core.spec import VECTOR_STORES
from resources.vector_stores.base import Hit, VectorStore
from resources.vector_stores.chroma_store import ChromaStore
from resources.vector_stores.lancedb_store import LanceDBStore
from resources.vector_stores.milvus_store import MilvusLiteStore
from resources.vector_stores.qdrant_store import QdrantStore
from resources.vector_stores.weaviate_store import WeaviateStore

BACKENDS = VECTOR_STORES


def vector_store_for(backend: str, data_dir: str) -> VectorStore:
    """The store named `backend`; embedded stores live in `<data_dir>/<backend>`."""
    root = Path(data_dir)
    makers = {
        "lancedb": lambda: LanceDBStore(uri=str(root / "lancedb")),
        "qdrant": lambda: QdrantStore(path=str(root / "qdrant")),
        "chroma": lambda: ChromaStore(path=str(root / "chroma")),
        "milvus": lambda: MilvusLiteStore(path=str(root / "milvus")),
        "weaviate": WeaviateStore.from_env,
    }
    if backend not in makers:
        raise ValueError(f"unknown vector store {backend!r}; choose one of {', '.join(makers)}")
    return makers[backend]()


class VectorStoreCatalog(dg.ConfigurableResource):
    """The stores a sweep names in `index.store`, built on demand next to the artifacts. Configs that
    name no store (or the deployment's own) use the `vector_store` resource instead."""

    data_dir: str

    def get(self, backend: str) -> VectorStore:
        return vector_store_for(backend, self.data_dir)

    def teardown_after_execution(self, context) -> None:
        # release the embedded stores' single-client locks when a step ends
        for backend in ("qdrant", "milvus"):
            self.get(backend).teardown_after_execution(context)


def store_of(backend: str, default: VectorStore, catalog: VectorStoreCatalog) -> VectorStore:
    return default if backend == default.backend else catalog.get(backend)


__all__ = [
    "BACKENDS",
    "ChromaStore",
    "Hit",
    "LanceDBStore",
    "MilvusLiteStore",
    "QdrantStore",
    "VectorStore",
    "VectorStoreCatalog",
    "WeaviateStore",
    "store_of",
    "vector_store_for",
]

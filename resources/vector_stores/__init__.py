"""Vector stores behind one interface (see base.VectorStore); LanceDB is the embedded default.

`VectorStores` gives every store a plan names (`index.store`, else the deployment's $RAG_VECTOR_STORE), built
in or a plug-in (rag_core.components.stores.STORES): the four embedded ones keep their data under the data dir;
Weaviate is a server (WEAVIATE_URL, WEAVIATE_GRPC_PORT).
"""

from __future__ import annotations

import dagster as dg

from rag_core.components.stores import STORES
from resources.environment import weaviate_settings
from resources.storage import data_root, is_remote
from resources.vector_stores.base import Hit, VectorStore
from resources.vector_stores.chroma_store import ChromaStore
from resources.vector_stores.embedded import SingleClientStore
from resources.vector_stores.lancedb_store import LanceDBStore
from resources.vector_stores.milvus_store import MilvusLiteStore
from resources.vector_stores.qdrant_store import QdrantStore
from resources.vector_stores.weaviate_store import WeaviateStore


class VectorStores(dg.ConfigurableResource):
    """Every vector store a plan names, by name: the four embedded ones keep their data under `data_dir`
    (`<data_dir>/<store>`); Weaviate is a server (`weaviate_url`, `weaviate_grpc_port`, `weaviate_api_key`)."""

    data_dir: str
    weaviate_url: str = "http://127.0.0.1:8080"
    weaviate_grpc_port: int = 50051
    weaviate_api_key: str | None = None

    @classmethod
    def from_env(cls, data_dir: str) -> VectorStores:
        """WEAVIATE_URL, WEAVIATE_GRPC_PORT, WEAVIATE_API_KEY configure the Weaviate server."""
        url, grpc_port, has_key = weaviate_settings()
        from rag_core.common.redaction import url_secrets

        return cls(
            data_dir=data_dir,
            # a URL with a password: resolved at run time, as the key (Dagster's run records hold the name)
            weaviate_url=dg.EnvVar("WEAVIATE_URL") if url_secrets(url) else url,
            weaviate_grpc_port=grpc_port,
            # resolved at run time: Dagster's run records hold the variable's name, never the key
            weaviate_api_key=dg.EnvVar("WEAVIATE_API_KEY") if has_key else None,
        )

    def get(self, backend: str) -> VectorStore:
        """The store named `backend` (a built-in or an installed plug-in, rag_core.components.stores)."""
        store = STORES.get(backend)
        root = data_root(self.data_dir)
        if is_remote(root) and store.files == "local":
            raise ValueError(
                f"vector store {backend!r} keeps its files on a local disk; with a data dir on object "
                f"storage ({self.data_dir}) use one that writes there (lancedb) or a server (weaviate)"
            )
        return store.load().open(root, self)

    def teardown_after_execution(self, context) -> None:
        # release the embedded stores' single-client locks when a step ends, of every store class this
        # process has loaded (a data dir on object storage has none: those stores are refused there)
        if is_remote(data_root(self.data_dir)):
            return
        for backend in STORES.loaded_names():
            if issubclass(STORES.get(backend).load(), SingleClientStore):
                self.get(backend).teardown_after_execution(context)


__all__ = [
    "ChromaStore",
    "Hit",
    "LanceDBStore",
    "MilvusLiteStore",
    "QdrantStore",
    "VectorStore",
    "VectorStores",
    "WeaviateStore",
]

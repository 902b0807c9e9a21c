"""Vector stores behind one interface (see base.VectorStore); LanceDB is the embedded default.

BACKENDS names every store a sweep or $RAG_VECTOR_STORE can choose: the four embedded ones keep their
data under the data dir; Weaviate is a server (WEAVIATE_URL).
"""

from resources.vector_stores.base import Hit, VectorStore
from resources.vector_stores.lancedb_store import LanceDBStore

BACKENDS = ("lancedb", "qdrant", "chroma", "milvus", "weaviate")

__all__ = ["BACKENDS", "Hit", "LanceDBStore", "VectorStore"]

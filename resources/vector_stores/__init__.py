"""Vector stores behind one interface (see base.VectorStore); LanceDB is the embedded default."""

from resources.vector_stores.base import Hit, VectorStore
from resources.vector_stores.lancedb_store import LanceDBStore

__all__ = ["Hit", "LanceDBStore", "VectorStore"]

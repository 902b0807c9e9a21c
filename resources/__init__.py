"""Dagster resources: artifact store, embedders, vector stores, LLM client, MLflow tracking.

`build_resources` picks each implementation from configuration (environment variables), in one place.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def vector_store_from_env(data_dir: str):
    """$RAG_VECTOR_STORE: lancedb (default), qdrant, chroma, milvus (embedded, under the data dir) or
    weaviate (a server; see resources/vector_stores)."""
    from resources.vector_stores import vector_store_for

    kind = os.environ.get("RAG_VECTOR_STORE", "lancedb").lower()
    try:
        return vector_store_for(kind, data_dir)
    except ValueError as e:
        raise ValueError(f"RAG_VECTOR_STORE={kind!r}: {e}") from None


def build_resources(data_dir: str) -> dict:
    from resources.artifacts import ArtifactStore
    from resources.embedders import EmbeddingService
    from resources.llm import LLMClient
    from resources.tracking import MlflowTracking
    from resources.vector_stores import VectorStoreCatalog

    return {
        "artifacts": ArtifactStore(data_dir=data_dir),
        "embedder": EmbeddingService(
            cache_dir=str(Path(data_dir) / "embedding_cache"),
            api_base=os.environ.get("RAG_EMBEDDING_API_BASE"),
        ),
        "vector_store": vector_store_from_env(data_dir),
        "vector_stores": VectorStoreCatalog(data_dir=data_dir),
        "llm": LLMClient(
            api_base=os.environ.get("RAG_LLM_API_BASE"), api_key=os.environ.get("RAG_LLM_API_KEY")
        ),
        "tracking": MlflowTracking(default_dir=data_dir),
    }

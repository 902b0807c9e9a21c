"""Dagster resources: artifact store, embedders, vector stores, LLM client, MLflow tracking.

`build_resources` picks each implementation from configuration (environment variables), in one place.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def vector_store_from_env(data_dir: str):
    """$RAG_VECTOR_STORE: `lancedb` (default, embedded) or `weaviate` (see resources/vector_stores)."""
    kind = os.environ.get("RAG_VECTOR_STORE", "lancedb").lower()
    if kind == "lancedb":
        from resources.vector_stores.lancedb_store import LanceDBStore

        return LanceDBStore(uri=str(Path(data_dir) / "lancedb"))
    if kind == "weaviate":
        from resources.vector_stores.weaviate_store import WeaviateStore

        return WeaviateStore.from_env()
    raise ValueError(f"RAG_VECTOR_STORE={kind!r}: choose lancedb or weaviate")


def build_resources(data_dir: str) -> dict:
    from resources.artifacts import ArtifactStore
    from resources.embedders import EmbeddingService
    from resources.llm import LLMClient
    from resources.tracking import MlflowTracking

    return {
        "artifacts": ArtifactStore(data_dir=data_dir),
        "embedder": EmbeddingService(
            cache_dir=str(Path(data_dir) / "embedding_cache"),
            api_base=os.environ.get("RAG_EMBEDDING_API_BASE"),
        ),
        "vector_store": vector_store_from_env(data_dir),
        "llm": LLMClient(
            api_base=os.environ.get("RAG_LLM_API_BASE"), api_key=os.environ.get("RAG_LLM_API_KEY")
        ),
        "tracking": MlflowTracking(default_dir=data_dir),
    }

"""Dagster resources: the artifact IO manager, embedders, vector stores, the LLM client, MLflow tracking.

`build_resources` picks each implementation from configuration (the environment, read in
resources/environment.py), in one place.
"""

from __future__ import annotations

from resources.environment import (
    device_setting,
    env_choice,
    env_number,
    is_set,
    llm_requests_per_minute,
    text,
)


def _url_setting(name: str):
    """A URL variable's value; one that holds a password or a token is given as `dg.EnvVar(name)`, resolved
    at run time: Dagster's run records then hold the variable's name, never the secret."""
    import dagster as dg

    from rag_core.common.redaction import url_secrets

    value = text(name)
    return dg.EnvVar(name) if value and url_secrets(value) else value


def build_resources(data_dir: str) -> dict:
    import dagster as dg

    from resources.artifacts import ArtifactIOManager
    from resources.embedders import EmbeddingService
    from resources.llm import LLMClient
    from resources.local_encoders import BACKENDS
    from resources.storage import data_root  # polars: not imported with the package (a GPU worker's encoder)
    from resources.tracking import MlflowTracking
    from resources.vector_stores import VectorStores

    return {
        "artifacts": ArtifactIOManager(data_dir=data_dir),
        "embedder": EmbeddingService(
            cache_dir=str(data_root(data_dir) / "embedding_cache"),
            api_base=_url_setting("RAG_EMBEDDING_API_BASE"),
            backend=env_choice("RAG_EMBEDDING_BACKEND", "onnx", BACKENDS),
            device=device_setting(),
        ),
        "vector_stores": VectorStores.from_env(data_dir),
        # the key is resolved at run time from the environment: run records hold only its name
        "llm": LLMClient(
            api_base=_url_setting("RAG_LLM_API_BASE"),
            api_key=dg.EnvVar("RAG_LLM_API_KEY") if is_set("RAG_LLM_API_KEY") else None,
            cache_path=str(data_root(data_dir) / "llm_cache.sqlite"),
            timeout_s=env_number("RAG_LLM_TIMEOUT_S", 60.0, float, positive=True),
            max_retries=env_number("RAG_LLM_MAX_RETRIES", 2, int),
            max_concurrency=max(1, env_number("RAG_LLM_MAX_CONCURRENCY", 4, int)),
            requests_per_minute=llm_requests_per_minute(),
        ),
        "tracking": MlflowTracking(default_dir=data_dir),
    }

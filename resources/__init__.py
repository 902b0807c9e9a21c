"""Dagster resources: the artifact IO manager, embedders, vector stores, the LLM client, MLflow tracking.

`build_resources` picks each implementation from configuration (environment variables), in one place.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def default_data_dir() -> str:
    return os.environ.get("RAG_DATA_DIR", str(Path.cwd() / ".rag_data"))


def user_cache_dir() -> Path:
    """This project's folder in the user's cache dir: what is built once per machine (not per data dir)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag-sweep"


def alert_settings() -> tuple[str | None, str]:
    """(where drift alerts are posted: $RAG_ALERT_WEBHOOK, None for nowhere; the Dagster UI's address the
    alerts link to: $RAG_DAGSTER_URL, default http://127.0.0.1:3000)."""
    return os.environ.get("RAG_ALERT_WEBHOOK") or None, os.environ.get(
        "RAG_DAGSTER_URL"
    ) or "http://127.0.0.1:3000"


def env_number(name: str, default, cast):
    """A non-negative number from the environment, or a one-line error naming the variable."""
    from rag_core.spec import SpecError

    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = cast(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise SpecError(f"${name}={raw!r}: expected a non-negative {cast.__name__}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices` from the environment, or a one-line error naming the variable."""
    from rag_core.spec import SpecError

    value = os.environ.get(name) or default
    if value not in choices:
        raise SpecError(f"${name}={value!r}: expected one of {', '.join(choices)}")
    return value


def build_resources(data_dir: str) -> dict:
    import dagster as dg

    from resources.artifacts import ArtifactIOManager
    from resources.embedders import EmbeddingService
    from resources.llm import LLMClient
    from resources.local_encoders import BACKENDS
    from resources.tracking import MlflowTracking
    from resources.vector_stores import VectorStores

    return {
        "artifacts": ArtifactIOManager(data_dir=data_dir),
        "embedder": EmbeddingService(
            cache_dir=str(Path(data_dir) / "embedding_cache"),
            api_base=os.environ.get("RAG_EMBEDDING_API_BASE"),
            backend=env_choice("RAG_EMBEDDING_BACKEND", "onnx", BACKENDS),
        ),
        "vector_stores": VectorStores.from_env(data_dir),
        # the key is resolved at run time from the environment: run records hold only its name
        "llm": LLMClient(
            api_base=os.environ.get("RAG_LLM_API_BASE"),
            api_key=dg.EnvVar("RAG_LLM_API_KEY") if os.environ.get("RAG_LLM_API_KEY") else None,
            cache_path=str(Path(data_dir) / "llm_cache.sqlite"),
            timeout_s=env_number("RAG_LLM_TIMEOUT_S", 60.0, float),
            max_retries=env_number("RAG_LLM_MAX_RETRIES", 2, int),
            max_concurrency=max(1, env_number("RAG_LLM_MAX_CONCURRENCY", 4, int)),
            requests_per_minute=env_number("RAG_LLM_REQUESTS_PER_MINUTE", 0.0, float) or None,
        ),
        "tracking": MlflowTracking(default_dir=data_dir),
    }

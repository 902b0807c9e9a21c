"""A sweep's plan from its file and the deployment's environment, built in this one place; and the
definitions a runner materializes it with (its assets and the shared resources)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rag_assets.stage_asset import asset_key
from rag_assets.sweep_assets import stage_assets
from rag_core.planning.plan import Plan
from rag_core.planning.spec import load_sweep
from resources import build_resources
from resources.environment import deployment_store, llm_api_base


def load_plan(spec: str | Path, store: str | None = None) -> Plan:
    """The sweep file's plan; `store`: the vector store of configs that name none (default
    $RAG_VECTOR_STORE, else lancedb); the LLM endpoint ($RAG_LLM_API_BASE) is part of its fingerprints."""
    return Plan.resolve(load_sweep(spec), store or deployment_store(), llm_api_base())


def runner_definitions(plan: Plan, data_dir: str, resources: dict | None = None) -> dg.Definitions:
    """The sweep's assets with the shared resources (`resources` overrides some): what a step needs."""
    return dg.Definitions(
        assets=stage_assets(plan), resources={**build_resources(data_dir), **(resources or {})}
    )


__all__ = ["asset_key", "load_plan", "runner_definitions"]

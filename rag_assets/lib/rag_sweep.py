"""`RagSweep`: one sweep of RAG configurations as a Dagster Component.

Each `defs/<name>/defs.yaml` is an instance: the sweep file, the vector store of configs that name none,
and the nightly re-evaluation cron. Its assets are prefixed by the sweep's name, so several sweeps live
side by side in one deployment.

    type: rag_assets.lib.RagSweep
    attributes:
      sweep: ../../../examples/sweeps/example.yaml   # relative to this folder
      vector_store: lancedb                          # optional; default $RAG_VECTOR_STORE, else lancedb
      nightly_cron: "0 2 * * *"                      # optional; null: no schedule
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from rag_core.plan import Plan
from rag_core.spec import load_sweep


def deployment_store() -> str:
    """The vector store of configs that name none, when the sweep's instance names none either."""
    return os.environ.get("RAG_VECTOR_STORE", "lancedb").lower()


def deployment_llm_api_base() -> str | None:
    """The LLM endpoint the deployment's client calls ($RAG_LLM_API_BASE): part of the fingerprint of every
    partition that calls an LLM, as the same model name on another server is another model."""
    return os.environ.get("RAG_LLM_API_BASE") or None


class RagSweep(dg.Component, dg.Model, dg.Resolvable):
    """A sweep of RAG configurations: every stage a partitioned asset, every config an MLflow run."""

    sweep: str
    vector_store: str | None = None
    nightly_cron: str | None = "0 2 * * *"

    def plan(self, base: Path) -> Plan:
        return Plan.resolve(
            load_sweep(base / self.sweep), self.vector_store or deployment_store(), deployment_llm_api_base()
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from rag_assets.sweep_defs import sweep_definitions

        return sweep_definitions(self.plan(Path(context.path)), self.nightly_cron)

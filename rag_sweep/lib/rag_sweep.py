"""`RagSweep`: one sweep of RAG configurations as a Dagster Component.

Each `defs/<name>/defs.yaml` is an instance: the sweep file, the vector store of configs that name none,
and the nightly re-evaluation cron. Its assets are prefixed by the sweep's name, so several sweeps live
side by side in one deployment.

    type: rag_sweep.lib.RagSweep
    attributes:
      sweep: ../../../examples/sweeps/example.yaml   # relative to this folder
      vector_store: lancedb                          # optional; default $RAG_VECTOR_STORE, else lancedb
      nightly_cron: "0 2 * * *"                      # optional; null: no schedule
                                                     # (off until turned on: $RAG_NIGHTLY_STATUS)
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rag_assets.orchestration.plans import load_plan
from rag_core.planning.plan import Plan
from rag_sweep.sweep_defs import sweep_definitions


class RagSweep(dg.Component, dg.Model, dg.Resolvable):
    """A sweep of RAG configurations: every stage a partitioned asset, every config an MLflow run."""

    sweep: str
    vector_store: str | None = None
    nightly_cron: str | None = "0 2 * * *"

    def plan(self, base: Path) -> Plan:
        return load_plan(base / self.sweep, self.vector_store)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return sweep_definitions(self.plan(Path(context.path)), self.nightly_cron)

"""The deployment's Definitions: every sweep of `defs/` (a `RagSweep` component instance each), the
shared resources and the automation sensor.

`$RAG_SWEEP` (a sweep file) replaces the `defs/` folder with that one sweep, as `rag-sweep run` prints it;
artifacts go to `$RAG_DATA_DIR` (default `./.rag_data`); configs that name no vector store use
`$RAG_VECTOR_STORE` (default lancedb).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm/mlflow imports (stack notes)

import dagster as dg  # noqa: E402

from rag_core.plan import Plan  # noqa: E402
from resources import build_resources, default_data_dir  # noqa: E402
from sensors import automation_sensor  # noqa: E402

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def build_definitions(
    plans: list[Plan], data_dir: str | None = None, resources: dict | None = None
) -> dg.Definitions:
    """Definitions of the given sweeps with the shared resources (`resources` overrides some)."""
    from rag_assets.sweep_defs import sweep_definitions

    return dg.Definitions.merge(
        *(sweep_definitions(p, data_dir=data_dir) for p in plans),
        deployment_definitions(data_dir, resources),
    )


def deployment_definitions(data_dir: str | None = None, resources: dict | None = None) -> dg.Definitions:
    return dg.Definitions(
        sensors=[automation_sensor()],
        resources={**build_resources(data_dir or default_data_dir()), **(resources or {})},
    )


@dg.definitions
def defs() -> dg.Definitions:
    if os.environ.get("RAG_SWEEP"):
        from rag_assets.lib.rag_sweep import RagSweep

        plan = RagSweep(sweep=os.environ["RAG_SWEEP"]).plan(Path.cwd())
        return build_definitions([plan])
    return dg.Definitions.merge(dg.load_from_defs_folder(project_root=PROJECT_ROOT), deployment_definitions())

"""The deployment's Definitions: every sweep of `defs/` (a `RagSweep` component instance each: the example
only, the demos stay in examples/), the shared resources and the automation sensor.

`$RAG_SWEEP` (a sweep file) replaces the `defs/` folder with that one sweep, as `rag-sweep run` prints it
(its nightly re-evaluation at `$RAG_NIGHTLY_CRON`, default 02:00 UTC, off unless
`$RAG_NIGHTLY_STATUS=running`);
artifacts go to `$RAG_DATA_DIR` (default `./.rag_data`); configs that name no vector store use
`$RAG_VECTOR_STORE` (default lancedb).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rag_core.common.extras import require
from rag_core.planning.plan import Plan, check_distinct_prefixes
from rag_sweep.lib.rag_sweep import RagSweep
from rag_sweep.sweep_defs import sweep_definitions
from resources import build_resources
from resources.environment import default_data_dir, executor, nightly_cron, sweep_file
from sensors import automation_sensor
from sensors.storage_cleanup import storage_cleanup

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def build_definitions(
    plans: list[Plan], data_dir: str | None = None, resources: dict | None = None
) -> dg.Definitions:
    """Definitions of the given sweeps with the shared resources (`resources` overrides some)."""
    check_distinct_prefixes([(p.sweep.name, str(p.sweep.path)) for p in plans])
    return dg.Definitions.merge(
        *(sweep_definitions(p, nightly_cron(), data_dir) for p in plans),
        deployment_definitions(data_dir, resources, lambda: plans),
    )


def deployment_definitions(
    data_dir: str | None = None, resources: dict | None = None, plans=None
) -> dg.Definitions:
    """The automation sensor, the storage cleanup (its schedule off) and the shared resources; with
    $RAG_EXECUTOR=celery, the fleet's executor for every job (UI materializations and backfills, schedules,
    sensors), as `rag-sweep run` uses it, else the in-process executor. `plans`: the deployment's sweeps
    when the cleanup runs (default: the `defs/` folder's)."""
    cleanup, weekly = storage_cleanup(plans or folder_plans)
    return dg.Definitions(
        sensors=[automation_sensor()],
        jobs=[cleanup],
        schedules=[weekly],
        resources={**build_resources(data_dir or default_data_dir()), **(resources or {})},
        # in the run's own process, as `rag-sweep run` does: a run is one stage's batch (one step), and
        # Dagster's default would start a second process per run to execute it, importing everything again
        executor=fleet_executor() if executor() == "celery" else dg.in_process_executor,
    )


def fleet_executor():
    require("fleet", "$RAG_EXECUTOR=celery")
    from rag_sweep.fleet.step_jobs import fleet_executor as celery

    return celery()


@dg.definitions
def defs() -> dg.Definitions:
    if spec := sweep_file():
        return build_definitions([RagSweep(sweep=spec).plan(Path.cwd())])
    check_distinct_prefixes(folder_sweeps(PROJECT_ROOT / "rag_sweep" / "defs"))  # before Dagster's own error
    return dg.Definitions.merge(dg.load_from_defs_folder(project_root=PROJECT_ROOT), deployment_definitions())


def folder_plans() -> list[Plan]:
    """The plan of every RagSweep instance of the `defs/` folder, as its component builds it."""
    import yaml

    plans = []
    for component in sorted((PROJECT_ROOT / "rag_sweep" / "defs").rglob("defs.yaml")):
        doc = yaml.safe_load(component.read_text()) or {}
        if doc.get("type") == "rag_sweep.lib.RagSweep":
            plans.append(RagSweep(**doc["attributes"]).plan(component.parent))
    return plans


def folder_sweeps(folder: Path) -> list[tuple[str, str]]:
    """(name, defs.yaml) of every RagSweep instance under `folder`, read without building them."""
    import yaml

    out = []
    for component in sorted(folder.rglob("defs.yaml")):
        try:
            doc = yaml.safe_load(component.read_text()) or {}
            if doc.get("type") != "rag_sweep.lib.RagSweep":
                continue
            spec = (component.parent / doc["attributes"]["sweep"]).resolve()
            out.append((str((yaml.safe_load(spec.read_text()) or {}).get("name")), str(component)))
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
            continue  # a broken instance: loading it says what is wrong
    return out

"""Dagster Definitions of one sweep: assets, resources, jobs, schedule and sensors.

`dagster dev` loads `defs` for the sweep named by $RAG_SWEEP (default: the example sweep); artifacts go to
$RAG_DATA_DIR (default `./.rag_data`) and the vector store is chosen by $RAG_VECTOR_STORE.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm/mlflow imports (stack notes)

import dagster as dg  # noqa: E402

from rag_assets import (  # noqa: E402
    answers,
    chunksets,
    embeddings,
    evaluations,
    indexes,
    inputs,
    jobs,
    leaderboard,
    rerankings,
    retrievals,
)
from rag_assets.partitions import SweepPartitions  # noqa: E402
from rag_core.spec import Sweep, load_sweep  # noqa: E402
from resources import build_resources  # noqa: E402
from resources.artifacts import default_data_dir  # noqa: E402
from sensors import build_sensors_and_schedules  # noqa: E402

EXAMPLE_SWEEP = Path(__file__).resolve().parents[1] / "examples" / "sweeps" / "example.yaml"


def build_assets(sweep: Sweep, backend: str) -> list[dg.AssetsDefinition]:
    """`backend` names the vector store; artifacts from the index on are fingerprinted with it."""
    parts = SweepPartitions.of(sweep)
    return [
        *inputs.build(sweep),
        chunksets.build(sweep, parts),
        embeddings.build(sweep, parts),
        indexes.build(sweep, parts, backend),
        retrievals.build(sweep, parts, backend),
        rerankings.build(sweep, parts, backend),
        answers.build(sweep, parts, backend),
        evaluations.build(sweep, parts, backend),
        leaderboard.build(sweep, backend),
    ]


def build_definitions(
    sweep: Sweep, data_dir: str | None = None, resources: dict | None = None
) -> dg.Definitions:
    parts = SweepPartitions.of(sweep)
    job_defs = jobs.build(parts)
    schedules, sensors = build_sensors_and_schedules(sweep, job_defs)
    all_resources = {**build_resources(data_dir or default_data_dir()), **(resources or {})}
    return dg.Definitions(
        assets=build_assets(sweep, all_resources["vector_store"].backend),
        jobs=list(job_defs.values()),
        schedules=schedules,
        sensors=sensors,
        resources=all_resources,
    )


def _load() -> dg.Definitions:
    return build_definitions(load_sweep(os.environ.get("RAG_SWEEP", str(EXAMPLE_SWEEP))))


defs = _load()

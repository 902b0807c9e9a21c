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
    retrievals,
)
from rag_assets.partitions import SweepPartitions  # noqa: E402
from rag_core.spec import Sweep, load_sweep  # noqa: E402
from resources import build_resources  # noqa: E402
from resources.artifacts import default_data_dir  # noqa: E402
from sensors import build_sensors_and_schedules  # noqa: E402

EXAMPLE_SWEEP = Path(__file__).resolve().parents[1] / "examples" / "sweeps" / "example.yaml"


def build_assets(sweep: Sweep) -> list[dg.AssetsDefinition]:
    parts = SweepPartitions.of(sweep)
    return [
        *inputs.build(sweep),
        chunksets.build(sweep, parts),
        embeddings.build(sweep, parts),
        indexes.build(sweep, parts),
        retrievals.build(sweep, parts),
        answers.build(sweep, parts),
        evaluations.build(sweep, parts),
        leaderboard.build(sweep),
    ]


def build_definitions(
    sweep: Sweep, data_dir: str | None = None, resources: dict | None = None
) -> dg.Definitions:
    parts = SweepPartitions.of(sweep)
    job_defs = jobs.build(parts)
    schedules, sensors = build_sensors_and_schedules(sweep, job_defs)
    return dg.Definitions(
        assets=build_assets(sweep),
        jobs=list(job_defs.values()),
        schedules=schedules,
        sensors=sensors,
        resources={**build_resources(data_dir or default_data_dir()), **(resources or {})},
    )


def _load() -> dg.Definitions:
    return build_definitions(load_sweep(os.environ.get("RAG_SWEEP", str(EXAMPLE_SWEEP))))


defs = _load()

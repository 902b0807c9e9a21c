"""Jobs targeted by the schedule and sensors (assets of one partitions definition each)."""

from __future__ import annotations

import dagster as dg

from rag_assets.partitions import SweepPartitions


def build(parts: SweepPartitions) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    return {
        "inputs_job": dg.define_asset_job(
            "inputs_job",
            selection=["corpus", "qa_set"],
            description="Validate and snapshot the corpus and QA set.",
        ),
        "evaluate_job": dg.define_asset_job(
            "evaluate_job",
            selection=["answers", "evaluations"],
            partitions_def=parts.configs,
            description="Answer and evaluate one config (its retrievals must exist).",
        ),
    }

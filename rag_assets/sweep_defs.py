"""The Dagster definitions of one sweep, read from its plan: source files, one asset per stage (keys
prefixed by the sweep's name, so several sweeps live side by side), the evaluation job and the nightly
schedule. Shared parts (resources, the automation sensor) are added once per deployment (definitions.py).
"""

from __future__ import annotations

import re

import dagster as dg

from rag_assets.answers import Answers
from rag_assets.chunksets import Chunksets
from rag_assets.confirmation import Confirmation
from rag_assets.embeddings import Embeddings
from rag_assets.evaluations import Evaluations
from rag_assets.indexes import VectorIndex
from rag_assets.inputs import Corpus, QASet, source_files
from rag_assets.leaderboard import Leaderboard
from rag_assets.rerankings import Rerankings
from rag_assets.retrievals import Retrievals
from rag_assets.stage_asset import StageLogic, asset_key, stage_asset
from rag_core.plan import Plan
from rag_core.stages import CONFIG_STAGE, STAGES
from sensors.alerts import drift_alerts
from sensors.schedules import nightly_reevaluation

LOGIC: dict[str, StageLogic] = {
    "corpus": Corpus(),
    "qa_set": QASet(),
    "chunksets": Chunksets(),
    "embeddings": Embeddings(),
    "vector_index": VectorIndex(),
    "retrievals": Retrievals(),
    "rerankings": Rerankings(),
    "answers": Answers(),
    "evaluations": Evaluations(),
    "leaderboard": Leaderboard(),
    "confirmation": Confirmation(),
}
assert set(LOGIC) == {s.name for s in STAGES}, "every stage of the registry needs its logic"


def prefix_of(sweep_name: str) -> str:
    """The sweep's asset-key prefix and group: its name with anything but [A-Za-z0-9_] as '_'."""
    return re.sub(r"[^A-Za-z0-9_]", "_", sweep_name)


def stage_assets(plan: Plan) -> list:
    prefix = prefix_of(plan.sweep.name)
    partitions = {
        s.name: dg.StaticPartitionsDefinition(plan.all_keys(s.name)) for s in STAGES if s.partitioned
    }
    return [
        *source_files(prefix, plan.sweep.corpus_path, plan.sweep.qa_path, plan.sweep.qa_generation),
        *(
            stage_asset(plan, prefix, s.name, LOGIC[s.name], partitions)
            for s in STAGES
            if s.name != "confirmation" or plan.holdout  # confirmed on a holdout only when there is one
        ),
    ]


def sweep_definitions(
    plan: Plan, nightly_cron: str | None = "0 2 * * *", data_dir: str | None = None
) -> dg.Definitions:
    prefix = prefix_of(plan.sweep.name)
    evaluate_job = dg.define_asset_job(
        f"{prefix}__evaluate",
        selection=[asset_key(prefix, "answers"), asset_key(prefix, CONFIG_STAGE)],
        description=f"Answer and evaluate configs of sweep {plan.sweep.name} (their rerankings must exist).",
    )
    return dg.Definitions(
        assets=stage_assets(plan),
        jobs=[evaluate_job],
        schedules=[nightly_reevaluation(plan, evaluate_job, nightly_cron, data_dir)] if nightly_cron else [],
        sensors=[drift_alerts(plan.sweep.name, asset_key(prefix, "leaderboard"), f"{prefix}__drift_alerts")],
    )

"""The assets of one sweep, read from its plan: its input files and one asset per stage of the registry
(rag_core/planning/stages.py), each with the stage's logic. What runs a sweep (the runner, a deployment)
materializes these; jobs, schedules and sensors are added where the deployment is put together
(rag_sweep/sweep_defs.py).
"""

from __future__ import annotations

import dagster as dg

from rag_assets.answers import Answers
from rag_assets.champion import champion_asset
from rag_assets.chunksets import Chunksets
from rag_assets.confirmation import Confirmation
from rag_assets.embeddings import Embeddings
from rag_assets.evaluations import Evaluations
from rag_assets.holdout_chain import HOLDOUT, holdout_chain_job
from rag_assets.indexes import VectorIndex
from rag_assets.inputs import Corpus, QASet, source_files
from rag_assets.leaderboard import Leaderboard
from rag_assets.prompt_optimization import optimization_asset
from rag_assets.rerankings import Rerankings
from rag_assets.retrievals import Retrievals
from rag_assets.search_chain import CHAIN, search_chain_job
from rag_assets.stage_asset import StageLogic, stage_asset
from rag_core.planning.plan import Plan
from rag_core.planning.stages import STAGES

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

# The jobs that run several stages in one run (rag_assets/chains.py), by the name a runner's step gives
# them: the finalists' holdout and an adaptive search's rung. Each is built as `CHAINS[name](plan, LOGIC)`.
CHAINS = {HOLDOUT: holdout_chain_job, CHAIN: search_chain_job}


def stage_assets(plan: Plan) -> list:
    """The sweep's assets: with a holdout, the holdout's stages too (`holdout_<stage>`), partitioned by the
    finalists: Dagster's dynamic partitions, added when a leaderboard names them (sensors/holdout.py, the
    runner), so every partition shown is one meant to be materialized."""
    finalists = dg.DynamicPartitionsDefinition(name=plan.finalists_partitions)
    return [
        *source_files(plan),
        *(
            stage_asset(
                plan,
                s.name,
                LOGIC[s.name],
                dg.StaticPartitionsDefinition(plan.keys(s.name)) if s.partitioned else None,
            )
            for s in STAGES
            if s.name != "confirmation" or plan.holdout  # confirmed on a holdout only when there is one
        ),
        *(stage_asset(plan, name, LOGIC[name], finalists, held=True) for name in plan.holdout_partitions),
        champion_asset(plan),  # the recommendation, shipped to the model registry
        # prompt optimization (`optimize:`): its best prompts become configs of the plan
        *([optimization_asset(plan)] if plan.optimizable_keys else []),
    ]

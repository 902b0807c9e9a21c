"""A grid sweep in one run: the job `<sweep>__sweep`, a chain (chains.py) of its stages in order, from the
input snapshots (corpus, QA set) through every partitioned stage to the leaderboard, each op over all of
its stage's partitions, recording each as its asset's materialization (fingerprint, data version, checks).

What a deployment's user launches for a sweep (the UI's Launchpad, `dagster job launch`): "Materialize all"
takes a run per stage, each waiting for a backfill daemon tick and a run worker's start. After the chain's
leaderboard the holdout driver follows as after any leaderboard (sensors/holdout.py): the holdout's chain,
then the confirmation and the champion, three runs from the launch to the champion. The stages' eager
conditions ignore what a chain's run records (stage_asset.CHAIN_RUN_TAG): it computes the later stages itself.
"""

from __future__ import annotations

import dagster as dg

from rag_assets.chains import chain_job
from rag_assets.stage_asset import StageLogic
from rag_core.planning.plan import Plan
from rag_core.planning.stages import STAGES


def sweep_chain_name(plan: Plan) -> str:
    return f"{plan.prefix}__sweep"


def chained(plan: Plan) -> bool:
    """Whether the sweep has the chain: a grid sweep (an adaptive one launches its search, which chains its
    own steps) whose QA set is a file (a generated one is written by its own asset first)."""
    return not plan.sweep.search.adaptive and plan.sweep.qa_generation is None


def sweep_stages(plan: Plan) -> list[str]:
    """The chain's stages: all but the confirmation, which the holdout driver requests once the finalists'
    holdout is complete."""
    return [s.name for s in STAGES if s.name != "confirmation"]


def _keys_of(plan: Plan):
    def keys_of(context, name: str) -> list[str]:
        return plan.keys(name) if name in plan.partitions else []  # an unpartitioned stage: one step

    return keys_of


def sweep_chain_job(plan: Plan, logic: dict[str, StageLogic]) -> dg.JobDefinition:
    """`<sweep>__sweep`: the sweep's stages in one run, each over all its partitions."""
    names = sweep_stages(plan)
    return chain_job(
        plan,
        sweep_chain_name(plan),
        f"{plan.prefix}__sweep_chain",
        "The sweep's",
        names,
        logic,
        False,
        _keys_of(plan),
        f"Sweep {plan.sweep.name} in one run: {', '.join(names)}, each over all its partitions, recorded as "
        "the stages' assets' partitions; the holdout driver follows its leaderboard (holdout, confirmation, "
        "champion).",
    )

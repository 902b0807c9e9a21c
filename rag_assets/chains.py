"""Stages in one run: a job of ops, one per stage, each running its stage's batch (`StageSteps.batch`) over
the partitions its run names and recording them as materializations of the stage's asset (or its holdout
asset), with their fingerprints, metadata and checks, exactly as the asset's own batch does.

Why ops beside the assets: a batch records each partition itself (one data version per partition), so it
yields no output for the next asset of its run to read, and stages as assets take a run per stage: on a
deployment each costs a run worker's start and the wait for a sensor tick. Here each op reads what the one
before recorded, as the IO manager reads any materialization (a Nothing dependency orders them), so a chain
runs on any executor, the fleet's too. Three chains use it: a grid sweep's stages (sweep_chain.py), the
finalists' holdout (holdout_chain.py) and an adaptive search's steps (search_chain.py). An unpartitioned
stage in a chain (the input snapshots, the leaderboard) is one step, recorded as its asset's output would be.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from rag_assets.stage_asset import CHAIN_RUN_TAG, StageLogic, StageSteps, asset_key, queue_tags
from rag_core.decision.holdout import holdout_key
from rag_core.planning.plan import Plan
from rag_core.planning.stages import stage

# The partitions an op of a chain computes in its run, or why it computes none (a message).
KeysOf = Callable[[dg.OpExecutionContext, str], "list[str] | str"]


def _loaded(context, plan: Plan, name: str, held: bool, by_partition: bool = True):
    """An input of a chained stage as the IO manager gives it to the stage's asset: an unpartitioned input's
    latest artifact; a partitioned one's every materialized partition (the holdout's own stages: their
    holdout assets), each partition of the batch picking its own (`inputs_of`); for an unpartitioned stage
    (`by_partition` False: the leaderboard), those of the plan's partitions, as its asset's input mapping
    gives them (a partition a former spec had is not read)."""
    artifacts, instance = context.resources.artifacts, context.instance
    key = asset_key(plan, name, holdout_key("") if held and name in plan.holdout_partitions else None)
    if not stage(name).partitioned:
        return artifacts.latest(instance, key, name)
    latest = artifacts.latest_partitions(instance, key, name)
    if by_partition:
        return latest
    return {k: latest[k] for k in plan.keys(name) if k in latest}


def chain_op(
    plan: Plan, ops: str, what: str, name: str, logic: StageLogic, first: bool, held: bool, keys_of: KeysOf
) -> dg.OpDefinition:
    """The op `<ops>_<name>` of stage `name` in a chain (`what` the chain computes, for its description):
    its batch over `keys_of(context, name)`."""
    steps = StageSteps(plan, name, logic, held=held)

    @dg.op(
        name=f"{ops}_{name}",
        ins={} if first else {"after": dg.In(dg.Nothing)},
        out=dg.Out(dg.Nothing),
        required_resource_keys={"artifacts", *logic.resources},
        pool="llm" if plan.calls_llm(name) else None,
        tags=queue_tags(plan, name),
        description=f"{what} {name}: materializes {steps.key.to_user_string()}.",
    )
    def _op(context):
        keys = keys_of(context, name)
        if isinstance(keys, str):
            context.log.info(f"{name}: not asked ({keys})")
            return
        partitioned = stage(name).partitioned
        loaded = {r: _loaded(context, plan, r, held, partitioned) for r in stage(name).reads}
        results = steps.batch(context, loaded, keys) if partitioned else steps.single(context, loaded)
        for result in results:
            context.log_event(
                dg.AssetCheckEvaluation(
                    asset_key=result.asset_key,
                    check_name=result.check_name,
                    passed=result.passed,
                    metadata=result.metadata,
                    severity=result.severity,
                )
            )

    return _op


def chain_job(
    plan: Plan,
    job: str,
    ops: str,
    what: str,
    names: list[str],
    logic: dict[str, StageLogic],
    held: bool,
    keys_of: KeysOf,
    description: str,
) -> dg.JobDefinition:
    """The job `job`: the stages `names` in order, one op each (`<ops>_<stage>`), in one run."""
    chained = [chain_op(plan, ops, what, n, logic[n], i == 0, held, keys_of) for i, n in enumerate(names)]

    # the sweep's drivers wait while it runs; the stages' eager conditions ignore what it records
    @dg.job(name=job, description=description, tags={"sweep": plan.sweep.name, CHAIN_RUN_TAG: "true"})
    def _chain():
        done = None
        for op in chained:
            done = op() if done is None else op(after=done)

    return _chain

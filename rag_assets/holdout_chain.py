"""The finalists' holdout in one run: the job `<sweep>__holdout`, whose ops run the holdout's stages in
order (retrievals, rerankings, answers, evaluations) over the finalists the run names (`rag/partitions`),
each recording its partitions as materializations of its holdout asset (`holdout_<stage>`), with their
fingerprints, metadata and checks, exactly as the asset's own batch does (`StageSteps.batch`).

Why a job of ops beside the assets: a batch records each partition itself (one data version per partition),
so it yields no output for the next asset of its run to read, and the holdout as assets took a run per
stage: on a deployment each costs a run worker's start and the wait for a sensor tick, most of the time
from a leaderboard to its champion. Here each op reads what the one before recorded, as the IO manager
reads any materialization (a Nothing dependency orders them), so the chain runs on any executor, the
fleet's too. The holdout assets stay what the UI shows, materializes and backfills; this job is how the
holdout driver, the search driver, `rag-sweep run` and the nightly run them.
"""

from __future__ import annotations

import json

import dagster as dg

from rag_assets.batch import BATCH_TAG
from rag_assets.stage_asset import StageLogic, StageSteps, asset_key, queue_tags
from rag_core.decision.holdout import holdout_key
from rag_core.planning.plan import Plan
from rag_core.planning.stages import stage

HOLDOUT = "holdout"  # the chain among a runner's steps (runner/, fleet/step_jobs.py)


def chain_job_name(plan: Plan) -> str:
    return f"{plan.prefix}__holdout"


# The first holdout stage a chain run computes (default: the first): the stages before it are complete for
# its finalists (the nightly re-asks their answers and evaluations; a rerun after a new metric only those).
FROM_TAG = "rag/holdout_from"


def first_stage(plan: Plan, stages) -> str:
    """The first holdout stage among `stages` (those with steps due, any iterable): where a chain run starts."""
    due = set(stages)  # once: a generator read inside the search below would be spent after one stage
    return next(s for s in plan.holdout_partitions if s in due)


def chain_tags(keys, first: str | None = None) -> dict[str, str]:
    """The tags of a chain run over the finalists' holdout keys `keys`, from the holdout stage `first`."""
    return {BATCH_TAG: json.dumps(list(dict.fromkeys(keys))), **({FROM_TAG: first} if first else {})}


def chain_keys(context) -> list[str]:
    listed = context.run.tags.get(BATCH_TAG)
    if not listed:
        raise dg.Failure(f"a holdout chain run names its finalists' partitions in the tag {BATCH_TAG}")
    return json.loads(listed)


def _loaded(context, plan: Plan, name: str):
    """An input of a holdout stage as the IO manager gives it to the stage's asset: an unpartitioned input's
    latest artifact; a partitioned one's every materialized partition (the holdout's own stages: their
    holdout assets), each partition of the batch picking its own (`inputs_of`)."""
    artifacts, instance = context.resources.artifacts, context.instance
    held = name in plan.holdout_partitions
    key = asset_key(plan, name, holdout_key("") if held else None)
    if not stage(name).partitioned:
        return artifacts.latest(instance, key, name)
    return artifacts.latest_partitions(instance, key, name)


def _chain_op(plan: Plan, name: str, logic: StageLogic, first: bool) -> dg.OpDefinition:
    steps = StageSteps(plan, name, logic, held=True)

    @dg.op(
        name=f"{plan.prefix}__holdout_chain_{name}",
        ins={} if first else {"after": dg.In(dg.Nothing)},
        out=dg.Out(dg.Nothing),
        required_resource_keys={"artifacts", *logic.resources},
        pool="llm" if plan.calls_llm(name) else None,
        tags=queue_tags(plan, name),
        description=f"The finalists' holdout {name}: materializes {steps.key.to_user_string()}.",
    )
    def _op(context):
        order = list(plan.holdout_partitions)
        first = context.run.tags.get(FROM_TAG) or order[0]
        if first not in order:
            raise dg.Failure(f"{FROM_TAG}={first!r} is not a holdout stage ({', '.join(order)})")
        if order.index(name) < order.index(first):
            context.log.info(f"holdout {name}: not asked (the run starts at the holdout {first})")
            return
        loaded = {r: _loaded(context, plan, r) for r in stage(name).reads}
        for result in steps.batch(context, loaded, chain_keys(context)):
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


def holdout_chain_job(plan: Plan, logic: dict[str, StageLogic]) -> dg.JobDefinition:
    """`<sweep>__holdout`: the holdout's stages in one run, over the finalists its tag names."""
    names = list(plan.holdout_partitions)
    ops = [_chain_op(plan, n, logic[n], i == 0) for i, n in enumerate(names)]

    @dg.job(
        name=chain_job_name(plan),
        description=f"The finalists of sweep {plan.sweep.name} on the holdout: {', '.join(names)} in one run, "
        f"recorded as the holdout assets' partitions (the tag {BATCH_TAG} names the finalists).",
        tags={"sweep": plan.sweep.name},
    )
    def _chain():
        done = None
        for op in ops:
            done = op() if done is None else op(after=done)

    return _chain

"""The finalists' holdout in one run: the job `<sweep>__holdout`, a chain (chains.py) of the holdout's
stages in order (retrievals, rerankings, answers, evaluations) over the finalists the run names
(`rag/partitions`), each recording its partitions as materializations of its holdout asset
(`holdout_<stage>`). As assets the holdout took a run per stage, most of the time from a leaderboard to its
champion on a deployment. The holdout assets stay what the UI shows, materializes and backfills; this job
is how the holdout driver, the search driver, `rag-sweep run` and the nightly run them.
"""

from __future__ import annotations

import json

import dagster as dg

from rag_assets.batch import BATCH_TAG
from rag_assets.chains import chain_job
from rag_assets.stage_asset import StageLogic
from rag_core.planning.plan import Plan

HOLDOUT = "holdout"  # the chain among a runner's steps (rag_sweep/runner/, rag_sweep/fleet/step_jobs.py)


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


def _keys_of(plan: Plan):
    order = list(plan.holdout_partitions)

    def keys_of(context, name: str) -> list[str] | str:
        first = context.run.tags.get(FROM_TAG) or order[0]
        if first not in order:
            raise dg.Failure(f"{FROM_TAG}={first!r} is not a holdout stage ({', '.join(order)})")
        if order.index(name) < order.index(first):
            return f"the run starts at the holdout {first}"
        return chain_keys(context)

    return keys_of


def holdout_chain_job(plan: Plan, logic: dict[str, StageLogic]) -> dg.JobDefinition:
    """`<sweep>__holdout`: the holdout's stages in one run, over the finalists its tag names."""
    names = list(plan.holdout_partitions)
    return chain_job(
        plan,
        chain_job_name(plan),
        f"{plan.prefix}__holdout_chain",
        "The finalists' holdout",
        names,
        logic,
        True,
        _keys_of(plan),
        f"The finalists of sweep {plan.sweep.name} on the holdout: {', '.join(names)} in one run, "
        f"recorded as the holdout assets' partitions (the tag {BATCH_TAG} names the finalists).",
    )

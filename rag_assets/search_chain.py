"""An adaptive search's steps in one run: the job `<sweep>__search_chain`, a chain (chains.py) of the sweep's
partitioned stages in order (chunksets ... evaluations), each op over the partitions of its stage that the
run names (`rag/chain`: stage -> keys; a stage it does not name is skipped). The search driver requests a
rung's steps as one run of it (sensors/search.py): a config's steps from its first due stage to its
evaluation, where a run per stage cost a run worker's start and a sensor tick each.
"""

from __future__ import annotations

import json

import dagster as dg

from rag_assets.chains import chain_job
from rag_assets.stage_asset import StageLogic
from rag_core.planning.plan import Plan

CHAIN = "chain"  # the search's chain among its step jobs (sensors/search.py)
CHAIN_TAG = "rag/chain"  # JSON {stage: [partition keys]}: what a run of the chain computes


def chain_tags(steps) -> dict[str, str]:
    """The tag of a chain run over `steps` ((stage, key) pairs): each stage's keys, once, in order."""
    keys: dict[str, list[str]] = {}
    for name, key in steps:
        if key not in (group := keys.setdefault(name, [])):
            group.append(key)
    return {CHAIN_TAG: json.dumps(keys)}


def _keys_of(context, name: str) -> list[str] | str:
    listed = context.run.tags.get(CHAIN_TAG)
    if not listed:
        raise dg.Failure(f"a search chain run names its steps in the tag {CHAIN_TAG}")
    keys = json.loads(listed).get(name)
    return keys if keys else "the run names no partition of it"


def search_chain_job(plan: Plan, logic: dict[str, StageLogic]) -> dg.JobDefinition:
    """`<sweep>__search_chain`: the partitioned stages in one run, over the partitions its tag names."""
    names = list(plan.partitions)
    return chain_job(
        plan,
        f"{plan.prefix}__search_chain",
        f"{plan.prefix}__search_chain",
        "A search's",
        names,
        logic,
        False,
        _keys_of,
        f"Steps of the search of sweep {plan.sweep.name}: {', '.join(names)} in one run, each over the "
        f"partitions the tag {CHAIN_TAG} names (requested by its sensor).",
    )

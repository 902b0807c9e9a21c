"""A sweep's step (one stage, one partition) as a Dagster job whose executor is Celery.

The runner publishes the sweep's resolved plan to the data dir once (`publish_plan`); a step's job is
named by (data dir, plan name, stage), plain strings Dagster sends with each task, and every worker
rebuilds it from them (`step_job`) with its own resources, read from its own environment: the sweep
file, its input files and the runner's disk are never needed on a worker.

The plan file is data, never code: JSON (rag_assets.orchestration.plans.plan_document) from which the worker resolves the
plan as the runner did, named by the SHA-256 of its bytes, which the worker checks before reading it.
Whoever can write the data dir (or bucket) can make a step fail, but cannot make a worker run code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

import dagster as dg
from dagster_celery import celery_executor

from rag_assets.orchestration.plans import plan_document, plan_from_document
from rag_assets.stage_asset import asset_key
from rag_assets.sweep_assets import stage_assets
from rag_core.planning.plan import Plan
from rag_sweep.fleet.celery_app import CELERY_SETTINGS
from resources import build_resources
from resources.environment import celery_broker_url
from resources.storage import atomic_write_bytes, data_root

PLANS = "fleet/plans"


class PlanFileError(RuntimeError):
    """A published plan a worker refuses: missing, changed since the runner wrote it, or not a plan."""


def plan_file(plan: Plan) -> bytes:
    """The plan's file (JSON), checked to resolve back to this very plan."""
    # the plan's own key order, not sorted: the order of the weights is the order the overall score sums
    # in, and a worker summing in another order scored exact ties a last bit apart (p-values moved)
    blob = json.dumps(plan_document(plan), separators=(",", ":")).encode()
    if plan_from_document(json.loads(blob)) != plan:
        raise ValueError(
            f"{plan.sweep.path}: the plan does not resolve to itself from its file (a local model changed "
            "while it loaded?): run again"
        )
    return blob


def publish_plan(plan: Plan, data_dir: str) -> str:
    """Write the plan where every worker reads it; its name is the SHA-256 of its bytes."""
    blob = plan_file(plan)
    name = hashlib.sha256(blob).hexdigest()
    path = plan_path(data_dir, name)
    if not path.exists() or path.read_bytes() != blob:  # (a damaged copy is replaced)
        atomic_write_bytes(path, blob)
    return name


def plan_path(data_dir: str, name: str):
    if not re.fullmatch(r"[0-9a-f]{64}", name):
        raise PlanFileError(f"{name!r} names no published plan (a SHA-256 in hex)")
    return data_root(data_dir) / PLANS / f"{name}.json"


@functools.cache
def read_plan(data_dir: str, name: str) -> Plan:
    """The published plan `name`: its file's bytes must hash to its name, else it is refused unread."""
    path = plan_path(data_dir, name)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise PlanFileError(f"{path}: no such plan (the runner publishes it before any step)") from None
    if (found := hashlib.sha256(blob).hexdigest()) != name:
        raise PlanFileError(
            f"{path}: refused: its content is not the plan the runner published under this name (its "
            f"SHA-256 is {found}): the file was changed after it was written"
        )
    try:
        return plan_from_document(json.loads(blob))
    except ValueError as e:  # (json's errors are ValueErrors)
        raise PlanFileError(f"{path}: {e}") from None


def fleet_executor() -> dg.ExecutorDefinition:
    """Dagster's Celery executor on $CELERY_BROKER_URL; configured in code, so the broker's credentials
    never enter a run's config (which the instance stores). (Its loop looks at the steps' results every
    second, dagster-celery's own interval: a step's run may wait up to a second after its worker ends.)"""
    return celery_executor.configured(
        {"broker": celery_broker_url(), "backend": "rpc://", "config_source": CELERY_SETTINGS}
    )


@functools.cache
def step_job(data_dir: str, plan_name: str, stage: str) -> dg.JobDefinition:
    """The job that materializes one stage's partition (the run's partition tag says which); `stage`: the
    asset's name (a holdout stage's: `holdout_<stage>`), `holdout`: the holdout's chain, or `chain`: the
    search's."""
    from rag_assets.sweep_assets import CHAINS, LOGIC

    plan = read_plan(data_dir, plan_name)
    if chain := CHAINS.get(stage):
        job = chain(plan, LOGIC)
        defs = dg.Definitions(
            assets=stage_assets(plan),
            resources=build_resources(data_dir),
            jobs=[job],
            executor=fleet_executor(),
        )
        return defs.resolve_job_def(job.name)
    name = f"{plan.prefix}__{stage}"
    defs = dg.Definitions(
        assets=stage_assets(plan),
        resources=build_resources(data_dir),
        jobs=[dg.define_asset_job(name, selection=[asset_key(plan, stage)], executor_def=fleet_executor())],
    )
    return defs.resolve_job_def(name)


def reconstructable_step(data_dir: str, plan_name: str, stage: str):
    """`step_job(...)` as Dagster sends it to a worker: this module, that function, these arguments."""
    return dg.build_reconstructable_job(__name__, "step_job", (data_dir, plan_name, stage))

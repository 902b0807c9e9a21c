"""A sweep's step (one stage, one partition) as a Dagster job whose executor is Celery.

The runner publishes the sweep's resolved plan to the data dir once (`publish_plan`); a step's job is
named by (data dir, plan name, stage), plain strings Dagster sends with each task, and every worker
rebuilds it from them (`step_job`) with its own resources, read from its own environment: the sweep
file, its input files and the runner's disk are never needed on a worker.
"""

from __future__ import annotations

import functools
import hashlib
import pickle

import dagster as dg
from dagster_celery import celery_executor

from fleet.celery_app import CELERY_SETTINGS
from rag_assets.stage_asset import asset_key
from rag_assets.sweep_assets import stage_assets
from rag_core.planning.plan import Plan
from resources import build_resources
from resources.environment import celery_broker_url
from resources.storage import atomic_write_bytes, data_root

PLANS = "fleet/plans"


def publish_plan(plan: Plan, data_dir: str) -> str:
    """Write the plan where every worker reads it; its name is its content hash (written once)."""
    blob = pickle.dumps(plan)
    name = hashlib.sha256(blob).hexdigest()[:24]
    path = data_root(data_dir) / PLANS / f"{name}.pkl"
    if not path.exists():
        atomic_write_bytes(path, blob)
    return name


@functools.cache
def _plan(data_dir: str, name: str) -> Plan:
    # the data dir is the deployment's own (as trusted as its code): a plan is the runner's pickle
    return pickle.loads((data_root(data_dir) / PLANS / f"{name}.pkl").read_bytes())


def fleet_executor() -> dg.ExecutorDefinition:
    """Dagster's Celery executor on $CELERY_BROKER_URL; configured in code, so the broker's credentials
    never enter a run's config (which the instance stores)."""
    return celery_executor.configured(
        {"broker": celery_broker_url(), "backend": "rpc://", "config_source": CELERY_SETTINGS}
    )


@functools.cache
def step_job(data_dir: str, plan_name: str, stage: str) -> dg.JobDefinition:
    """The job that materializes one stage's partition (the run's partition tag says which)."""
    plan = _plan(data_dir, plan_name)
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

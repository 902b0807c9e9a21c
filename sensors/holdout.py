"""The holdout of a grid sweep on a deployment: after its leaderboard, the finalists scored on the
questions no selection step saw, then the confirmation, then the champion, with no CLI anywhere.

What the leaderboard decides (its finalists) is data, not a dependency Dagster can see. So this sensor, every
`interval_s` while the sweep is quiet (no run or backfill of its assets in flight):
- adds the finalists' partitions to the holdout's assets (`holdout_<stage>`, partitioned by the finalists)
  and requests the holdout's chain for those not complete: one run of `<sweep>__holdout` through every
  holdout stage, from the first one missing (rag_assets/holdout_chain.py);
- once every finalist's holdout evaluation is complete for the current leaderboard, requests the
  confirmation and the champion, one run (rag_assets/champion.py).
Each request's run key names the leaderboard's materialization, so a leaderboard is confirmed once, and
a new one (a nightly re-evaluation, changed inputs) is confirmed again; a run that failed or was canceled
is asked again, up to MAX_ATTEMPTS runs per step and leaderboard. An adaptive sweep's search driver
does the same for its own leaderboard (sensors/search.py).
"""

from __future__ import annotations

import json
import time

import dagster as dg

from rag_assets.champion import CHAMPION
from rag_assets.holdout_chain import chain_tags, first_stage
from rag_assets.orchestration.todo import holdout_steps, new_finalists
from rag_assets.stage_asset import asset_key
from rag_core.planning.plan import Plan
from resources.environment import default_data_dir
from resources.storage import data_root
from resources.vector_stores import VectorStores
from sensors import DRIVER_RUN_TAGS, seen_lately

LIVE = (
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
)
HOLDOUT_TAG = "rag/holdout"  # the leaderboard materialization (its storage id) a holdout run confirms
STEP_TAG = "rag/holdout_step"  # which of its runs: the first holdout stage, or the confirmation
MAX_ATTEMPTS = 3  # runs of one step for one leaderboard before the driver stops asking
ENDED_BADLY = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


def holdout_jobs(plan: Plan, chain: dg.JobDefinition) -> dict:
    """The holdout's chain (`<sweep>__holdout`) and `<sweep>__holdout_step_confirmation`: the confirmation and
    the champion, in one run."""
    return {
        "holdout": chain,
        "confirmation": dg.define_asset_job(
            f"{plan.prefix}__holdout_step_confirmation",
            selection=[asset_key(plan, "confirmation"), asset_key(plan, CHAMPION)],
            description=f"The confirmation of sweep {plan.sweep.name}'s last leaderboard on the holdout, and "
            "the champion it decides; requested by its holdout driver.",
        ),
    }


def sweep_busy(instance, plan: Plan) -> str | None:
    """What of the sweep is in flight (a run or a backfill of its assets), else None."""
    prefix = plan.prefix
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=list(LIVE)), limit=200):
        keys = run.asset_selection or set()
        if any(k.path[0] == prefix for k in keys) or run.tags.get("sweep") == plan.sweep.name:
            return f"run {run.run_id}"
    for backfill in instance.get_backfills(filters=None, limit=50):
        if backfill.status.value != "REQUESTED":  # Dagster's BulkActionStatus, by its value
            continue
        keys = backfill.asset_selection or []
        if any(k.path[0] == prefix for k in keys):
            return f"backfill {backfill.backfill_id}"
    return None


def _latest(instance, key: dg.AssetKey):
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1).records
    return records[0] if records else None


def next_holdout_request(
    plan: Plan, instance, data, stores, jobs: dict
) -> tuple[dg.RunRequest | str, list[str]]:
    """The run the holdout needs next, or why there is none; and the finalists' partitions to add first
    (a leaderboard's finalists appear as partitions of the holdout's assets when it names them)."""
    board = _latest(instance, asset_key(plan, "leaderboard"))
    if board is None:
        return "no leaderboard yet", []
    confirmed = _latest(instance, asset_key(plan, "confirmation"))
    board_newer = confirmed is None or confirmed.storage_id < board.storage_id
    held = holdout_steps(plan, instance, data, False, board_newer, stores)
    if not held:
        return "the leaderboard is confirmed", []
    tags = {"sweep": plan.sweep.name, HOLDOUT_TAG: str(board.storage_id)}
    if keys := [k for s, k in held if s != "confirmation"]:  # the finalists not complete: one chain run
        first = first_stage(plan, (s for s, _ in held))
        return _attempt(
            instance,
            board.storage_id,
            "holdout",
            job_name=jobs["holdout"].name,
            tags={**tags, **chain_tags(keys, first)},
        ), new_finalists(plan, instance, held)
    return _attempt(
        instance, board.storage_id, "confirmation", job_name=jobs["confirmation"].name, tags=tags
    ), []


def _attempt(instance, board_id: int, step: str, tags: dict, **request) -> dg.RunRequest | str:
    """The run of `step` for the leaderboard `board_id`: a failed or canceled one is asked again (a new run
    key) up to MAX_ATTEMPTS runs, then the driver says why it stopped asking instead."""
    tags = {**tags, STEP_TAG: step, **DRIVER_RUN_TAGS}
    failed = instance.get_runs(
        filters=dg.RunsFilter(tags={HOLDOUT_TAG: str(board_id), STEP_TAG: step}, statuses=ENDED_BADLY)
    )
    if len(failed) >= MAX_ATTEMPTS:
        return (
            f"the holdout's {step} failed {len(failed)} times for this leaderboard (last: run "
            f"{failed[0].run_id}): fix the cause and launch {request['job_name']} again, or a new leaderboard "
            "asks again"
        )
    suffix = f":attempt{len(failed) + 1}" if failed else ""
    return dg.RunRequest(run_key=f"holdout:{board_id}:{step}{suffix}", tags=tags, **request)


def holdout_driver(plan: Plan, jobs: dict, data_dir: str | None = None, interval_s: int = 2):
    @dg.sensor(
        name=f"{plan.prefix}__holdout_driver",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"After each leaderboard of sweep {plan.sweep.name}: its finalists on the holdout, then "
        "the confirmation (the champion follows it).",
    )
    def _driver(context: dg.SensorEvaluationContext):
        # while the instance has stored no event (no run started or ended, nothing materialized) the answer
        # is the last one: said again without asking (~30 queries, each a new connection on PostgreSQL),
        # and asked again at least every RECHECK_S (an artifact deleted from the data dir is no event)
        events = context.instance.event_log_storage.get_maximum_record_id()
        last = json.loads(context.cursor) if context.cursor else {}
        if seen_lately(last, "events", events):
            return dg.SkipReason(last["skipped"])
        if busy := sweep_busy(context.instance, plan):
            found, added = f"waiting for {busy}", []
        else:
            data = data_root(data_dir or default_data_dir())
            found, added = next_holdout_request(
                plan, context.instance, data, VectorStores.from_env(str(data)), jobs
            )
        if not isinstance(found, dg.RunRequest):
            context.update_cursor(json.dumps({"events": events, "at": time.time(), "skipped": found}))
            return dg.SkipReason(found)
        context.update_cursor(None)
        # Dagster adds the partitions before it launches the run
        new = [dg.AddDynamicPartitionsRequest(plan.finalists_partitions, added)] if added else []
        return dg.SensorResult(run_requests=[found], dynamic_partitions_requests=new)

    return _driver

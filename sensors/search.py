"""An adaptive search (halving, bayesian) on a deployment: the `<sweep>__search` job starts or continues it
(its budget as run config), and this sensor drives it. At each tick the search's controller
(rag_assets/orchestration/search.py) replays the search against what is complete and names the steps it needs next; the
sensor requests each as an ordinary run (the step's asset and partition, tagged with the search), through
the run queue, so whatever run launcher and executor the deployment has carry it. When the search reports,
the leaderboard is requested, then the finalists' holdout partitions and the confirmation.

The state is the search's file in the data dir and the search's tagged runs in the instance: a daemon that
dies and restarts, or a search started twice, continues; a step already requested (queued, running or
done) is never requested again (its run key is the search's and the step's).
"""

import hashlib
import json
import time
from pathlib import Path

import dagster as dg

from rag_assets.champion import CHAMPION
from rag_assets.holdout_chain import HOLDOUT, chain_tags, first_stage
from rag_assets.orchestration.search import (
    SEARCH_TAG,
    RungStep,
    SearchController,
    SearchState,
    batch_tags,
    begin_search,
    runs_of,
)
from rag_assets.orchestration.todo import completed, holdout_steps, new_finalists, stale_snapshots
from rag_assets.search_chain import CHAIN, search_chain_job
from rag_assets.search_chain import chain_tags as search_chain_tags
from rag_assets.stage_asset import asset_key
from rag_core.decision.holdout import is_holdout_key
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
FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
# A run lost without its step failing (a worker that never started or died with its machine, failed by
# the instance's run monitoring) is asked again, this many times.
MAX_LOST = 2


def _step_failed(instance, run_id: str) -> bool:
    """Whether the run failed in its step (the step raised), rather than around it."""
    return bool(
        instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE, limit=1).records
    )


class SearchBudget(dg.Config):
    """The run config of a search job: overrides of the sweep's `search.budget` (empty: the sweep's)."""

    max_configs: int | None = None
    max_index_builds: int | None = None
    max_llm_calls: int | None = None
    max_cost_usd: float | None = None
    restart: bool = False  # start anew: every step computed again (as `rag-sweep run --force`)


def search_job(plan: Plan, data_dir: str | None = None) -> dg.JobDefinition:
    """`<sweep>__search`: start the sweep's search (or continue it, with this budget); the sensor
    `<sweep>__search_driver` then requests its runs."""

    @dg.op(name=f"{plan.prefix}__start_search", required_resource_keys={"vector_stores"})
    def start_search(context: dg.OpExecutionContext, config: SearchBudget) -> None:
        data = data_root(data_dir or default_data_dir())
        budget = {k: v for k, v in config.model_dump().items() if k != "restart" and v is not None}
        complete = completed(plan, context.instance, data, stores=context.resources.vector_stores)
        state = begin_search(plan, data, complete, config.restart, budget)
        context.log.info(
            f"search {state.id} of sweep {plan.sweep.name} ({plan.sweep.search.strategy}) is running: "
            f"sensor {plan.prefix}__search_driver requests its steps as runs tagged rag/search={state.id}"
        )

    @dg.job(
        name=f"{plan.prefix}__search",
        description=f"Run the {plan.sweep.search.strategy} search of sweep {plan.sweep.name}: its budget as "
        "run config; the search continues where it was (a relaunch never evaluates a config twice).",
        tags={"sweep": plan.sweep.name},
    )
    def _job():
        start_search()

    return _job


SNAPSHOTS = ("corpus", "qa_set")  # one run for both, as `rag-sweep run` snapshots them


def _job_of(stage: str, key: str | None = None) -> str:
    """The job of a step: the snapshots' for both input snapshots, the holdout's chain for a holdout key
    (every holdout stage of the finalists, one run), the leaderboard's and the confirmation's, else the
    search's chain (a rung's steps of every partitioned stage, one run)."""
    if stage in SNAPSHOTS:
        return "snapshots"
    if is_holdout_key(key or ""):
        return HOLDOUT
    return stage if stage in ("leaderboard", "confirmation") else CHAIN


def step_jobs(plan: Plan, chain: dg.JobDefinition | None = None) -> dict:
    """The jobs of a search's steps: its chain `<sweep>__search_chain` (rag_assets/search_chain.py: a rung's
    steps of every partitioned stage, one run), `<sweep>__search_leaderboard`, `<sweep>__search_confirmation`
    (with the champion, which follows it) and the input snapshots' `<sweep>__search_snapshots` (both);
    `chain`: the holdout's."""
    from rag_assets.sweep_assets import LOGIC

    stages = ["leaderboard", *(["confirmation"] if plan.holdout else [])]
    jobs = {
        s: dg.define_asset_job(
            f"{plan.prefix}__search_{s}",
            selection=[asset_key(plan, s), *([asset_key(plan, CHAMPION)] if s == "confirmation" else [])],
            description=f"A {s} step of the search of sweep {plan.sweep.name}, requested by its sensor.",
        )
        for s in stages
    }
    jobs[CHAIN] = search_chain_job(plan, LOGIC)
    if chain is not None:  # the finalists' holdout, after the search
        jobs[HOLDOUT] = chain
    jobs["snapshots"] = dg.define_asset_job(
        f"{plan.prefix}__search_snapshots",
        selection=[asset_key(plan, s) for s in SNAPSHOTS],
        description=f"The input snapshots of the search of sweep {plan.sweep.name}, requested by its sensor.",
    )
    return jobs


def search_driver(
    plan: Plan, jobs: dict, data_dir: str | None = None, interval_s: int = 2
) -> dg.SensorDefinition:
    """`<sweep>__search_driver`: every `interval_s`, the steps the running search needs next, as runs."""

    @dg.sensor(
        name=f"{plan.prefix}__search_driver",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Drives the search that the job {plan.prefix}__search started: requests the steps it "
        "needs next as runs, observes the evaluations as they complete, stops at the budget.",
    )
    def _driver(context: dg.SensorEvaluationContext):
        data = data_root(data_dir or default_data_dir())
        state = SearchState.load(data, plan.sweep.name)
        if state is None or state.status != "running":
            return dg.SkipReason(f"no search running ({state.status if state else 'none started'})")
        # while its runs are in flight and none changed status, the search's next steps are what they were:
        # not replayed at every tick (the replay reads every rung's completeness), only every RECHECK_S
        seen, live = _runs_seen(context.instance, state)
        last = json.loads(context.cursor) if context.cursor else {}
        if live and seen_lately(last, "seen", seen):
            return dg.SkipReason(f"search {state.id}: waiting for {live} run(s)")
        context.update_cursor(json.dumps({"seen": seen, "at": time.time()}))
        requests, waiting, why, added = next_requests(plan, data, context.instance, state, jobs)
        if why:
            state.finish("failed", why)
            return dg.SkipReason(why)
        if not requests and not waiting:
            state.finish("done", "the leaderboard is up to date")
            return dg.SkipReason(f"search {state.id} is done")
        if not requests:
            return dg.SkipReason(f"search {state.id}: waiting for {waiting} run(s)")
        # the finalists' partitions of the holdout's assets, added before the runs that need them launch
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[dg.AddDynamicPartitionsRequest(plan.finalists_partitions, added)]
            if added
            else [],
        )

    return _driver


def _runs_seen(instance, state: SearchState) -> tuple[str, int]:
    """(a digest of the search's runs and their statuses, how many of them are in flight)."""
    records = instance.get_run_records(filters=dg.RunsFilter(tags={SEARCH_TAG: state.id}))
    statuses = sorted((r.dagster_run.run_id, r.dagster_run.status.value) for r in records)
    seen = json.dumps([state.id, state.resumed, statuses])
    live = sum(r.dagster_run.status in LIVE for r in records)
    return hashlib.sha256(seen.encode()).hexdigest()[:16], live


def _after(runs: dict, step: RungStep, t: float) -> bool:
    """Whether a run of `step` succeeded that started after time `t`."""
    return any(
        r.dagster_run.status == dg.DagsterRunStatus.SUCCESS and r.create_timestamp.timestamp() > t
        for r in runs.get(step, [])
    )


def _selection(step: RungStep) -> bool:
    """A step of the search itself (not the leaderboard's, nor the holdout's that follow it)."""
    stage, key, _ = step
    return stage not in ("leaderboard", "confirmation") and not is_holdout_key(key or "")


def next_requests(
    plan: Plan, data: Path, instance, state: SearchState, jobs: dict
) -> tuple[list, int, str, list[str]]:
    """(the runs to request now, how many of the search's runs are in flight, why the search cannot go on,
    the finalists' partitions of the holdout's assets to add for them)."""
    stores = VectorStores.from_env(str(data))
    runs = runs_of(instance, state)
    # the input files as they are now, first (as `rag-sweep run` snapshots them once, before its steps): hashed
    # until the search's first step past the snapshots, not on every tick of a running search
    started = any(s[0] not in SNAPSHOTS for s in runs)
    if not started and (stale := stale_snapshots(plan, instance, data)):
        steps: list[RungStep] = [(name, None, None) for name in stale]  # one run (`_job_of`)
        advance = None
    else:
        advance = SearchController(plan, data, instance, state, stores).advance()
        steps = advance.steps
    over = advance is not None and advance.report is not None
    if over:  # the search is over: rank what it evaluated, then confirm on the holdout
        board: RungStep = ("leaderboard", None, None)
        last = max(  # the leaderboard must rank every evaluation of the search: requested after the last
            (r.create_timestamp.timestamp() for s, rs in runs.items() if _selection(s) for r in rs),
            default=0.0,
        )
        if not _after(runs, board, last):
            steps = [board]
        elif plan.holdout:
            ranked = max(r.create_timestamp.timestamp() for r in runs[board])
            held = holdout_steps(plan, instance, data, state.force, True, stores)
            # the finalists' holdout steps (one run of the holdout's chain), the confirmation last
            todo = [(s, k, None) for s, k in held if not _after(runs, (s, k, None), ranked)]
            steps = [t for t in todo if t[0] != "confirmation"] or todo
    ready, waiting, live = [], 0, []
    for step in steps:
        mine = runs.get(step, [])
        # in flight, or reading what is: a stage's key extends its upstream's (a run of the search's chain
        # computes a config's later steps too, so one proposed beside it waits for that run to end)
        if any(r.dagster_run.status in LIVE for r in mine) or any(
            step[1] and step[1].startswith(f"{k}__") for k in live
        ):
            waiting += 1
            live.append(step[1])
            continue
        failed = [r for r in mine if r.dagster_run.status in FAILED]
        lost = [r for r in failed if not _step_failed(instance, r.dagster_run.run_id)]
        if len(lost) > MAX_LOST or any(
            r.create_timestamp.timestamp() > state.resumed for r in failed if r not in lost
        ):
            stage, key, _ = step  # the user decides: launching the search job again retries the step
            run_id = failed[-1].dagster_run.run_id
            return (
                [],
                waiting,
                f"{stage}[{key}] failed (run {run_id}); launch the search job again to retry it",
                [],
            )
        ready.append((step, len(mine)))
    added = new_finalists(plan, instance, [(s, k) for (s, k, _), _ in ready])
    return batched_requests(plan, state, jobs, ready), waiting, "", added


def batched_requests(plan: Plan, state: SearchState, jobs: dict, ready: list) -> list[dg.RunRequest]:
    """The steps as runs: a rung's steps of the partitioned stages in one run of the search's chain, the
    finalists' holdout steps in one of the holdout's, the input snapshots in one, the leaderboard and the
    confirmation each in its own. A step asked again (`tries`) gets a new run key."""
    groups: dict[tuple, list] = {}
    for (stage, key, n), tries in ready:
        groups.setdefault((_job_of(stage, key), n), []).append((stage, key, tries))
    requests = []
    for (job, n), found in groups.items():
        tries = max(t for _, _, t in found)
        steps = [(s, k, n) for s, k, _ in found]
        digest = hashlib.sha256(json.dumps(steps).encode()).hexdigest()[:12]
        tags = {"sweep": plan.sweep.name, **batch_tags(state, steps), **DRIVER_RUN_TAGS}
        if job == HOLDOUT:  # every holdout stage's steps of the finalists, from the first one asked
            tags |= chain_tags([k for _, k, _ in found], first_stage(plan, (s for s, _, _ in found)))
        elif job == CHAIN:  # a rung's steps, every stage of them, in order
            tags |= search_chain_tags((s, k) for s, k, _ in found)
        requests.append(
            dg.RunRequest(
                run_key=f"{state.id}:{job}:{n}:{digest}:{tries}",
                job_name=jobs[job].name,
                # the snapshots' job: only the stale ones
                asset_selection=[asset_key(plan, s) for s, _, _ in found] if job == "snapshots" else None,
                tags=tags,
            )
        )
    return requests

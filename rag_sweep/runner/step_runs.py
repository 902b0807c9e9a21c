"""How a sweep run materializes a step (one stage, one partition) as a Dagster run: in this process, one
step after the other (the embedded default), or on a worker fleet through Dagster's Celery executor
(rag_sweep/fleet/), several steps at once, each as soon as the partitions it reads are complete
(rag_core/planning/step_graph.py).

On a fleet this process only orchestrates: each step's run waits here for its Celery task while a worker
executes the step, so a run in flight costs a thread, not a core.
"""

from __future__ import annotations

import logging
import sys
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from dagster import DagsterExecutionInterruptedError, DagsterExecutionStepExecutionError

from rag_assets.stage_asset import asset_key
from rag_core.planning.batches import steps_in
from rag_sweep.runner.errors import CheckFailed, StepFailed
from rag_sweep.runner.interrupts import interrupts_kept
from resources.dagster_private import DagsterAssetCheckFailedError

# Steps a fleet run keeps in flight: the broker queues them until a worker is free, so this only bounds
# the threads (and database connections) this process spends waiting on them.
IN_FLIGHT = 16
# Without `verbose` Dagster's console stays silent: warnings are returned one per line after each step, and a
# failed step raised as one line (file, row, field), its traceback kept for --verbose.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _warnings(instance, run_id: str, where: str) -> list[str]:
    """The step's warning logs and its failed checks (a WARN check, such as nightly_drift, stops nothing
    but says something the user must see), one line each."""
    lines = []
    stage = where.split("[", 1)[0]
    for entry in instance.all_logs(run_id):
        if entry.level >= logging.WARNING and not entry.is_dagster_event:
            message = entry.user_message
            # a batch's partitions name themselves (`stage[key]: ...`, rag_assets/stage_asset.py)
            said = message if message.startswith(f"{stage}[") else f"{where}: {message}"
            lines.append(f"warning: {said}")
        elif (
            entry.is_dagster_event
            and entry.dagster_event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
        ):
            check = entry.dagster_event.event_specific_data
            if not check.passed:
                lines.append(f"warning: {where}: check {check.check_name!r} failed: {_check_says(check)}")
    return lines


def _check_says(check) -> str:
    """What a failed check's metadata says, in a line: its message or verdict, else every entry."""
    meta = {k: getattr(v, "value", v) for k, v in check.metadata.items()}
    for key in ("message", "verdict"):
        if meta.get(key):
            return str(meta[key])
    return ", ".join(f"{k}={v}" for k, v in meta.items())


def batch_run(plan, stage: str, key, instance=None) -> tuple[str | None, dict[str, str], str]:
    """How a run targets a step or a batch (a tuple of keys): its partition key, or the range its keys
    span (rag_assets.batch.range_tags; `instance` holds the holdout's partitions), and how messages name it."""
    from rag_assets.batch import range_tags
    from rag_assets.holdout_chain import HOLDOUT, chain_tags
    from rag_assets.search_chain import CHAIN
    from rag_assets.search_chain import chain_tags as search_chain_tags

    if stage == HOLDOUT:  # the holdout's chain over the finalists (rag_assets/holdout_chain.py)
        keys = [key] if isinstance(key, str) else list(key)
        return None, chain_tags(keys), f"the holdout of {len(keys)} finalist(s)"
    if stage == CHAIN:  # a search's steps, (stage, key) pairs, in one run (rag_assets/search_chain.py)
        return None, search_chain_tags(key), f"{len(key)} step(s) of the search"
    if not key or isinstance(key, str):  # one partition, or an unpartitioned stage (None, an empty batch)
        return key or None, {}, f"{stage}[{key}]" if key else stage
    if len(key) == 1:
        return key[0], {}, f"{stage}[{key[0]}]"
    return None, range_tags(plan, stage, key, instance), f"{stage}[{len(key)} partitions]"


def step_job_name(plan, keys) -> str:
    """`<sweep>__<stage>` (the asset's name; several: joined by `_and_`): how the Dagster UI names a run
    of the CLI, as a fleet's step job (rag_sweep/fleet/step_jobs.py) and the chains are named."""
    return f"{plan.prefix}__" + "_and_".join(k.path[-1] for k in keys)


def first_key(key) -> str | None:
    """A step's partition key, or a batch's first (its keys are all of one asset)."""
    return key if not key or isinstance(key, str) else key[0]


def _raise_failed_checks(result, where: str) -> None:
    for check in result.get_asset_check_evaluations():
        if not check.passed and check.blocking and check.severity == dg.AssetCheckSeverity.ERROR:
            raise CheckFailed(f"{where}: check {check.check_name!r} failed: {_check_says(check)}")


def _blocking_check_failed(instance, where: str) -> CheckFailed:
    """What the latest run's failed blocking check says (the run this process just made: one run per data
    dir at a time), as CheckFailed."""
    run = instance.get_runs(limit=1)[0]
    for record in instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records:
        check = record.event_log_entry.dagster_event.event_specific_data
        if not check.passed and check.blocking and check.severity == dg.AssetCheckSeverity.ERROR:
            return CheckFailed(f"{where}: check {check.check_name!r} failed: {_check_says(check)}")
    return CheckFailed(f"{where}: a blocking check failed (run {run.run_id})")


@dataclass
class StepRunner:
    """Materializes one step of the plan's sweep as a Dagster run on `instance`; returns the warnings its
    step logged (one line each), raises StepFailed or CheckFailed (rag_sweep/runner/errors.py)."""

    defs: Any
    instance: Any
    tags: dict[str, str]
    verbose: bool
    plan: Any
    assets: list = field(init=False)
    jobs: dict = field(init=False, default_factory=dict)

    def __post_init__(self):
        self.assets = list(self.defs.assets)

    def job(self, selection: list) -> dg.JobDefinition:
        """The step's job, named by its sweep and stage: `dg.materialize` would name every run
        `__ephemeral_asset_job__`, which tells nothing apart in the UI."""
        name = step_job_name(self.plan, selection)
        if name not in self.jobs:
            defs = dg.Definitions(
                assets=self.assets,
                resources=self.defs.resources,
                jobs=[dg.define_asset_job(name, selection=selection)],
            )
            self.jobs[name] = defs.resolve_job_def(name)
        return self.jobs[name]

    def __call__(self, stage, key=None, extra_tags: dict | None = None) -> list[str]:
        """`key`: a partition key, or a tuple of them (a batch); `stage`: a stage, or a tuple of
        unpartitioned ones (the input snapshots: one run for them all), `holdout` (the holdout's chain
        over the finalists `key`) or `chain` (the search's chain over `key`'s (stage, key) pairs)."""
        from rag_assets.sweep_assets import CHAINS, LOGIC

        stages = stage if isinstance(stage, tuple) else (stage,)
        chain = CHAINS.get(stage)
        asset = None if chain else first_key(key)  # a holdout batch: the stage's holdout asset
        key, range_tags, where = batch_run(self.plan, stages[0], key, self.instance)
        where = where if len(stages) == 1 else " + ".join(stages)
        tags = {**self.tags, **(extra_tags or {}), **range_tags}
        quiet = {} if self.verbose else QUIET_LOGS
        try:
            with interrupts_kept():
                if chain:
                    result = chain(self.plan, LOGIC).execute_in_process(
                        run_config=quiet, instance=self.instance, resources=self.defs.resources, tags=tags
                    )
                else:
                    result = self.job([asset_key(self.plan, s, asset) for s in stages]).execute_in_process(
                        partition_key=key,
                        instance=self.instance,
                        tags=tags,
                        run_config=quiet,
                        raise_on_error=True,
                    )
        except DagsterExecutionStepExecutionError as e:
            raise StepFailed.of(where, e.user_exception) from e
        except DagsterAssetCheckFailedError as e:  # a blocking check of the step's own asset failed
            raise _blocking_check_failed(self.instance, where) from e
        except (KeyboardInterrupt, DagsterExecutionInterruptedError):
            raise
        except Exception as e:  # raise_on_error re-raises most step errors as themselves
            raise StepFailed.of(where, e) from e
        _raise_failed_checks(result, where)
        return [] if self.verbose else _warnings(self.instance, result.run_id, where)


@dataclass
class FleetStepRunner:
    """Runs a step as a Dagster run whose executor is Celery (rag_sweep/fleet/step_jobs.py): the step executes on a
    worker that serves its queue; this returns its warnings or raises as StepRunner does."""

    data_dir: str
    plan_name: str  # the plan as published to the data dir (rag_sweep.fleet.step_jobs.publish_plan)
    instance: Any
    tags: dict[str, str]
    verbose: bool
    plan: Any

    def __post_init__(self):
        # Dagster configures the instance's Python log handlers (logging.config.dictConfig) for every run
        # it starts; two runs starting in two threads deadlock on logging's locks. Configured once, here.
        handlers = self.instance.get_yaml_python_handlers()
        self.instance.get_yaml_python_handlers = lambda: handlers

    def __call__(self, stage: str, key=None, extra_tags: dict | None = None) -> list[str]:
        from rag_assets.sweep_assets import CHAINS
        from rag_sweep.fleet.step_jobs import reconstructable_step

        # a holdout batch: the holdout asset; a chain (the holdout's, the search's): its job
        asset = stage if stage in CHAINS else self.plan.asset_path(stage, first_key(key))[-1]
        key, range_tags, where = batch_run(self.plan, stage, key, self.instance)
        tags = {
            **self.tags,
            **(extra_tags or {}),
            **range_tags,
            **({"dagster/partition": key} if key else {}),
        }
        with interrupts_kept():
            result = dg.execute_job(
                reconstructable_step(self.data_dir, self.plan_name, asset),
                instance=self.instance,
                tags=tags,
                run_config={} if self.verbose else QUIET_LOGS,
            )
        if not result.success:
            _raise_failed_checks(result, where)  # a blocking check of the step's asset failed it
            failures = result.get_step_failure_events()
            if not failures:
                raise StepFailed(f"{where}: the run failed: {_run_failure(self.instance, result.run_id)}")
            error = failures[0].step_failure_data.error
            cause = (error.cause or error) if error else None
            raise StepFailed(f"{where}: {cause.message.strip() if cause else 'failed'}")
        _raise_failed_checks(result, where)
        return [] if self.verbose else _warnings(self.instance, result.run_id, where)


def _run_failure(instance, run_id: str) -> str:
    for entry in reversed(instance.all_logs(run_id)):
        if entry.is_dagster_event and entry.dagster_event.event_type_value == "PIPELINE_FAILURE":
            return entry.message
    return "see the run in the Dagster UI"


def step_label(plan, stage: str, key: str | None) -> str:
    """A step as the progress bars show it: the stage and its partition's short label."""
    from rag_core.decision.holdout import is_holdout_key, selection_key

    if key and is_holdout_key(key):
        return f"{stage}[{plan.labels.get(selection_key(key), key)} holdout]"
    return f"{stage}[{plan.labels.get(key, key)}]" if key else stage


def batch_label(plan, stage: str, keys) -> str:
    """A batch (a tuple of partition keys) as the progress bars show it."""
    if not keys or isinstance(keys, str):
        return step_label(plan, stage, keys or None)
    if len(keys) == 1:
        return step_label(plan, stage, keys[0])
    return f"{stage}[{len(keys)} partitions]"


def run_on_fleet(graph, runner: FleetStepRunner, plan, bar) -> None:
    """Run every batch of `graph` on the fleet, each as soon as its inputs are complete. A batch that fails
    stops new ones from starting; the running ones finish (their artifacts are complete and kept), then
    the first failure is raised. A worker that dies does not fail its step: the broker hands the step to
    another worker of its queue."""
    from tqdm import tqdm

    pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="step-run")
    running: dict = {}  # future -> step
    failure: BaseException | None = None
    try:
        while True:
            if failure is None:
                for step in graph.ready()[: IN_FLIGHT - len(running)]:
                    graph.start(step)
                    running[pool.submit(runner, *step)] = step
                    bar.set_description(f"{len(running)} running, last {batch_label(plan, *step)}"[:60])
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                step = running.pop(future)
                try:
                    for line in future.result():
                        tqdm.write(line, file=sys.stderr)
                except Exception as e:  # noqa: BLE001 (raised below, once the running steps end)
                    failure = failure or e
                    continue
                graph.finish(step)
                bar.update(steps_in(step))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if failure is not None:
        raise failure

"""Run a sweep end to end through the same Dagster assets a deployment runs: the input files are observed
and snapshotted in this process, then the steps to do (rag_assets/orchestration/todo.py) run, each as a Dagster run, in this
process or on a worker fleet (rag_sweep/runner/step_runs.py, rag_sweep/fleet/), into a persistent Dagster instance; an
adaptive search is driven by its controller (rag_assets/orchestration/search.py)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg
from tqdm import tqdm

from rag_assets.board_files import leaderboard_path
from rag_assets.champion import CHAMPION, champion_due
from rag_assets.orchestration.plans import load_plan
from rag_assets.orchestration.plugin_names import record as record_plugins
from rag_assets.orchestration.search import SearchController, SearchReport, batch_tags, begin_search
from rag_assets.orchestration.sweep_records import record_sweep
from rag_assets.orchestration.todo import (
    completed,
    holdout_steps,
    new_finalists,
    reads,
    stale_snapshots,
    steps,
    unobserved,
)
from rag_assets.search_chain import CHAIN
from rag_assets.stage_asset import FORCE_TAG, asset_key
from rag_assets.sweep_assets import stage_assets
from rag_core.common.fingerprint import file_hash
from rag_core.common.progress import listening
from rag_core.planning.batches import batch_reads, batches, steps_in
from rag_core.planning.plan import Plan
from rag_core.planning.spec import load_sweep
from rag_core.planning.step_graph import StepGraph
from rag_sweep.runner.errors import CheckFailed
from rag_sweep.runner.inputs_check import load_data, require_extras
from rag_sweep.runner.instance import (
    RUNNER_PID_TAG,
    close_abandoned_runs,
    local_instance,
    require_deployment,
    require_fleet,
)
from rag_sweep.runner.interrupts import watch_interrupts
from rag_sweep.runner.lock import claim_prefix, exclusive
from rag_sweep.runner.progress_bars import WorkBars, steps_bar
from rag_sweep.runner.step_runs import (
    FleetStepRunner,
    StepRunner,
    batch_label,
    run_on_fleet,
)
from rag_sweep.runner.up_to_date import input_files, record, recordable, shipping_facts
from resources import build_resources
from resources.artifacts import ArtifactRef, latest_fingerprint
from resources.dagster_private import release_connections
from resources.devices import resolve_device
from resources.environment import (
    batch_size,
    default_data_dir,
    device_setting,
    executor,
    fleet_workers,
)
from resources.no_links import refuse_links_in
from resources.reachability import check_all
from resources.storage import data_root, is_remote, read_parquet

# MLflow announces creating and migrating its SQLite store on every new data dir, as INFO: nothing to act on
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)


# the steps that read the input files (the sweep's corpus and QA set, a QA set to generate): they run where
# the sweep was started, also on a fleet; every later step reads their snapshots from the data dir
SNAPSHOTS = ("qa_file", "corpus", "qa_set")


class SweepRun(NamedTuple):
    board: Any  # the leaderboard (polars DataFrame)
    defs: Any  # the definitions the steps ran with (the sweep's assets, the resources)
    instance: Any
    plan: Any  # rag_core.planning.plan.Plan
    data: Path
    search: SearchReport | None = None  # of an adaptive search
    champion_kept: str | None = None  # why the registered champion was not replaced (its gate failed)

    def artifact(self, stage: str, key: str | None = None, part: str | None = None):
        """The rows of a stage's artifact as its latest materialization recorded it."""
        asset = asset_key(self.plan, stage, key)
        fp = latest_fingerprint(self.instance, asset, key)
        if fp is None:
            raise KeyError(f"{asset.to_user_string()}[{key}] is not materialized")
        return ArtifactRef(self.data, stage, fp, key).read(part)


def run_sweep(
    spec: str,
    data_dir: str | None = None,
    force: bool = False,
    verbose: bool = False,
    progress: bool = True,
    resources: dict | None = None,
    store: str | None = None,
    *,
    plan=None,
    evaluations_only: bool = False,
) -> SweepRun:
    """Materialize every stage of the sweep. `resources` overrides the configured ones (e.g. an LLM
    client pointed at another server); `store` is the vector store of configs that name none (default
    $RAG_VECTOR_STORE, else lancedb). With $RAG_EXECUTOR=celery every step but the input snapshots runs on
    the fleet's workers, which build their resources from their own environment (no overrides).
    `plan`: this plan instead of the spec's (a gate's: the spec's configs and its baseline);
    `evaluations_only`: every config evaluated, nothing ranked, confirmed or registered (its `board` is None)."""
    watch_interrupts()  # a Ctrl-C from now on is raised at the latest when the next Dagster run ends
    data = data_root(data_dir or default_data_dir())
    own_configs = None if plan is None else load_sweep(spec).configs  # the rest this run added (a baseline)
    fleet = executor() == "celery"  # a bad $RAG_EXECUTOR: before any work
    plan = _preflight(spec, data, plan, store, fleet, evaluations_only, resources)
    with exclusive(data):
        if not is_remote(data):  # nothing below is written through a planted link (resources/no_links.py)
            refuse_links_in(data)
        inputs_at_start = input_files(plan)
        claim_prefix(data, plan.sweep.name, plan.prefix)
        record_sweep(data, plan, plan.sweep.configs if own_configs is None else own_configs)  # for gc
        record_plugins(data, plan)  # what its names mean now: refused if the plug-in is gone later
        defs = runner_definitions(plan, str(data), resources)
        instance = local_instance(data)
        if n := close_abandoned_runs(instance):
            print(f"marked {n} Dagster run(s) a killed rag-sweep run left started as failed", file=sys.stderr)
        tags = {
            "sweep": plan.sweep.name,
            RUNNER_PID_TAG: str(os.getpid()),
            **({FORCE_TAG: "true"} if force else {}),
        }
        runner = StepRunner(defs, instance, tags, verbose, plan)
        if fleet:  # every step goes to the workers but the input snapshots, which read this machine's files
            from rag_sweep.fleet.step_jobs import publish_plan

            on_fleet = FleetStepRunner(
                str(data), publish_plan(plan, str(data)), instance, tags, verbose, plan
            )

        launched = []  # the steps run: none in an unchanged rerun

        def materialize(stage: str, key=None, extra_tags: dict | None = None) -> None:
            """A step, or a batch (`key` a tuple of partition keys: one run for them all)."""
            launched.append((stage, key))
            local = (
                isinstance(stage, tuple) or stage in SNAPSHOTS
            )  # the input snapshots read this machine's files
            run = on_fleet if fleet and not local else runner
            for line in run(stage, key, extra_tags):
                tqdm.write(line, file=sys.stderr)

        sources = _snapshot_inputs(plan, defs, instance, data, force, materialize)
        stores = defs.resources["vector_stores"]
        todo = steps(plan, instance, data, force, stores, defs.resources["tracking"])
        if evaluations_only:
            todo = [step for step in todo if step[0] != "leaderboard"]
        search = None
        work_bars = WorkBars(progress)
        with listening(work_bars):  # texts embedded, questions answered: a bar inside the step
            if plan.sweep.search.adaptive:
                search = drive_search(plan, instance, data, force, materialize, progress, stores)
                materialize("leaderboard")
            elif not todo:
                if not plan.holdout:  # (with a holdout: said once the holdout is known complete too)
                    print("every partition is up to date: nothing to compute", file=sys.stderr)
            else:
                _run_steps(plan, todo, materialize, on_fleet if fleet else None, progress)
            if evaluations_only:
                return SweepRun(None, defs, instance, plan, data)
            if plan.holdout:  # the finalists, on the questions no selection step saw
                _confirm(plan, instance, data, force, todo, stores, materialize, progress)
            if _optimized(plan, spec, store, data, instance, materialize):
                plan = None  # run again below, outside this run's lock
            kept = None
            if plan is not None:
                tracking = defs.resources["tracking"]
                kept = _ship(plan, data, tracking, materialize)
                # nothing left to do, known from this run's checks or asked again after its work: a rerun
                # answers from the record while nothing it read changes (rag_sweep/runner/up_to_date.py)
                if (
                    kept is None
                    and not resources
                    and recordable(plan, data)
                    and (not launched or nothing_due(plan, instance, data, stores, tracking, sources))
                ):
                    release_connections(instance)  # the instance's files as they will stay: then stamped
                    record(plan, data, shipping_facts(tracking, plan.sweep.name), inputs_at_start)
        if plan is not None:
            board = read_parquet(leaderboard_path(data, plan.sweep.name))
            return SweepRun(board, defs, instance, plan, data, search, kept)
    # the optimized configs join the plan: their steps run, and the leaderboard ranks them with the rest
    return run_sweep(spec, data_dir, False, verbose, progress, resources, store)


def _preflight(spec, data, plan, store, fleet: bool, evaluations_only: bool, resources) -> Plan:
    """The sweep's plan, once every setting, server and extra it needs is known to be there: a refusal
    before any work. The settings and the servers come before the plan, which reads the data dir (the
    plug-ins its runs recorded)."""
    require_fleet(data) if fleet else require_deployment(data)
    check_all(is_remote(data), runs_steps=fleet)  # not minutes of retries at the first step that uses one
    plan = plan or load_plan(spec, store, data)
    require_extras(plan)  # a component whose extra is missing: before any work
    if evaluations_only and plan.sweep.search.adaptive:
        raise ValueError("an adaptive search chooses what to evaluate: it cannot evaluate every config")
    if plan.sweep.optimize is not None:  # its budget against the selection questions: before any work
        load_data(plan.sweep)
    if not fleet and plan.runs_local_models:  # $RAG_DEVICE=cuda where there is none (a fleet's: theirs)
        resolve_device(device_setting())
    if fleet and resources:
        raise ValueError("resource overrides cannot reach a fleet's workers: set them in their environment")
    return plan


def _snapshot_inputs(plan: Plan, defs, instance, data, force: bool, materialize) -> list:
    """The QA set generated where the sweep asks for one and it is not there yet (an existing file, a
    reviewed copy, is used as is); the input files observed and snapshotted where they changed. Returns the
    sweep's source assets."""
    sweep = plan.sweep
    if sweep.qa_generation is not None and not sweep.qa_path.exists():
        print(f"generating the QA set {sweep.qa_path} with {sweep.qa_generation.model}", file=sys.stderr)
        materialize("qa_file")
    sources = [a for a in defs.assets if isinstance(a, dg.SourceAsset) or a.is_observable]
    # the input files' content hashes, as the UI would observe them; an unchanged file is not observed
    # again, and a changed one is recorded without a run (a run costs more than hashing a file)
    for source in unobserved(instance, sources):
        record_observation(instance, source)
    if stale := (["corpus", "qa_set"] if force else stale_snapshots(plan, instance, data)):
        materialize(tuple(stale))  # one run for both snapshots
    return sources


def _run_steps(plan: Plan, todo: list, materialize, on_fleet, progress: bool) -> None:
    """The selection's steps in batches: one after another here, or side by side on a fleet's workers (a
    worker runs one batch at a time). No ETA: steps differ by orders of magnitude (embedding a corpus,
    reading a cached index)."""
    bar = steps_bar(len(todo), progress)
    if on_fleet is not None:
        units = batches(todo, plan.all_keys, batch_size(), fleet_workers())
        run_on_fleet(StepGraph(units, batch_reads(units, lambda s: reads(plan, s))), on_fleet, plan, bar)
    else:
        run_batches(batches(todo, plan.all_keys, batch_size()), plan, materialize, bar)
    bar.close()


def _confirm(
    plan: Plan, instance, data, force: bool, todo: list, stores, materialize, progress: bool
) -> None:
    """The finalists on the questions no selection step saw: their partitions appear now, then run."""
    held = holdout_steps(plan, instance, data, force, plan.sweep.search.adaptive or bool(todo), stores)
    if not todo and not held:
        print("every partition is up to date: nothing to compute", file=sys.stderr)
    if added := new_finalists(plan, instance, held):
        instance.add_dynamic_partitions(plan.finalists_partitions, added)
    bar = steps_bar(len(held), progress and bool(held))
    run_holdout(held, plan, materialize, bar)
    bar.close()


def _optimized(plan: Plan, spec, store, data, instance, materialize) -> bool:
    """Prompt optimization, where the sweep asks for it: whether its best prompts made new configs (a run
    of the new plan evaluates them)."""
    if plan.sweep.optimize is None or not optimize_prompts(plan, instance, data, materialize):
        return False
    added = set(load_plan(spec, store, data).config_keys) - set(plan.config_keys)
    if added:
        print(f"prompt optimization found {len(added)} optimized config(s): evaluating them", file=sys.stderr)
    return bool(added)


def _ship(plan: Plan, data, tracking, materialize) -> str | None:
    """The recommendation, shipped to the model registry when it is not the champion already; why the
    champion was kept, where the recommendation is worse than it (None otherwise)."""
    if champion_due(plan, data, tracking):
        try:
            materialize(CHAMPION)
        except CheckFailed as e:  # the recommendation is worse than the champion: it stays
            return str(e)
    return None


def runner_definitions(plan, data_dir: str, resources: dict | None = None) -> dg.Definitions:
    """The sweep's assets with the shared resources (`resources` overrides some): what a step needs."""
    return dg.Definitions(
        assets=stage_assets(plan), resources={**build_resources(data_dir), **(resources or {})}
    )


def nothing_due(plan, instance, data: Path, stores, tracking, sources) -> bool:
    """What an unchanged rerun would find now: the input files as observed and snapshotted, no step, no
    holdout step and no champion to register."""
    return (
        not unobserved(instance, sources)
        and not stale_snapshots(plan, instance, data)
        and not steps(plan, instance, data, False, stores, tracking)
        and not (plan.holdout and holdout_steps(plan, instance, data, False, False, stores))
        and not champion_due(plan, data, tracking)
    )


def record_observation(instance, source) -> None:
    """An input file's observation (its content hash as the data version), as the UI's observe records it."""
    from resources.dagster_private import DATA_VERSION_TAG

    path = source.metadata["path"].path
    instance.report_runless_asset_event(
        dg.AssetObservation(source.key, tags={DATA_VERSION_TAG: file_hash(path)}, metadata={"path": path})
    )


def run_batches(units, plan, materialize, bar) -> None:
    """Materialize batches one after the other (each one Dagster run), the bar counting their steps."""
    for stage, keys in units:
        bar.set_description(batch_label(plan, stage, keys)[:60])
        materialize(stage, keys or None)
        bar.update(steps_in((stage, keys)))


def run_holdout(held: list, plan, materialize, bar) -> None:
    """The finalists' holdout steps in one run of the holdout's chain (rag_assets/holdout_chain.py), from
    the first holdout stage due; then the confirmation."""
    from rag_assets.holdout_chain import FROM_TAG, HOLDOUT, first_stage

    chain = [(s, k) for s, k in held if s != "confirmation"]
    if chain:
        first = first_stage(plan, (s for s, _ in chain))
        bar.set_description(f"the holdout of {len({k for _, k in chain})} finalist(s)")
        materialize(HOLDOUT, tuple(dict.fromkeys(k for _, k in chain)), {FROM_TAG: first})
        bar.update(len(chain))
    if ("confirmation", None) in held:
        bar.set_description("confirmation")
        materialize("confirmation")
        bar.update(1)


def optimize_prompts(plan, instance, data: Path, materialize) -> bool:
    """Materialize the prompt optimizations the sweep asks for (`optimize.configs`: named, or chosen
    from the leaderboard's decision) that are not complete; True when one ran."""
    from rag_assets.board_files import read_decision
    from rag_assets.prompt_optimization import OPTIMIZATION, optimization_due

    inputs = {s: latest_fingerprint(instance, asset_key(plan, s), None) for s in ("corpus", "qa_set")}
    starts = plan.optimization_starts(read_decision(data, plan.sweep.name))
    fps = plan.fingerprints(inputs) if starts else {}
    due = [k for k in starts if optimization_due(plan, k, data, inputs, fps)]
    for key in due:
        tqdm.write(f"optimizing the prompts of {plan.labels.get(key, key)} (GEPA)", file=sys.stderr)
        materialize(OPTIMIZATION, key)
    return bool(due)


def drive_search(
    plan, instance, data: Path, force: bool, materialize, progress: bool, stores
) -> SearchReport:
    """The sweep's adaptive search, in this process: its controller's steps materialized until it reports,
    a rung's steps in one run of the search's chain (the same controller and chain a deployment's sensor
    drives)."""
    state = begin_search(plan, data, completed(plan, instance, data, stores=stores), force)
    controller = SearchController(plan, data, instance, state, stores)
    bar = tqdm(desc="search", unit="step", disable=not progress, file=sys.stderr)
    try:
        while (advance := controller.advance()).report is None:
            by_rung: dict[int | None, list] = {}  # a rung's steps share their questions: one run of the chain
            for step in advance.steps:
                by_rung.setdefault(step[2], []).append(step)
            for group in by_rung.values():
                bar.set_description(f"{len(group)} step(s) of the search")
                materialize(CHAIN, tuple((s, k) for s, k, _ in group), batch_tags(state, group))
                bar.update(len(group))
    except BaseException as e:
        state.finish("failed", f"{type(e).__name__}: {e}")
        raise
    finally:
        bar.close()
    state.finish("done", f"stopped by {advance.report.stopped_by}")
    return advance.report

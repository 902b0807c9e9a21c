"""One asset skeleton for every stage of the registry (rag_core/planning/stages.py).

The skeleton declares the stage's inputs (every artifact it reads, with the plan's partition mappings),
its partitions, code version, pool and checks; at run time it computes the artifact's fingerprint from its
own settings and the fingerprints of what it read, reuses the artifact when it exists (unless the run is
forced) and otherwise calls the stage's logic. Each stage module supplies only a `StageLogic`: what to
compute, what to report, what to publish beyond the artifact and which checks to run.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import dagster as dg
import polars as pl

from rag_assets.batch import (
    OnePartition,
    PartitionsFailed,
    batch_keys,
    input_pointers,
    inputs_of,
    merged_check,
    record,
    version_tags,
)
from rag_core.decision.holdout import holdout_key
from rag_core.planning.plan import Partition, Plan
from rag_core.planning.spec import RagConfig
from rag_core.planning.stages import CONFIG_STAGE, Stage, artifact_fingerprint, stage
from resources.artifacts import Artifact, ArtifactRef, QuestionSplit, QuestionSubset, store_artifact
from resources.environment import batch_size, gpu_queue, input_queue

FORCE_TAG = "rag/force"  # recompute even when the artifact exists (the nightly schedule, `--force`)
# A successive-halving rung: the run's stages see the QA set's first N questions in the search's order.
QUESTIONS_TAG = "rag/questions"
# Output(data_version=...) is how an asset states its own data version (the artifact fingerprint).
warnings.filterwarnings("ignore", message="Parameter `data_version`", category=dg.BetaWarning)
warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)

# On every run of a chain (rag_assets/chains.py), which computes the stages after the ones it records
# itself: the eager conditions below do not request them for what such a run records.
CHAIN_RUN_TAG = "rag/chain_run"

# A stage follows its inputs: it runs when an input was updated (by a run that did not already target the
# stage, nor by a chain's), never merely because it is missing, so a new deployment or an opened UI starts
# nothing by itself. `any_deps_updated` with the chain's runs left out (Dagster's documented way to keep
# runs with a tag from triggering downstream conditions).
_A = dg.AutomationCondition
_DEPS_UPDATED = _A.any_deps_match(
    (
        _A.newly_updated()
        & ~_A.executed_with_root_target()
        & ~_A.all_new_updates_have_run_tags(tag_keys={CHAIN_RUN_TAG})
    ).with_label("newly_updated_outside_chains")
    | _A.will_be_requested()
).with_label("any_deps_updated")
FOLLOWS_INPUTS = (
    _DEPS_UPDATED.since(_A.newly_requested() | _A.newly_updated() | _A.initial_evaluation())
    & ~_A.any_deps_missing()
    & ~_A.any_deps_in_progress()
    & ~_A.in_progress()
).with_label("follows_inputs")


@dataclass
class StageRun:
    """What a stage's logic sees: the step's context, its plan partition and its inputs."""

    context: dg.AssetExecutionContext
    plan: Plan
    partition: Partition | None
    inputs: dict[str, Any]  # read stage -> ArtifactRef (the leaderboard: partition -> ArtifactRef)
    _frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)  # what compute tells report (e.g. timings)
    ref: ArtifactRef | None = None  # this step's own artifact
    output: Artifact | None = None  # what this step returns (its frames when it computed them)

    @property
    def config(self) -> RagConfig:
        return self.partition.config

    @property
    def resources(self):
        return self.context.resources

    def part(self, name: str) -> pl.DataFrame:
        """A side table of this step's artifact: the one it computed, else the one on disk (reused)."""
        computed = self.output.parts.get(name) if self.output.frame is not None else None
        return computed if computed is not None else self.ref.read(name)

    @property
    def llm(self):
        """The LLM client; in a forced run one that asks the provider again instead of the call cache."""
        from resources.llm import Reasking

        return Reasking(self.resources.llm) if forced(self.context) else self.resources.llm

    def read(self, name: str) -> pl.DataFrame:
        """The rows of an input artifact (read once per step)."""
        if name not in self._frames:
            self._frames[name] = self.inputs[name].read()
        return self._frames[name]


@dataclass(frozen=True)
class Check:
    """An asset check of a stage; blocking checks stop downstream steps of the run when they fail."""

    name: str
    description: str
    blocking: bool = False


class StageLogic:
    """A stage's work. Subclasses set `description` and implement `compute`; the rest is optional."""

    description: ClassVar[str] = ""
    resources: ClassVar[tuple[str, ...]] = ()
    checks: ClassVar[tuple[Check, ...]] = ()
    deps: ClassVar[tuple[str, ...]] = ()  # source assets it follows without reading them as artifacts

    def kinds(self, plan: Plan) -> set[str]:
        return {"parquet"}

    def automation(self, key: dg.AssetKey, plan: Plan) -> dg.AutomationCondition | None:
        """When the automation sensor materializes the stage: when its inputs change (FOLLOWS_INPUTS);
        None: only when requested."""
        return FOLLOWS_INPUTS

    def narrow(self, context: dg.AssetExecutionContext, plan: Plan, inputs: dict[str, Any]) -> dict[str, Any]:
        """The inputs this step reads (their fingerprints make its own): all of them by default."""
        return inputs

    def identity(self, run: StageRun) -> Any:
        """The stage's own part of the fingerprint: its settings (an input snapshot: the file's hash)."""
        return run.partition.own

    def reusable(self, run: StageRun) -> bool:
        """Whether this step's artifact (`run.ref`) is complete and may be reused; a damaged one is not,
        nor one that holds failed LLM calls (a rerun asks them again; the rest come from the call cache)."""
        if run.ref.exists() and not run.ref.intact():
            run.context.log.warning(f"artifact {run.ref.path()} is damaged: computing it again")
            return False
        if run.ref.exists() and (failed := run.ref.failed_calls()):
            run.context.log.info(f"{failed} failed LLM calls in {run.ref.path()}: computing it again")
            return False
        return run.ref.exists()

    def side_by_side(self, sweep, config: RagConfig) -> bool:
        """Whether a batch may compute this config's partition beside others (`StageSteps.side_by_side`):
        only where it calls an LLM and its `compute` shares nothing with theirs but the LLM client (no
        store, local model or cache), or holds a lock around what it shares. None by default."""
        return False

    def before_batch(self, runs: list[StageRun], log) -> None:
        """Work the partitions a batch is about to compute share, done once for all of them before the
        first (`runs`: those not reused; `log`: the batch's). Nothing by default."""

    def compute(self, run: StageRun) -> pl.DataFrame | Artifact:
        """The artifact's rows (or an Artifact with side tables) for `run.ref`."""
        raise NotImplementedError

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        """Materialization metadata, from the artifact's rows (computed or reused)."""
        return {"dagster/row_count": frame.height}

    def publish(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        """What the step puts outside its artifact once the artifact is whole (an MLflow run, the ship
        report and the leaderboard's files); returns the metadata that says where. Nothing by default."""
        return {}

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        return []


def forced(context: dg.AssetExecutionContext) -> bool:
    return context.run.tags.get(FORCE_TAG, "").lower() == "true"


def split_inputs(plan: Plan, split: str | None, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs as a partition of one split of the QA set sees them (rag_core/decision/holdout.py)."""
    if split is None or "qa_set" not in inputs:
        return inputs
    d = plan.sweep.decision
    return {**inputs, "qa_set": QuestionSplit.of(inputs["qa_set"], split, d.holdout, d.holdout_seed)}


def rung_inputs(context: dg.AssetExecutionContext, plan: Plan, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs as a halving rung sees them: the QA set narrowed to the run's `rag/questions`."""
    n = context.run.tags.get(QUESTIONS_TAG)
    if n is None or "qa_set" not in inputs:
        return inputs
    return {**inputs, "qa_set": QuestionSubset.of(inputs["qa_set"], int(n), plan.sweep.search.seed)}


def asset_key(plan: Plan, name: str, key: str | None = None) -> dg.AssetKey:
    """The asset key the plan names for a stage or input file of its sweep (`Plan.asset_path`); with a
    partition `key`, of the asset that holds it (a holdout key's: the stage's holdout asset)."""
    return dg.AssetKey(plan.asset_path(name, key))


def holdout_asset_key(plan: Plan, name: str) -> dg.AssetKey:
    """The asset of a stage's holdout partitions, `holdout_<stage>`."""
    return asset_key(plan, name, holdout_key(""))


def _input(plan: Plan, upstream: Stage, downstream: Stage, held: bool = False) -> dg.AssetIn:
    if held and upstream.name in plan.holdout_partitions:  # a holdout stage reads its own config's partition
        return dg.AssetIn(
            key=holdout_asset_key(plan, upstream.name), partition_mapping=dg.IdentityPartitionMapping()
        )
    key = asset_key(plan, upstream.name)
    if held and upstream.partitioned:
        # ... and the selection's partition of its config (every partition a dependency: Dagster's mappings
        # cannot map a dynamic partition onto static ones; each partition picks its own, `inputs_of`)
        return dg.AssetIn(
            key=key, partition_mapping=dg.AllPartitionMapping(), metadata={"all_partitions": True}
        )
    if upstream.partitioned and not downstream.partitioned:  # the leaderboard reads every evaluation
        # the confirmation the holdout's, the finalists' among them (`Confirmation.narrow`)
        if downstream.name == "confirmation":
            key = holdout_asset_key(plan, upstream.name)
        return dg.AssetIn(
            key=key, partition_mapping=dg.AllPartitionMapping(), metadata={"all_partitions": True}
        )
    return dg.AssetIn(key=key, partition_mapping=_partition_mapping(plan, upstream, downstream))


def _partition_mapping(plan: Plan, upstream: Stage, downstream: Stage):
    if not upstream.partitioned:
        return None  # an unpartitioned input: every partition reads it whole
    mapping = plan.mapping(upstream.name, downstream.name)
    if all(up in keys and len(keys) == 1 for up, keys in mapping.items()):
        return dg.IdentityPartitionMapping()
    return dg.StaticPartitionMapping(mapping)


def _fingerprint(value: ArtifactRef | dict[str, ArtifactRef]):
    return value.fp if isinstance(value, ArtifactRef) else {k: r.fp for k, r in sorted(value.items())}


def loads_model(plan: Plan, name: str) -> bool:
    """Whether the stage's steps run a model over many texts (embedding a corpus, cross-encoder reranking,
    semantic chunking): the steps a fleet sends to its GPU workers."""
    if name == "embeddings":
        return True
    if name == "rerankings":
        return any(c.rerank.method == "cross_encoder" for c in plan.configs)
    if name == "chunksets":
        return any(c.chunking.semantic for c in plan.configs)
    return False


INPUT_SNAPSHOTS = ("corpus", "qa_set", "qa_file")  # the steps that read the sweep's own files


def queue_tags(plan: Plan, name: str) -> dict[str, str]:
    """The Celery queue of the stage's steps on a fleet ($RAG_GPU_QUEUE for those that load a model,
    $RAG_INPUT_QUEUE for those that read the input files; the default queue otherwise): an op tag, which
    the other executors ignore."""
    if (queue := gpu_queue()) and loads_model(plan, name):
        return {"dagster-celery/queue": queue}
    if (queue := input_queue()) and name in INPUT_SNAPSHOTS:
        return {"dagster-celery/queue": queue}
    return {}


def optimized_prompts_dep(plan: Plan, name: str) -> list[dg.AssetDep]:
    """An optimized config's first changed stage (the retrievals, rerankings or answers: the first its
    prompts change) follows the prompt optimization that found them (its config, in its key, carries them):
    lineage from each optimization to the partitions it feeds, the later ones following those."""
    mapping: dict[str, set[str]] = {}
    for key, base in plan.optimized_from.items():
        if plan.first_changed_stage(key) == name:
            mapping.setdefault(base, set()).add(plan.key_of(plan.config(key), name))
    if not mapping:
        return []
    return [
        dg.AssetDep(
            asset_key(plan, "prompt_optimizations"), partition_mapping=dg.StaticPartitionMapping(mapping)
        )
    ]


# The holdout's assets share one partitions definition (the finalists): a backfill puts assets with the same
# partitions and backfill policy in one run, where a batch's asset has no output for the next to read, so
# each holdout stage gets a policy of its own (a run's size far above any number of finalists).
_HELD_RUN = 1000


def _backfill_policy(plan: Plan, name: str, held: bool) -> dg.BackfillPolicy | None:
    """A backfill of many partitions is one run per stage (the asset loops over its partitions, recording
    each); Dagster puts assets with the same partitions and policy in one run, and a batch's asset has no
    output for the next asset of its run to read: the evaluations (whose keys are the answers') get a
    policy of their own, as does each holdout stage."""
    if not stage(name).partitioned:
        return None
    if held:
        return dg.BackfillPolicy.multi_run(_HELD_RUN + list(plan.holdout_partitions).index(name))
    return (
        dg.BackfillPolicy.multi_run(batch_size()) if name == CONFIG_STAGE else dg.BackfillPolicy.single_run()
    )


def _automation(plan: Plan, name: str, logic: StageLogic, key: dg.AssetKey, held: bool):
    """An adaptive sweep's stages follow its search (sensors/search.py), which chooses what to evaluate. The
    holdout's stages run when a driver or the runner asks: one run of the holdout's chain
    (rag_assets/holdout_chain.py) for every stage of the finalists (the finalists are data)."""
    if plan.sweep.search.adaptive or held:
        return None
    return logic.automation(key, plan)


class StageSteps:
    """A stage's steps at run time: one partition's artifact (reused or computed, with its metadata and
    checks) and a batch of partitions recorded as materializations of `key` (the stage's asset, or its
    holdout asset: `held`). The stage's asset runs them, and so does the holdout's chain
    (rag_assets/holdout_chain.py)."""

    def __init__(self, plan: Plan, name: str, logic: StageLogic, held: bool = False):
        self.plan, self.name, self.logic, self.held = plan, name, logic, held
        self.stage = stage(name)
        self.key = holdout_asset_key(plan, name) if held else asset_key(plan, name)

    def prepared(self, context, key: str | None, inputs: dict) -> StageRun:
        """A partition's run with its artifact ref: the fingerprint of its settings and what it reads."""
        plan, s = self.plan, self.stage
        part = plan.partition(self.name, key) if s.partitioned else None
        if s.partitioned:
            inputs = rung_inputs(context, plan, split_inputs(plan, part.split, inputs))
        inputs = self.logic.narrow(context, plan, inputs)
        run = StageRun(context, plan, part, inputs)
        fp = artifact_fingerprint(
            self.name, self.logic.identity(run), {r: _fingerprint(inputs[r]) for r in s.reads}
        )
        run.ref = context.resources.artifacts.ref(self.name, fp, key)
        return run

    def step(self, context, key: str | None, inputs: dict) -> tuple[Artifact, dict, list]:
        """One partition: its artifact (reused or computed), its metadata and its checks' results."""
        return self.finished(*self.computed(context, key, inputs))

    def computed(
        self, context, key: str | None, inputs: dict, run: StageRun | None = None
    ) -> tuple[StageRun, bool]:
        """A partition's run with its artifact (`run.output`), reused or computed; and whether reused.
        `run`: the partition's run as `prepared` made it already (a batch's `before_batch`)."""
        run = run or self.prepared(context, key, inputs)
        reused = self.logic.reusable(run) and not forced(context)
        if reused:
            run.output = Artifact(run.ref)
        else:
            computed = self.logic.compute(run)
            run.output = computed if isinstance(computed, Artifact) else Artifact(run.ref, computed)
        return run, reused

    def finished(self, run: StageRun, reused: bool) -> tuple[Artifact, dict, list]:
        """A computed partition's artifact, its metadata (what `publish` put outside it included) and its
        checks' results."""
        logic, ref, out = self.logic, run.ref, run.output
        frame = ref.read() if reused else out.frame
        metadata = {
            "fingerprint": dg.MetadataValue.text(ref.fp),
            "path": dg.MetadataValue.path(str(ref.path())),
            "reused": dg.MetadataValue.bool(reused),
            **logic.report(run, frame, reused),
            **logic.publish(run, frame, reused),
        }
        return out, metadata, logic.check(run, frame)

    def side_by_side(self, context, keys: list[str]) -> tuple[list[str], int]:
        """The partitions of a batch computed side by side, and how many at once: those whose LLM calls
        the stage lets run beside the others' (`StageLogic.side_by_side`), so that the calls in flight are
        the client's limit over the configs, not one config's questions (rag_core/common/in_flight.py)."""

        def config(k: str) -> RagConfig | None:
            try:
                return self.plan.partition(self.name, k).config
            except KeyError:  # no such partition: it fails in the batch's loop, named there
                return None

        sweep = self.plan.sweep
        side = [k for k in keys if (c := config(k)) is not None and self.logic.side_by_side(sweep, c)]
        if len(side) < 2:
            return [], 1
        # each maps its questions over up to `max_concurrency` threads; a few partitions keep the slots full
        # as one winds down, without a thread for every question of every config
        limit = getattr(context.resources.llm, "max_concurrency", 1)
        return side, min(len(side), max(2, limit // 4))

    def batch(self, context, loaded: dict, wanted: list[str]):
        """Many partitions in one run (rag_core/planning/batches.py): each is computed (those that call an
        LLM side by side, `side_by_side`), stored in the batch's order, and recorded (its own
        materialization, fingerprint and metadata) when the batch ends, fails or is interrupted; yields each
        check's result merged over the batch. One that fails does not stop the others; the batch then
        raises, naming it."""
        # Recorded when the batch ends: Dagster's backfill requests a downstream partition as soon as its
        # parents are recorded, so a batch recording as it went split the next stage of a UI backfill into a
        # run per daemon tick (43 runs instead of 12 for the example). A run killed outright records nothing, but
        # its finished artifacts stay on disk and the rerun reuses them without computing.
        plan, name, s = self.plan, self.name, self.stage
        pointers = input_pointers(context, plan, s.reads, self.held)
        results: dict[str, list[tuple[str, dg.AssetCheckResult]]] = {}
        failed: list[tuple[str, BaseException]] = []
        finished: list[dg.AssetMaterialization] = []

        # the partitions the stage's shared work prepared are computed with those runs (their inputs read once)
        ready = self.before_batch(context, loaded, wanted)

        def compute(k: str) -> tuple[dict, StageRun, bool]:
            if k in ready:
                inputs, run = ready[k]
                return inputs, *self.computed(run.context, k, inputs, run)
            inputs = inputs_of(plan.partition(name, k), loaded)
            return inputs, *self.computed(OnePartition(context, name, k), k, inputs)

        # partitions that call an LLM compute side by side; each is finished (metadata, anything published,
        # checks) and stored in the batch's order, by this thread
        side, width = self.side_by_side(context, wanted)
        pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix=name) if side else None
        ahead = {k: pool.submit(compute, k) for k in side} if pool else {}
        try:
            for k in wanted:
                try:
                    inputs, run, reused = ahead[k].result() if k in ahead else compute(k)
                    out, meta, checks = self.finished(run, reused)
                except Exception as e:  # noqa: BLE001 (that partition's failure: raised below, named)
                    context.log.error(f"{name}[{k}] failed: {type(e).__name__}: {e}")
                    failed.append((k, e))
                    continue
                store_artifact(out)
                tags = version_tags(
                    plan, out.ref.fp, s.version, plan.partition(name, k).reads, inputs, pointers
                )
                finished.append(dg.AssetMaterialization(self.key, partition=k, metadata=meta, tags=tags))
                for result in checks:
                    results.setdefault(result.check_name, []).append((k, result))
        finally:  # an interrupted batch records what it finished too
            if pool is not None:  # the partitions not begun are not; calls in flight end on their own
                pool.shutdown(wait=False, cancel_futures=True)
            record(context, finished)
        context.log.info(
            f"{len(finished)} of {len(wanted)} {name} partitions materialized, {len(failed)} failed"
        )
        yield from (merged_check(self.key, found) for found in results.values())
        if failed:
            raise PartitionsFailed(name, failed)

    def before_batch(self, context, loaded: dict, wanted: list[str]) -> dict[str, tuple[dict, StageRun]]:
        """`StageLogic.before_batch` with the partitions of the batch that will be computed: those without
        an artifact, or all when forced (one whose artifact is damaged is computed without it). Where it
        fails, each partition computes on its own, as without it, and fails there, named. Returns the
        partitions it prepared (key -> their inputs and run), for the batch to compute with."""
        if type(self.logic).before_batch is StageLogic.before_batch:
            return {}
        ready = {}
        for k in wanted:
            try:
                inputs = inputs_of(self.plan.partition(self.name, k), loaded)
                ready[k] = inputs, self.prepared(OnePartition(context, self.name, k), k, inputs)
            except Exception:  # noqa: BLE001 (it fails in the batch's loop, named there)
                continue
        runs = [run for _, run in ready.values() if forced(context) or not run.ref.exists()]
        try:
            if runs:
                self.logic.before_batch(runs, context.log)
        except Exception as e:  # noqa: BLE001 (each partition meets it again, alone)
            context.log.warning(f"{self.name}: the batch's shared work failed ({type(e).__name__}: {e})")
        return ready

    def single(self, context, loaded: dict):
        """An unpartitioned stage in a chain's run (rag_assets/chains.py): its artifact, recorded as its
        asset's materialization with the tags its Output would have had; yields its checks' results."""
        plan, s = self.plan, self.stage
        pointers = input_pointers(context, plan, s.reads, self.held)
        out, meta, checks = self.step(context, None, loaded)
        store_artifact(out)
        tags = version_tags(plan, out.ref.fp, s.version, {}, loaded, pointers)
        record(context, [dg.AssetMaterialization(self.key, metadata=meta, tags=tags)])
        for result in checks:  # a step's results name no asset: an asset's own step infers it
            yield dg.AssetCheckResult(
                asset_key=self.key,
                check_name=result.check_name,
                passed=result.passed,
                metadata=result.metadata,
                severity=result.severity,
            )


def stage_asset(
    plan: Plan,
    name: str,
    logic: StageLogic,
    partitions: dg.PartitionsDefinition | None,
    held: bool = False,
) -> dg.AssetsDefinition:
    """The stage's asset; `held`: its holdout asset (`holdout_<stage>`, partitioned by the finalists)."""
    s = stage(name)
    steps = StageSteps(plan, name, logic, held)
    key = steps.key
    ins = {r: _input(plan, stage(r), s, held) for r in s.reads}
    description = logic.description
    if held:
        description += (
            " On the holdout's questions, which no selection step sees: one partition per finalist (its config "
            "key), added when a leaderboard names it."
        )

    @dg.asset(
        key=key,
        ins=ins,
        deps=[asset_key(plan, d) for d in logic.deps] + ([] if held else optimized_prompts_dep(plan, name)),
        partitions_def=partitions,
        code_version=str(s.version),
        io_manager_key="artifacts",
        required_resource_keys={"artifacts", *logic.resources},
        group_name=plan.prefix,
        kinds=logic.kinds(plan),
        pool="llm" if plan.calls_llm(name) else None,
        op_tags=queue_tags(plan, name),
        backfill_policy=_backfill_policy(plan, name, held),
        output_required=not s.partitioned,  # a batch records its partitions itself (`StageSteps.batch`)
        automation_condition=_automation(plan, name, logic, key, held),
        check_specs=[
            dg.AssetCheckSpec(c.name, asset=key, description=c.description, blocking=c.blocking)
            for c in logic.checks
        ],
        description=description,
    )
    def _stage(context, **inputs):  # an AssetExecutionContext (string annotations are refused)
        if s.partitioned and not context.has_partition_key:
            # a UI backfill's range: every partition is recorded, the up-to-date ones reused (a backfill
            # waits for a materialization of each partition it asked for)
            yield from steps.batch(context, inputs, batch_keys(context))
            return
        # unpartitioned, or one partition: as its own run always did
        part = context.partition_key if s.partitioned else None
        if part is not None:
            inputs = inputs_of(plan.partition(name, part), inputs)
        out, meta, checks = steps.step(context, part, inputs)
        yield dg.Output(out, data_version=dg.DataVersion(out.ref.fp), metadata=meta)
        yield from checks

    return _stage

"""`rag-sweep`: run a sweep end to end through the same Dagster assets, in process, no server needed.

    rag-sweep run SPEC [--data-dir DIR] [--output leaderboard.csv|.parquet] [--store NAME] [--force]
                  [--workers N]
    rag-sweep validate SPEC
    rag-sweep plan SPEC [--data-dir DIR] [--store NAME]

The input files are observed and snapshotted, then the plan's partitions run, each as a Dagster run as soon
as the partitions it reads are complete, several at once in worker processes (rag_assets/step_runs.py),
into a persistent Dagster instance under `<data-dir>/dagster_home` (so `dagster dev` can show them). A
partition whose latest materialization already holds the artifact these snapshots give is skipped, so
re-running an unchanged spec recomputes nothing; a killed run resumes from what is complete.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Without --verbose Dagster's console stays silent: warnings are printed one per line after each step, and a
# failed step as one line (file, row, field), its traceback kept for --verbose.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# MLflow announces creating and migrating its SQLite store on every new data dir, as INFO: nothing to act on
logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)


def _instance(data_dir: Path):
    """$DAGSTER_HOME's instance, else `<data-dir>/dagster_home`, created with the repo's dagster.yaml (the
    same run queue and pools as `dagster dev` from the repo root)."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    home = data_dir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text((Path(__file__).resolve().parents[1] / "dagster.yaml").read_text())
    return dg.DagsterInstance.from_config(str(home))


CLI_PID_TAG = "rag/cli_pid"  # the rag-sweep process that ran a Dagster run in process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def close_abandoned_runs(instance) -> int:
    """Mark as failed the Dagster runs a killed `rag-sweep run` left started: it ran them in its own
    process, which is gone, so nothing else will ever end them (the UI would show them running forever)."""
    import dagster as dg

    live = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    abandoned = [
        r
        for r in instance.get_runs(filters=dg.RunsFilter(statuses=live))
        if CLI_PID_TAG in r.tags and not _alive(int(r.tags[CLI_PID_TAG]))
    ]
    for r in abandoned:
        instance.report_run_failed(
            r,
            f"the rag-sweep run (pid {r.tags[CLI_PID_TAG]}) that ran this ended before it finished (killed)",
        )
    return len(abandoned)


class SweepRun(NamedTuple):
    board: Any  # the leaderboard (polars DataFrame)
    defs: Any
    instance: Any
    plan: Any  # rag_core.plan.Plan
    data: Path
    search: Any = None  # rag_assets.search_run.SearchReport of an adaptive search

    def artifact(self, stage: str, key: str | None = None, part: str | None = None):
        """The rows of a stage's artifact as its latest materialization recorded it."""
        from resources.artifacts import ArtifactRef, latest_fingerprint

        asset = _key(self.plan, stage)
        fp = latest_fingerprint(self.instance, asset, key)
        if fp is None:
            raise KeyError(f"{asset.to_user_string()}[{key}] is not materialized")
        return ArtifactRef(self.data, stage, fp, key).read(part)


@contextmanager
def exclusive(data: Path):
    """One `rag-sweep run` per data dir at a time: a second run waits for the first, then reuses its work
    (Dagster's and MLflow's SQLite stores must not be set up or migrated by two processes at once). The
    kernel releases the lock when its process ends, even when killed."""
    import fcntl

    try:
        data.mkdir(parents=True, exist_ok=True)
        lock = open(data / ".rag-sweep.lock", "a+")  # noqa: SIM115 (closed below; its errors named here)
    except OSError as e:  # a read-only disk or mount, a folder of another user, a file in the way
        raise DataDirError(
            f"data dir {data}: cannot write there ({e.strerror}); choose another with --data-dir or "
            "$RAG_DATA_DIR"
        ) from e
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            print(f"waiting for the rag-sweep run on {data} ({holder}) to finish ...", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        yield


def completed(plan, instance, data: Path, questions: int | None = None, stores=None):
    """`complete(stage, key)`: the artifact ref of a partition whose latest materialization holds the
    artifact the materialized input snapshots give, whole in `data`; else None. With `questions`: the
    artifact of that halving rung (the QA set's first N questions in the search's order), whole in
    `data`, whatever the partition materialized since. A vector index is complete only when `stores`
    (the VectorStores resource) still hold the collection its marker records."""
    from rag_assets.confirmation import board_decision
    from rag_assets.indexes import index_present
    from rag_core.stages import stage as stage_of
    from resources.artifacts import ArtifactRef, latest_fingerprint, latest_fingerprints

    inputs = {s: latest_fingerprint(instance, _key(plan, s), None) for s in ("corpus", "qa_set")}
    expected: dict[tuple[str, str | None], str] = plan.fingerprints(inputs, rung=questions)
    expected[("leaderboard", None)] = plan.board_fingerprint(inputs, expected)
    board = ArtifactRef(data, "leaderboard", expected[("leaderboard", None)])
    if (
        plan.holdout and questions is None and board.intact()
    ):  # its finalists are known: so is what confirms them
        finals = board_decision(board)["finalists"]
        expected[("confirmation", None)] = plan.confirmation_fingerprint(inputs, expected, board.fp, finals)
    latest: dict[str, dict[str, str | None]] = {}  # stage -> partition -> its latest materialized fingerprint

    def complete(stage: str, key: str | None) -> ArtifactRef | None:
        if (stage, key) not in expected:  # a confirmation before its leaderboard
            return None
        ref = ArtifactRef(data, stage, expected[(stage, key)], key)
        if questions is None:  # (a past rung: its artifact is enough, the partition moved on since)
            if stage not in latest:
                latest[stage] = (
                    latest_fingerprints(instance, _key(plan, stage))
                    if stage_of(stage).partitioned
                    else {None: latest_fingerprint(instance, _key(plan, stage), None)}
                )
            if latest[stage].get(key) != ref.fp and ref.exists():  # materialized since that read?
                latest[stage][key] = latest_fingerprint(instance, _key(plan, stage), key)
            if latest[stage].get(key) != ref.fp:
                return None
        # not intact: another data dir, same instance; failed LLM calls: asked again
        if not ref.intact() or ref.failed_calls():
            return None
        if stage_of(stage).external:  # a vector index: its marker can outlive the store's collection
            config = plan.partition(stage, key).config
            if stores is None or not index_present(stores.get(config.index.store), key, ref):
                return None
        return ref

    return complete


def unobserved(instance, sources: list) -> list:
    """The observable input files whose content is not what their latest observation recorded (or that
    were never observed): an unchanged file needs no run to observe it again."""
    from rag_core.fingerprint import file_hash

    changed = []
    for source in sources:
        record = instance.get_latest_data_version_record(source.key, is_source=True)
        seen = record.asset_observation.data_version if record and record.asset_observation else None
        if seen != file_hash(source.metadata["path"].path):  # the path the observation hashes
            changed.append(source)
    return changed


def stale_snapshots(plan, instance, data: Path) -> list[str]:
    """The input snapshots (corpus, qa_set) whose latest materialization does not hold the files as they
    are now, whole in `data`: an unchanged file needs no run to snapshot it again. Each file is hashed once."""
    from rag_assets.inputs import snapshot_fingerprints
    from resources.artifacts import ArtifactRef, latest_fingerprint

    return [
        stage
        for stage, fp in snapshot_fingerprints(plan.sweep).items()
        if latest_fingerprint(instance, _key(plan, stage), None) != fp
        or not ArtifactRef(data, stage, fp).intact()
    ]


def steps(
    plan, instance, data: Path, force: bool, stores=None, tracking=None
) -> list[tuple[str, str | None]]:
    """(stage, partition) steps in dependency order after the input snapshots, the leaderboard last:
    complete partitions are left out. An evaluation or leaderboard is complete only when `tracking` (the
    MLflow resource) also holds its finished run, so an unchanged rerun launches no Dagster run for them."""
    from rag_assets.leaderboard import leaderboard_path
    from rag_core.stages import CONFIG_STAGE

    complete = completed(plan, instance, data, stores=stores)
    logged = {}
    if tracking is not None and not force:
        logged = {
            CONFIG_STAGE: tracking.logged(plan.sweep.name, "eval_fingerprint"),
            "leaderboard": tracking.logged(plan.sweep.name, "board_fingerprint"),
        }

    def todo(stage: str, key: str | None) -> bool:
        if force or (ref := complete(stage, key)) is None:
            return True
        if stage in (CONFIG_STAGE, "leaderboard") and tracking is None:
            return True  # no way to ask MLflow: the step makes sure its run exists
        return logged.get(stage) is not None and ref.fp not in logged[stage]

    planned = [(stage, key) for stage, keys in plan.partitions.items() for key in keys if todo(stage, key)]
    board_file = leaderboard_path(data, plan.sweep.name)
    if planned or not board_file.exists() or todo("leaderboard", None):
        planned.append(("leaderboard", None))
    return planned


def holdout_steps(plan, instance, data: Path, force: bool, board_ran: bool, stores=None) -> list:
    """After the leaderboard: the holdout partitions of its finalists that are not complete, then the
    confirmation (rag_assets/confirmation.py) unless it is complete and the leaderboard did not run (a
    leaderboard run logged again to MLflow gets the holdout from it again)."""
    from rag_assets.leaderboard import read_decision

    complete = completed(plan, instance, data, stores=stores)
    finals = read_decision(data, plan.sweep.name).get("finalists") or []
    if not finals:  # a QA set too small to hold any question out: nothing to confirm
        return []
    todo = [step for k in finals for step in plan.holdout_steps(k) if force or complete(*step) is None]
    if todo or force or board_ran or complete("confirmation", None) is None:
        todo.append(("confirmation", None))
    return todo


def run_sweep(
    spec: str,
    data_dir: str | None = None,
    force: bool = False,
    verbose: bool = False,
    progress: bool = True,
    resources: dict | None = None,
    store: str | None = None,
    workers: int | None = None,
) -> SweepRun:
    """Materialize every stage of the sweep. `resources` overrides the configured ones (e.g. an LLM
    client pointed at another server); `store` is the vector store of configs that name none (default
    $RAG_VECTOR_STORE, else lancedb); `workers`: processes that run independent partitions at once
    (default $RAG_WORKERS, else half the cores available; 1 runs every step in this process)."""
    import dagster as dg
    import polars as pl
    from tqdm import tqdm

    from rag_assets.definitions import build_definitions
    from rag_assets.leaderboard import leaderboard_path
    from rag_assets.lib.rag_sweep import deployment_llm_api_base, deployment_store
    from rag_assets.search_run import adaptive
    from rag_assets.stage_asset import FORCE_TAG
    from rag_assets.step_runs import (
        ALONE,
        STAGE_LIMITS,
        StepRunner,
        default_workers,
        run_in_workers,
        step_label,
        worker_count,
    )
    from rag_core.plan import Plan
    from rag_core.progress import listening
    from rag_core.spec import load_sweep
    from rag_core.step_graph import StepGraph
    from resources import default_data_dir

    plan = Plan.resolve(load_sweep(spec), store or deployment_store(), deployment_llm_api_base())
    workers = workers if workers is not None else default_workers()  # a bad $RAG_WORKERS: before any work
    data = Path(data_dir or default_data_dir()).resolve()
    with exclusive(data):
        defs = build_definitions([plan], str(data), resources)
        instance = _instance(data)
        if n := close_abandoned_runs(instance):
            print(f"marked {n} Dagster run(s) a killed rag-sweep run left started as failed", file=sys.stderr)
        assets = list(defs.assets)
        tags = {
            "sweep": plan.sweep.name,
            CLI_PID_TAG: str(os.getpid()),
            **({FORCE_TAG: "true"} if force else {}),
        }
        config = {} if verbose else QUIET_LOGS

        runner = StepRunner(defs, instance, tags, verbose, plan)

        def materialize(stage: str, key: str | None = None, extra_tags: dict | None = None) -> None:
            for line in runner(stage, key, extra_tags):
                tqdm.write(line, file=sys.stderr)

        from dagster._core.definitions.observe import observe  # not re-exported at the top level

        sweep = plan.sweep
        if sweep.qa_generation is not None and not sweep.qa_path.exists():
            print(f"generating the QA set {sweep.qa_path} with {sweep.qa_generation.model}", file=sys.stderr)
            materialize("qa_file")  # an existing file (a reviewed copy) is used as is
        sources = [a for a in assets if isinstance(a, dg.SourceAsset) or a.is_observable]
        # the input files' content hashes, as the UI would observe them; an unchanged file is not observed again
        if changed := unobserved(instance, sources):
            observe(changed, instance=instance, run_config=config)
        for stage in ("corpus", "qa_set") if force else stale_snapshots(plan, instance, data):
            materialize(stage)
        stores = defs.resources["vector_stores"]
        todo = steps(plan, instance, data, force, stores, defs.resources["tracking"])
        search = None
        work_bars = WorkBars(progress)
        with listening(work_bars):  # texts embedded, questions answered: a bar inside the step
            if adaptive(plan):
                partitions = [step for step in todo if step[0] != "leaderboard"]
                search = _adaptive(plan, instance, data, partitions, force, materialize, progress, stores)
                materialize("leaderboard")
            elif not todo:
                if not plan.holdout:  # (with a holdout: said once the holdout is known complete too)
                    print("every partition is up to date: nothing to compute", file=sys.stderr)
            else:
                graph = StepGraph(todo, lambda step: _reads(plan, step), STAGE_LIMITS, ALONE)
                n = worker_count(graph, workers, resources, plan)
                # no ETA: steps differ by orders of magnitude (embedding a corpus, reading a cached index)
                bar = tqdm(total=len(todo), bar_format=STEPS_BAR, disable=not progress, file=sys.stderr)
                if n > 1:
                    run_in_workers(graph, n, plan, data, resources, tags, verbose, bar, work_bars)
                else:
                    for stage, key in todo:
                        bar.set_description(step_label(plan, stage, key)[:60])
                        materialize(stage, key)
                        bar.update(1)
                bar.close()
            if plan.holdout:  # the finalists, on the questions no selection step saw
                held = holdout_steps(plan, instance, data, force, adaptive(plan) or bool(todo), stores)
                if not todo and not held:
                    print("every partition is up to date: nothing to compute", file=sys.stderr)
                bar = tqdm(
                    total=len(held), bar_format=STEPS_BAR, disable=not progress or not held, file=sys.stderr
                )
                for stage, key in held:
                    bar.set_description(step_label(plan, stage, key)[:60])
                    materialize(stage, key)
                    bar.update(1)
                bar.close()
        board = pl.read_parquet(leaderboard_path(data, plan.sweep.name))
        return SweepRun(board, defs, instance, plan, data, search)


STEPS_BAR = "{desc}step {n_fmt}/{total_fmt} [{elapsed}]"  # tqdm ends a desc with ": "


class WorkBars:
    """The progress listener of a run (rag_core/progress.py): one bar per long piece of work inside the
    current step (texts embedded, questions answered), under the steps bar, gone when it completes."""

    def __init__(self, enabled: bool):
        self.enabled, self.bars = enabled, {}

    def __call__(self, what: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if not self.enabled:
            return
        bar = self.bars.get(what)
        if bar is not None and done < bar.n:  # the same work in a next step
            bar.close()
            bar = None
        if bar is None:
            if done >= total:
                return
            bar = self.bars[what] = tqdm(  # under the steps bar; several when steps run at once
                total=total,
                desc=f"  {what}",
                position=1 + len(self.bars),
                leave=False,
                file=sys.stderr,
                dynamic_ncols=True,
            )
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self.bars[what]


def search_ledger(data: Path, sweep: str, restart: bool):
    """`spent()`: the LLM calls and USD paid since this sweep's search started (the call cache's ledger,
    resources/llm_cache.py); a rerun continues the same search and its budget, `--force` starts anew."""
    import json

    from resources.llm_cache import LLMCache

    marker = data / "searches" / f"{sweep}.json"
    if restart or not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"started": time.time()}))
    started = json.loads(marker.read_text())["started"]
    cache = LLMCache(data / "llm_cache.sqlite")
    return lambda: cache.spent(started)


def _adaptive(plan, instance, data: Path, todo, force: bool, materialize, progress: bool, stores):
    """Run the sweep's adaptive search (rag_assets/search_run.py) over the plan's configs."""
    from tqdm import tqdm

    from rag_assets.search_run import run_halving, run_search, trial_budget
    from rag_assets.stage_asset import QUESTIONS_TAG, split_inputs
    from rag_core.holdout import SELECTION

    complete = completed(plan, instance, data, stores=stores)
    spent = search_ledger(data, plan.sweep.name, restart=force)
    bar = tqdm(total=trial_budget(plan), desc="search", unit="config", disable=not progress, file=sys.stderr)

    def show(message: str) -> None:
        bar.set_description(message[:70])
        bar.update(1)

    if plan.sweep.search.strategy == "halving":
        rungs = {None: complete}

        def at(n: int | None):
            if n not in rungs:
                rungs[n] = completed(plan, instance, data, n, stores)
            return rungs[n]

        def rung_step(stage: str, key: str, n: int | None) -> bool:
            if not force and at(n)(stage, key) is not None:
                return False  # this rung of the partition is complete: read back, not recomputed
            materialize(stage, key, {QUESTIONS_TAG: str(n)} if n is not None else None)
            return True

        from resources.artifacts import ArtifactRef, latest_fingerprint

        qa_fp = latest_fingerprint(instance, _key(plan, "qa_set"), None)
        split = {"qa_set": ArtifactRef(data, "qa_set", qa_fp)}
        if plan.holdout:  # the search sees the selection split only
            split = split_inputs(plan, SELECTION, split)
        ids = split["qa_set"].read()["query_id"].to_list()
        bar.total = None
        report = run_halving(
            plan,
            ids,
            rung_step,
            lambda key, n: at(n)("evaluations", key).read("per_query"),
            spent,
            show,
        )
    else:

        def summary_of(key: str) -> dict | None:
            ref = complete("evaluations", key)
            return ref.read().to_dicts()[0] if ref else None

        report = run_search(plan, todo, materialize, summary_of, spent, show, resume=not force)
    bar.close()
    return report


def _reads(plan, step: tuple[str, str | None]) -> list[tuple[str, str | None]]:
    """The steps whose artifacts a step reads: its partition's upstream partitions; the leaderboard
    reads every evaluation."""
    from rag_core.stages import CONFIG_STAGE

    stage, key = step
    if stage == "leaderboard":
        return [(CONFIG_STAGE, k) for k in plan.config_keys]
    return [(s, k) for s, k in plan.partition(stage, key).reads.items() if k is not None]


def _key(plan, stage: str):
    """The asset key of a stage of the plan's sweep."""
    from rag_assets.stage_asset import asset_key
    from rag_assets.sweep_defs import prefix_of

    return asset_key(prefix_of(plan.sweep.name), stage)


class DataDirError(RuntimeError):
    """The data dir cannot hold a run's artifacts and stores."""


class CheckFailed(RuntimeError):
    """A blocking asset check failed with severity ERROR: the sweep stops before bad data spreads."""


class StepFailed(RuntimeError):
    """A step raised: the message is one line naming the step and the cause; the cause is chained."""

    @classmethod
    def of(cls, where: str, cause: BaseException) -> Exception:
        from rag_core.datasets import DatasetError
        from rag_core.spec import SpecError

        if isinstance(cause, DatasetError | SpecError):  # already names the file, row and field
            return cause
        import dagster as dg

        what = cause.description if isinstance(cause, dg.Failure) else f"{type(cause).__name__}: {cause}"
        return cls(f"{where}: {what}")


def _load_data(sweep):
    """Load the corpus and QA set as a run would (cheap next to a run): a missing or bad file is an error
    naming its field of the sweep file, then the file, row and field."""
    from rag_core.datasets import DatasetError, load_corpus, load_qa

    try:
        corpus = load_corpus(sweep.corpus_path)
    except DatasetError as e:
        raise DatasetError(f"{sweep.path}: field 'data.corpus': {e}") from None
    if sweep.qa_generation is not None and not sweep.qa_path.exists():
        return corpus, None  # the run writes it first (qa_generation)
    try:
        qa = load_qa(sweep.qa_path, set(corpus["doc_id"].to_list()), sweep.max_queries, corpus)
    except DatasetError as e:
        raise DatasetError(f"{sweep.path}: field 'data.qa': {e}") from None
    return corpus, qa


LARGE_SWEEP = 500  # configs a grid evaluates one by one before validate suggests sampling them


def _warn_size(plan) -> None:
    """A grid evaluates every config, each stage a Dagster run per partition: say what that means."""
    steps = sum(len(keys) for keys in plan.partitions.values())
    search = plan.sweep.search
    if search.adaptive:
        print(
            f"a {search.strategy} search evaluates {search.budget.max_configs or 'all'} of the "
            f"{len(plan.configs)} configs, choosing as it goes"
        )
        return
    print(f"a run evaluates all {len(plan.configs)} configs: up to {steps} steps, one Dagster run each")
    if len(plan.configs) > LARGE_SWEEP:
        print(
            f"warning: {len(plan.configs)} configs is a large grid; `rag-sweep plan` estimates its time. To "
            "evaluate a part of it, set search.strategy: bayesian or halving (they choose as they go) or "
            "random, with search.budget.max_configs",
            file=sys.stderr,
        )


def _warn_unsegmented(plan, corpus, qa) -> None:
    """Keyword search cannot split text written without spaces between words (rag_core/text.py)."""
    from rag_core.text import UNSEGMENTED_ADVICE, unsegmented_share

    if all(c.retrieval.mode == "vector" for c in plan.configs):
        return
    docs = unsegmented_share(corpus["text"].to_list())
    questions = unsegmented_share(qa["question"].to_list()) if qa is not None else 0.0
    if docs or questions:
        print(
            f"warning: {docs:.0%} of the documents and {questions:.0%} of the questions are written without "
            f"spaces between words. {UNSEGMENTED_ADVICE}",
            file=sys.stderr,
        )


# Shown only when some config has a non-zero value: they say a score is not what it seems.
WARNING_COLUMNS = ["n_generation_errors", "n_judge_failures", "chunk_truncated_share"]


def bill(spec: str, data_dir: str | None = None, store: str | None = None):
    """What `rag-sweep run` would compute for this sweep and data dir (rag_core/bill.py), from the files
    as they are now: nothing is materialized."""
    import polars as pl

    from rag_assets.lib.rag_sweep import deployment_llm_api_base, deployment_store
    from rag_core.bill import estimate
    from rag_core.chunking import chunk_corpus
    from rag_core.fingerprint import file_hash
    from rag_core.holdout import holdout_ids
    from rag_core.plan import Plan
    from rag_core.spec import load_sweep
    from rag_core.stages import artifact_fingerprint
    from resources import default_data_dir
    from resources.artifacts import ArtifactRef
    from resources.embedders import EmbeddingService
    from resources.llm import price

    plan = Plan.resolve(load_sweep(spec), store or deployment_store(), deployment_llm_api_base())
    sweep, data = plan.sweep, Path(data_dir or default_data_dir()).resolve()
    corpus, qa = _load_data(sweep)  # a missing or bad file is an error naming its field
    corpus_fp = artifact_fingerprint("corpus", file_hash(sweep.corpus_path), {})
    if qa is not None:
        n_queries = qa.height
        qa_fp = artifact_fingerprint(
            "qa_set", (file_hash(sweep.qa_path), sweep.max_queries), {"corpus": corpus_fp}
        )
    else:  # to be generated: nothing downstream of it can exist yet
        from rag_assets.qa_generation import estimate_line

        print(estimate_line(sweep.qa_generation, corpus, sweep.qa_path))
        n_queries, qa_fp = sweep.qa_generation.questions, "to-be-generated"
    expected = plan.fingerprints({"corpus": corpus_fp, "qa_set": qa_fp})
    done = {(s, k) for (s, k), fp in expected.items() if ArtifactRef(data, s, fp).intact()}
    embedder = EmbeddingService(cache_dir=str(data / "embedding_cache"))

    def chunks_of(key: str) -> pl.DataFrame:
        ref = ArtifactRef(data, "chunksets", expected[("chunksets", key)])
        if ref.intact():
            return ref.read()
        cfg = plan.partition("chunksets", key).config.chunking
        tokenize = (lambda texts: embedder.token_offsets(cfg.model, texts)) if cfg.unit == "tokens" else None
        method = (
            "sentence" if cfg.method == "semantic" else cfg.method
        )  # semantic cuts need embeddings: about
        return chunk_corpus(corpus, method, cfg.chunk_size, cfg.chunk_overlap, tokenize=tokenize)

    held = 0
    if plan.holdout and qa is not None:  # the selection's questions; the holdout's are the finalists'
        d = plan.sweep.decision
        held = len(holdout_ids(qa["query_id"].to_list(), d.holdout, d.holdout_seed))
    bill = estimate(
        plan, done, chunks_of, embedder.cached_hashes, n_queries - held, price, holdout_questions=held
    )
    return plan, bill


def _print_board(board, full_table: Path | None = None) -> None:
    """The leaderboard as a compact table (short labels; fits 120 columns) with a legend."""
    from rag_core.leaderboard import TERMINAL_LEGEND, to_terminal

    cols = [
        "rank",
        "label" if "label" in board.columns else "config_key",
        "overall_score",
        "overall_ci95",
        "tier",
        "vs_leader",
        "recall_at_k",
        "ndcg_at_k",
        "exact_match",
        "token_f1",
        "faithfulness",
        "retrieval_p50_ms",
    ]
    cols += [c for c in WARNING_COLUMNS if c in board.columns and board[c].fill_null(0).sum() > 0]
    print(to_terminal(board, cols))
    print("\n" + textwrap.fill(TERMINAL_LEGEND, width=118))
    if full_table is not None:
        print(f"every metric and the full config keys: {full_table}")


def _print_recommendation(data: Path, sweep: str) -> None:
    from rag_assets.leaderboard import leaderboard_path, read_decision

    decision = read_decision(data, sweep)
    print(f"\nRecommended: {decision['recommended'] or 'none'}\n  {decision['why']}")
    if decision["advice"]:
        print(f"  {decision['advice']}")
    if held := decision.get("holdout"):
        print(
            f"  Holdout ({held['share']:.0%} of the QA set): "
            + ("pending" if held.get("pending") else held["verdict"])
        )
    if decision.get("undefined_metrics"):
        print(
            f"  Undefined for every config, left out of the overall score: {', '.join(decision['undefined_metrics'])}"
            " (retrieval metrics need queries with gold documents)"
        )
    print(f"  Ship report: {leaderboard_path(data, sweep).with_suffix('.report.html')}")


def _write(board, output: str) -> None:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        board.write_csv(path)
    elif path.suffix == ".parquet":
        board.write_parquet(path)
    else:
        raise SystemExit(f"--output {output}: use a .csv or .parquet path")
    print(f"leaderboard written to {path}")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `rag-sweep validate ... | head`: the reader left; no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
        return 0


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="rag-sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="materialize a sweep end to end and print its leaderboard")
    run.add_argument("spec", help="sweep YAML file")
    run.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    run.add_argument("--output", help="also write the leaderboard to this .csv or .parquet path")
    run.add_argument(
        "--store", help="vector store of configs that name none (default $RAG_VECTOR_STORE or lancedb)"
    )
    run.add_argument("--force", action="store_true", help="recompute every stage even if its artifact exists")
    run.add_argument("--verbose", action="store_true", help="show Dagster's event log")
    run.add_argument(
        "--workers",
        type=int,
        help="processes that run independent partitions at once (default $RAG_WORKERS, else half the "
        "cores available; 1: every step in this process)",
    )
    val = sub.add_parser("validate", help="validate a sweep file and its data, and list its configs")
    val.add_argument("spec")
    pln = sub.add_parser("plan", help="what a run would compute and cost, before running it")
    pln.add_argument("spec")
    pln.add_argument("--data-dir", help="artifact directory (default $RAG_DATA_DIR or ./.rag_data)")
    pln.add_argument("--store", help="vector store of configs that name none")
    gen = sub.add_parser("generate-qa", help="write a QA set from a corpus through an LLM (then review it)")
    gen.add_argument("corpus", help="corpus file or folder (the formats a sweep's data.corpus reads)")
    gen.add_argument("--model", required=True, help="any litellm model string, e.g. openai/gpt-4o-mini")
    gen.add_argument("--out", required=True, help="the QA set to write (.jsonl)")
    gen.add_argument("--questions", type=int, default=50, help="questions to keep (default 50)")
    gen.add_argument("--types", help="question type weights, e.g. factoid=0.7,multi_hop=0.2,unanswerable=0.1")
    gen.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    gen.add_argument(
        "--no-require-context",
        action="store_true",
        help="keep questions the model answers without the passage",
    )
    gen.add_argument("--max-calls", type=int, help="the budget: no LLM call beyond this many")
    gen.add_argument(
        "--data-dir", help="where the LLM call cache lives (default $RAG_DATA_DIR or ./.rag_data)"
    )
    gen.add_argument(
        "--dry-run", action="store_true", help="print the estimated calls and cost, write nothing"
    )
    gen.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = parser.parse_args(argv)

    from dagster._core.errors import DagsterExecutionInterruptedError

    from rag_core.datasets import DatasetError
    from rag_core.spec import SpecError, load_sweep

    try:
        if args.command == "generate-qa":
            from rag_assets.qa_generation import generate_qa_command

            return generate_qa_command(args)
        if args.command == "validate":
            from rag_assets.lib.rag_sweep import deployment_llm_api_base, deployment_store
            from rag_core.plan import Plan

            plan = Plan.resolve(load_sweep(args.spec), deployment_store(), deployment_llm_api_base())
            corpus, qa = _load_data(plan.sweep)
            if qa is None:
                from rag_assets.qa_generation import estimate_line

                print(estimate_line(plan.sweep.qa_generation, corpus, plan.sweep.qa_path))
            questions = qa.height if qa is not None else f"{plan.sweep.qa_generation.questions} generated"
            print(
                f"{plan.sweep.name}: {corpus.height} documents, {questions} questions; "
                f"{len(plan.configs)} configs, "
                + ", ".join(f"{len(keys)} {stage}" for stage, keys in plan.partitions.items())
            )
            _warn_unsegmented(plan, corpus, qa)
            for key in plan.config_keys:
                print(f"  {key}")
            _warn_size(plan)
            return 0
        if args.command == "plan":
            plan, estimate = bill(args.spec, args.data_dir, args.store)
            search = plan.sweep.search
            adaptive = (
                f"; search {search.strategy} evaluates {search.budget.max_configs or 'all'} of them"
                if search.strategy == "bayesian"
                else f"; search halving starts {search.budget.max_configs or 'all'} of them on "
                f"{search.start_questions} questions"
                if search.strategy == "halving"
                else ""
            )
            print(f"{plan.sweep.name}: {len(plan.config_keys)} configs{adaptive}")
            print("\n".join(estimate.lines()))
            return 0
        if args.workers is not None and args.workers < 1:
            raise SpecError(f"--workers {args.workers}: expected 1 or more worker processes")
        if args.output and Path(args.output).suffix not in (".csv", ".parquet"):
            raise SpecError(f"--output {args.output}: use a .csv or .parquet path")  # before any work
        t0 = time.perf_counter()
        board, defs, _, plan, data, search = run_sweep(
            args.spec, args.data_dir, args.force, args.verbose, store=args.store, workers=args.workers
        )
        sweep = plan.sweep
    except (KeyboardInterrupt, DagsterExecutionInterruptedError):
        print(
            "\ninterrupted: every complete artifact is kept; run the same command again to resume",
            file=sys.stderr,
        )
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)  # now: LLM calls still in flight would hold the exit until they end or time out
    except (SpecError, DatasetError, DataDirError, CheckFailed, StepFailed) as e:
        if getattr(args, "verbose", False):
            traceback.print_exception(e.__cause__ or e, file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        if args.command == "run" and not args.verbose:
            print("(rerun with --verbose for the traceback)", file=sys.stderr)
        return 2 if not isinstance(e, StepFailed) else 1
    print(
        f"\nLeaderboard of sweep {sweep.name} ({board.height} configs, {time.perf_counter() - t0:.0f} s):\n"
    )
    from rag_assets.leaderboard import leaderboard_path

    _print_board(board, leaderboard_path(data, sweep.name))
    if search is not None:
        print(
            f"\nSearch ({sweep.search.strategy}): {len(search.evaluated)} of {len(plan.config_keys)} configs "
            f"evaluated ({search.resumed} by an earlier run), {search.index_builds} index builds, "
            f"{search.llm_calls} LLM calls paid, ${search.llm_cost_usd:.4f}; stopped by {search.stopped_by}"
        )
        for key, n in (search.dropped or {}).items():
            print(f"  dropped after {n} questions: {key}")
    _print_recommendation(data, sweep.name)
    if args.output:
        _write(board, args.output)
    spec_path = Path(args.spec).resolve()
    print(
        "\nExplore the results:\n"
        f"  Dagster UI: DAGSTER_HOME={data / 'dagster_home'} RAG_SWEEP={spec_path} RAG_DATA_DIR={data} "
        f"RAG_VECTOR_STORE={plan.store} "
        ".venv/bin/dagster dev   (then open http://127.0.0.1:3000)\n"
        f"  MLflow UI:  LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/mlflow ui --backend-store-uri "
        f"sqlite:///{data / 'mlflow.db'}   (then open "
        f"{defs.resources['tracking'].ranked_runs_url(sweep.name) or 'http://127.0.0.1:5000'}: "
        f"experiment {sweep.name}, best first)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

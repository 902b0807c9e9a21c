"""How a sweep run materializes a step (one stage, one partition) as a Dagster run, in this process or
in worker processes that run independent partitions at once.

A Dagster run executed in process captures the process's stdout and stderr for its step, so two runs
cannot share one process: a worker is a process of its own (started fresh, not forked from a process
holding open SQLite connections), builds the same definitions from the same plan, and writes to the same
instance, MLflow store and data dir. The parent hands out steps as their inputs complete
(rag_core/planning/step_graph.py) and draws progress the workers report.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError, DagsterExecutionStepExecutionError

from rag_core.planning.spec import SpecError
from resources.environment import env_number
from resources.storage import data_root
from runner.errors import CheckFailed, StepFailed
from runner.instance import RUNNER_PID_TAG, local_instance
from runner.plans import asset_key, runner_definitions

# Embedding already keeps every core busy, and two embeddings at once would each embed the texts they
# share: one at a time. Other stages mostly wait on Python, storage and Dagster's bookkeeping.
STAGE_LIMITS = {"embeddings": 1}
# Stages that time their queries (retrieval, reranking, generation latency: the decision's p95) run alone,
# so a latency is that of the config, not of a machine busy with other steps.
ALONE = ("retrievals", "rerankings", "answers")
# Below this many steps two workers would still be starting (each imports Dagster and builds the
# definitions, ~2.5 s) when the steps are done in process: not worth it.
MIN_PARALLEL_STEPS = 8
# Without `verbose` Dagster's console stays silent: warnings are returned one per line after each step, and a
# failed step raised as one line (file, row, field), its traceback kept for --verbose.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def default_workers() -> int:
    """Worker processes of a run: $RAG_WORKERS, else half the cores this process may use (1 on 2 cores).
    A worker's steps mostly keep one core busy, embedding keeps all of them busy, and each worker pays
    its own start (imports, definitions, model): on 2 cores two workers ran the example sweep x0.96 as
    fast as one process with x1.11 its CPU (benchmarks/parallel_steps.py)."""
    if (n := env_number("RAG_WORKERS", None, int)) is not None:
        if n < 1:
            raise SpecError(f"$RAG_WORKERS={n}: expected 1 or more worker processes")
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // 2)


@dataclass
class StepRunner:
    """Materializes one step of the plan's sweep as a Dagster run on `instance`; returns the warnings its
    step logged (one line each), raises StepFailed or CheckFailed (runner/errors.py)."""

    defs: Any
    instance: Any
    tags: dict[str, str]
    verbose: bool
    plan: Any
    assets: list = field(init=False)

    def __post_init__(self):
        self.assets = list(self.defs.assets)

    def __call__(self, stage: str, key: str | None = None, extra_tags: dict | None = None) -> list[str]:
        where = f"{stage}[{key}]" if key else stage
        try:
            result = dg.materialize(
                self.assets,
                selection=[asset_key(self.plan, stage)],
                partition_key=key,
                instance=self.instance,
                resources=self.defs.resources,
                tags={**self.tags, **(extra_tags or {})},
                run_config={} if self.verbose else QUIET_LOGS,
                raise_on_error=True,
            )
        except DagsterExecutionStepExecutionError as e:
            raise StepFailed.of(where, e.user_exception) from e
        except (KeyboardInterrupt, DagsterExecutionInterruptedError):
            raise
        except Exception as e:  # raise_on_error re-raises most step errors as themselves
            raise StepFailed.of(where, e) from e
        warnings = []
        if not self.verbose:
            for entry in self.instance.all_logs(result.run_id):
                if entry.level >= logging.WARNING and not entry.is_dagster_event:
                    warnings.append(f"warning: {where}: {entry.user_message}")
        for check in result.get_asset_check_evaluations():
            if not check.passed and check.blocking and check.severity == dg.AssetCheckSeverity.ERROR:
                raise CheckFailed(f"{where}: check {check.check_name!r} failed: {dict(check.metadata)}")
        return warnings


def step_label(plan, stage: str, key: str | None) -> str:
    """A step as the progress bars show it: the stage and its partition's short label."""
    from rag_core.decision.holdout import is_holdout_key, selection_key

    if key and is_holdout_key(key):
        return f"{stage}[{plan.labels.get(selection_key(key), key)} holdout]"
    return f"{stage}[{plan.labels.get(key, key)}]" if key else stage


def worker_count(graph, requested: int, resources: dict | None, plan) -> int:
    """How many worker processes to run `graph`'s steps in: 1 (in this process) when there are few steps,
    no two of them can run at once, or the plan or resource overrides cannot be sent to another process."""
    n = min(requested, graph.width())
    if n < 2 or len(graph.order) < MIN_PARALLEL_STEPS:
        return 1
    try:
        pickle.loads(pickle.dumps((plan, portable(resources))))
    except Exception:  # e.g. a resource holding a live client: run here, as before
        return 1
    return n


def portable(resources: dict | None) -> dict | None:
    """Resource overrides as (class, field values): a Dagster resource does not unpickle whole."""
    if resources is None:
        return None
    out = {}
    for name, r in resources.items():
        if not isinstance(r, dg.ConfigurableResource):
            raise TypeError(f"resource {name!r} is not a ConfigurableResource")
        out[name] = (type(r), {k: getattr(r, k) for k in type(r).model_fields})
    return out


# ---- in a worker process ---------------------------------------------------------------------------

_RUNNER: StepRunner | None = None
_EVENTS = None


def _watch_parent(parent: int) -> None:
    """A worker whose parent is gone (killed) ends: no one would hand it steps or read its results."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def _start(plan, data: str, resources: dict | None, tags: dict, verbose: bool, events, parent: int) -> None:
    global _RUNNER, _EVENTS
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if resources is not None:
        resources = {name: cls(**fields) for name, (cls, fields) in resources.items()}
    defs = runner_definitions(plan, data, resources)
    # the worker's own pid: a later run closes this Dagster run as abandoned only once this process is gone
    _RUNNER = StepRunner(
        defs, local_instance(data_root(data)), {**tags, RUNNER_PID_TAG: str(os.getpid())}, verbose, plan
    )
    _EVENTS = events


def _run(stage: str, key: str | None, label: str) -> list[str]:
    from rag_core.common.progress import listening

    def forward(what: str, done: int, total: int) -> None:
        _EVENTS.put((f"{what} [{label}]", done, total))

    with listening(forward):
        return _RUNNER(stage, key)


# ---- in the parent ---------------------------------------------------------------------------------


def run_in_workers(graph, n: int, plan, data: Path, resources, tags, verbose, bar, work_bars) -> None:
    """Run every step of `graph` in `n` worker processes, each as soon as its inputs are complete. A step
    that fails stops new steps from starting; the running ones finish (their artifacts are complete and
    kept), then the first failure is raised. A worker that dies (killed) takes the steps running in the
    others with it (the pool stops every worker): unless another step failed first, each is named; all
    resume on the next run."""
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    from tqdm import tqdm

    ctx = multiprocessing.get_context("spawn")
    events = ctx.Queue()
    pool = ProcessPoolExecutor(
        n,
        mp_context=ctx,
        initializer=_start,
        initargs=(plan, str(data), portable(resources), tags, verbose, events, os.getpid()),
    )
    running: dict = {}  # future -> (step, label)
    failure: BaseException | None = None
    broken: list[str] = []  # steps whose worker ended: the pool ends every worker when one dies
    try:
        while True:
            if failure is None:
                for step in graph.ready():
                    if len(running) >= n:
                        break
                    stage, key = step
                    label = step_label(plan, stage, key)
                    try:
                        future = pool.submit(_run, stage, key, label)
                    except BrokenProcessPool as e:  # a worker died since the last wait: its steps fail below
                        failure = failure or e
                        break
                    graph.start(step)
                    running[future] = (step, label)
                    bar.set_description(f"{len(running)} running, last {label}"[:60])
            if not running:
                break
            finished, _ = wait(running, timeout=0.1, return_when=FIRST_COMPLETED)
            _draw(events, work_bars)
            for future in finished:
                step, label = running.pop(future)
                try:
                    for line in future.result():
                        tqdm.write(line, file=sys.stderr)
                except BrokenProcessPool as e:
                    broken.append(label)
                    if failure is None:
                        failure = e
                    continue
                except BaseException as e:  # noqa: BLE001 (raised below, once the running steps end)
                    failure = failure or e
                    continue
                graph.finish(step)
                bar.update(1)
        _draw(events, work_bars)
    finally:
        pool.shutdown(wait=failure is not None or graph.finished, cancel_futures=True)
    if isinstance(failure, BrokenProcessPool):  # which worker died first is not known: name every step
        steps = f"{', '.join(sorted(broken))}: " if broken else ""
        raise StepFailed(
            f"{steps}a worker process ended abruptly (killed, out of memory, or it failed to start: see above) "
            "and the others were stopped with it; complete artifacts are kept: run the same command to resume"
        ) from failure
    if failure is not None:
        raise failure


def _draw(events, work_bars) -> None:
    while True:
        try:
            what, done, total = events.get_nowait()
        except queue.Empty:
            return
        work_bars(what, done, total)

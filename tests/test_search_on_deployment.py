"""An adaptive search on a Dagster deployment (webserver + daemon on PostgreSQL, the MLflow server): the
search job is launched through the webserver's GraphQL API as the UI launches it, with its budget as run
config; the search's sensor requests every step as an ordinary run through the run queue. It ends with the
leaderboard and recommendation `rag-sweep run` gives on the same sweep and data (the runner, in process),
and a daemon killed in the middle of it loses nothing and evaluates nothing twice (one test for both: a
search on a deployment is ~25 runs of ~10 s of Dagster bookkeeping each).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from rag_assets.board_files import read_decision
from rag_assets.orchestration.search import SEARCH_TAG, STEP_TAG, SearchState
from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep
from tests.servers import Deployment, deployment

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.stack]
NAME, PREFIX = "deployed-halving", "deployed_halving"


def _sweep(tmp_path: Path, slice_data: dict) -> Path:
    """Two configs on one index; halving over the 20 questions from 10; the recommendation is the best
    config of the top tier (not the fastest: latency differs between machines and runs)."""
    return write_sweep(
        tmp_path / "halving.yaml",
        slice_data,
        name=NAME,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": [1, 3]},
        search={"strategy": "halving", "start_questions": 10, "growth": 2},
        decision={"holdout": 0, "prefer": "best"},
    )


def _launch_search(d: Deployment, budget: dict) -> str:
    return d.launch_run(f"{PREFIX}__search", {"ops": {f"{PREFIX}__start_search": {"config": budget}}})


def _wait(d: Deployment, data: Path, until, timeout: float = 900) -> SearchState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = SearchState.load(data, NAME)
        if state is not None and until(state):
            return state
        time.sleep(2)
    raise TimeoutError(f"search state {SearchState.load(data, NAME)}\n{d.log('daemon')}")


def _steps_of(run) -> list[tuple]:
    """The steps a search's run materialized: one, or a batch of a stage's partitions."""
    steps = json.loads(run.tags[STEP_TAG])
    return [tuple(s) for s in steps] if steps and isinstance(steps[0], list) else [tuple(steps)]


def _step_runs(instance, state: SearchState, statuses: list | None = None) -> Counter:
    """How many runs the search requested for each step (a step requested twice counts 2)."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={SEARCH_TAG: state.id}, statuses=statuses))
    return Counter(step for r in runs for step in _steps_of(r))


def _same_board(deployed: Path, local: Path) -> None:
    cols = ["config_key", "tier", "overall_score", "recall_at_k", "token_f1", "n_queries", "recommended"]
    a, b = (
        pl.read_parquet(d / "leaderboards" / f"{NAME}.parquet").select(cols).sort("config_key")
        for d in (deployed, local)
    )
    assert a.to_dicts() == b.to_dicts()
    da, db = read_decision(deployed, NAME), read_decision(local, NAME)
    assert da["recommended"] == db["recommended"] and da["not_ranked"] == db["not_ranked"]


def test_a_halving_search_launched_from_the_ui_survives_its_daemon_and_matches_the_cli(
    slice_data, postgres_server, mlflow_server, tmp_path
):
    """Launched through GraphQL with a budget; the daemon killed once an evaluation is done, a new one
    started and the job launched again (a search started twice); it ends as `rag-sweep run` ends, and no
    step ran twice. One deployment for both claims: each search on it is ~25 runs of ~10 s of bookkeeping."""
    t0 = time.perf_counter()
    spec = _sweep(tmp_path, slice_data)
    data = tmp_path / "data"
    with deployment(tmp_path, spec, data, postgres_server, {"MLFLOW_TRACKING_URI": mlflow_server.url}) as d:
        first = _launch_search(d, {"max_configs": 3})
        instance = d.instance()

        def some_evaluated(state: SearchState) -> bool:
            done = instance.get_runs(
                filters=dg.RunsFilter(tags={SEARCH_TAG: state.id}, statuses=[dg.DagsterRunStatus.SUCCESS])
            )
            return any(step[0] == "evaluations" for r in done for step in _steps_of(r))

        _wait(d, data, some_evaluated)
        os.kill(d.daemon.pid, signal.SIGKILL)  # the daemon dies mid-search (its runs in flight go on)
        d.daemon.wait()
        time.sleep(3)
        assert SearchState.load(data, NAME).status == "running"
        d.daemon = d.start_daemon()
        _launch_search(d, {"max_configs": 3})  # started twice: it continues
        state = _wait(d, data, lambda s: s.status != "running")
        assert state.status == "done", f"{state.message}\n{d.log('daemon')}"
        assert instance.get_run_by_id(first).status == dg.DagsterRunStatus.SUCCESS
        done = _step_runs(instance, state, [dg.DagsterRunStatus.SUCCESS])
        asked = _step_runs(instance, state)
        runs = instance.get_runs(filters=dg.RunsFilter(tags={SEARCH_TAG: state.id}))
    # every step done once; a run the killed daemon was launching never started, was failed by run
    # monitoring and asked again: the only steps asked twice
    assert max(done.values()) == 1, [s for s, n in done.items() if n > 1]
    assert all(n == 1 or s in done for s, n in asked.items())
    evaluations = instance.fetch_materializations(dg.AssetKey([PREFIX, "evaluations"]), limit=1000).records
    rungs = Counter(
        (r.partition_key, instance.get_run_by_id(r.run_id).tags.get("rag/questions")) for r in evaluations
    )
    assert rungs and max(rungs.values()) == 1  # no config evaluated twice on a rung
    evaluated = {(k, n) for s, k, n in done if s == "evaluations"}
    assert evaluated == {(k, None if n is None else int(n)) for k, n in rungs}
    assert {n for _, n in evaluated} == {10, None}  # a rung of 10 questions, then the full set
    local = run_sweep(str(spec), str(tmp_path / "local"), progress=False)
    assert set(local.search.evaluated) == {k for k, _ in evaluated}
    _same_board(data, local.data)
    again = [s for s, n in asked.items() if n > 1]
    print(
        f"search on the deployment: {len(done)} steps, asked again after the daemon died: {again}; "
        f"{len(runs)} runs; "
        f"{time.perf_counter() - t0:.0f} s"
    )

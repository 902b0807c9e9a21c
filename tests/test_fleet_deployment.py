"""The whole stack, with no CLI anywhere: the Dagster webserver and daemon on PostgreSQL, indexes in the
Weaviate server, runs on the MLflow server, artifacts on the S3 server, and with $RAG_EXECUTOR=celery every
run the daemon launches executes its steps on two Celery workers (a RabbitMQ broker). A grid sweep with a
holdout is materialized from the UI (a backfill through GraphQL, as "Materialize all"); the daemon alone
then confirms its leaderboard on the holdout (the holdout driver) and registers the champion, which loads
and answers from its Weaviate collection. Then the nightly schedule ticks and its runs go to the workers
too. The board is the one `rag-sweep run` gives in process; every step names the worker that ran it;
nothing of the chain runs twice.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import dagster as dg
import polars as pl
import pytest

from rag_core.planning.stages import STAGES
from tests.conftest import TIMED, assert_same_board, write_sweep
from tests.servers import CeleryWorker, deployment, mlflow_tracking

# soak: 15-17 min on one of CI's two workers, a third of the suite's wall. Most of its parts run in CI (the
# fleet in tests/test_fleet.py, a run launched from the UI and the daemon's chain in
# tests/test_deployment_launch.py and tests/test_search_on_deployment.py, the nightly's definitions in
# tests/test_code_location.py); a nightly tick run by the daemon, on the fleet, only here (RAG_TEST_SOAK=1)
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.soak]
NAME, PREFIX = "fleet-ui", "fleet_ui"
NO_COMPUTE_LOGS = """
compute_logs:
  module: resources.dagster_private
  class: NoOpComputeLogManager
"""


@contextmanager
def _weaviate_env(server):
    """This process's Weaviate settings, as the deployment's (the model and a local run read them)."""
    saved = {k: os.environ.get(k) for k in ("WEAVIATE_URL", "WEAVIATE_GRPC_PORT")}
    os.environ.update({"WEAVIATE_URL": server.url, "WEAVIATE_GRPC_PORT": str(server.grpc_port)})
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _latest(instance, stage: str):
    records = instance.fetch_materializations(dg.AssetKey([PREFIX, stage]), limit=1).records
    return records[0] if records else None


def _settled(d, instance, until, what: str, timeout: float = 900, quiet_s: float = 40) -> None:
    """`until` holds, no run is in flight, and no new run was created for `quiet_s` (longer than Dagster's
    daemon's loops, 30 s for backfills and 5 s for sensors, plus the sensors' intervals, 10 s at most: the
    backfill, the automation sensor and the holdout driver would have asked by then)."""
    live = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    deadline, since, runs = time.monotonic() + timeout, None, -1
    while True:
        assert time.monotonic() < deadline, (
            f"no {what} after {timeout:.0f} s\n{_failures(instance)}\n{d.log('daemon')}"
        )
        now = instance.get_runs_count()
        if until() and not instance.get_runs(filters=dg.RunsFilter(statuses=live)) and now == runs:
            if time.monotonic() - since >= quiet_s:
                return
        else:
            since, runs = time.monotonic(), now
        time.sleep(2)


def _failures(instance) -> str:
    """What each failed or still live run says: its job, status and the messages of its failure events."""
    out = []
    for run in instance.get_runs():
        if run.status == dg.DagsterRunStatus.SUCCESS:
            continue
        said = [
            entry.message or ""
            for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE)
            for entry in instance.all_logs(run.run_id, of_type=kind)
        ]
        out.append(f"{run.job_name} {run.run_id[:8]} {run.status.value}: {' | '.join(said)[:2000]}")
    return "runs not successful:\n" + "\n".join(out) if out else "every run successful"


def _worker_of_each_run(instance, runs) -> dict[str, set[str]]:
    """run id -> the workers its steps ran on (Dagster's Celery tasks record one engine event per step)."""
    out = {}
    for run in runs:
        found = set()
        for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            worker = entry.dagster_event.engine_event_data.metadata.get("Celery worker")
            if worker is not None:
                found.add(worker.value.split("@")[0])
        out[run.run_id] = found
    return out


def test_a_ui_backfill_and_the_nightly_run_on_the_fleet_and_end_with_the_champion(
    slice_data, s3_server, postgres_server, mlflow_server, rabbitmq_server, weaviate_server, tmp_path
):
    from rag_sweep.runner import run_sweep
    from resources.shipping.registry import current_champion

    t0 = time.perf_counter()
    spec = write_sweep(
        tmp_path / "fleet-ui.yaml",
        slice_data,
        name=NAME,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": ["vector", "hybrid"], "top_k": 3, "hybrid_alpha": 0.5, "fusion": "weighted"},
        decision={"holdout": 0.3, "prefer": "best"},
    )
    data = f"s3://{s3_server.bucket}/fleet-ui"
    env = {
        **s3_server.env(),
        "MLFLOW_TRACKING_URI": mlflow_server.url,
        "CELERY_BROKER_URL": rabbitmq_server.url,
        "RAG_EXECUTOR": "celery",
        "RAG_VECTOR_STORE": "weaviate",
        "WEAVIATE_URL": weaviate_server.url,
        "WEAVIATE_GRPC_PORT": str(weaviate_server.grpc_port),
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "RAG_", "MLFLOW_"))}
    with deployment(tmp_path / "ui", spec, data, postgres_server, env, NO_COMPUTE_LOGS) as d:
        # the workers load the deployment's code (the same environment as its code server)
        worker_env = {
            **base,
            **{k: v for k, v in d.env.items() if k.startswith(("DAGSTER_PG_", "RAG_"))},
            **env,
        }
        workers = [CeleryWorker.start(n, "dagster", worker_env, tmp_path) for n in ("w1", "w2")]
        try:
            instance = d.instance()
            d.launch_backfill([[PREFIX, s.name] for s in STAGES if s.name != "confirmation"], "from the UI")
            _settled(d, instance, lambda: _latest(instance, "champion_model") is not None, "champion", 900)
            backfill_runs = instance.get_runs()
            # the nightly: the same deployment with its schedule due every minute; it re-asks every config
            # and the finalists' holdout, and the daemon confirms its last leaderboard again
            board_before = _latest(instance, "leaderboard").storage_id
            confirmed_before = _latest(instance, "confirmation").storage_id
            d.daemon.terminate()
            d.daemon.wait()
            d.env["RAG_NIGHTLY_CRON"] = "* * * * *"
            d.env["RAG_NIGHTLY_STATUS"] = "running"  # off unless a deployment asks for it
            d.daemon = d.start_daemon()
            schedule = {"dagster/schedule_name": f"{PREFIX}__evaluate_nightly"}
            deadline = time.monotonic() + 300
            before = -1  # the tick's runs (every config and the finalists' holdout), all submitted
            while True:
                assert time.monotonic() < deadline, f"no nightly tick\n{d.log('daemon')}"
                now = len(instance.get_runs(filters=dg.RunsFilter(tags=schedule)))
                if now and now == before:
                    break
                before = now
                time.sleep(5)
            # one tick, not one a minute: the daemon again with the deployment's nightly (02:00)
            d.daemon.terminate()
            d.daemon.wait()
            del d.env["RAG_NIGHTLY_CRON"]
            d.daemon = d.start_daemon()
            _settled(
                d,
                instance,
                lambda: (  # the champion follows the confirmation of the last leaderboard
                    _latest(instance, "leaderboard").storage_id > board_before
                    and _latest(instance, "confirmation").storage_id
                    > _latest(instance, "leaderboard").storage_id
                    and _latest(instance, "champion_model").storage_id
                    > _latest(instance, "confirmation").storage_id
                ),
                "nightly confirmation and champion",
            )
            nightly = [  # the selection's schedule and the holdout's
                r
                for name in ("evaluate_nightly", "evaluate_holdout_nightly")
                for r in instance.get_runs(
                    filters=dg.RunsFilter(tags={"dagster/schedule_name": f"{PREFIX}__{name}"})
                )
            ]
            finalists = instance.get_dynamic_partitions(f"{PREFIX}__holdout_finalists")
        finally:
            for w in workers:
                w.stop()
        runs = instance.get_runs()
        ran_on = _worker_of_each_run(instance, runs)
        failed = [r.run_id for r in runs if r.status != dg.DagsterRunStatus.SUCCESS]
        assert not failed, f"failed runs {failed}\n{d.log('daemon')}"
    # every run's steps ran on the fleet, both workers took some, the nightly's too
    assert all(ran_on[r.run_id] for r in runs), {r.job_name: ran_on[r.run_id] for r in runs}
    assert set().union(*ran_on.values()) == {"w1", "w2"}
    assert nightly and all(ran_on[r.run_id] for r in nightly)
    assert {r.tags["dagster/schedule_name"] for r in nightly} == {
        f"{PREFIX}__evaluate_nightly",
        f"{PREFIX}__evaluate_holdout_nightly",
    }
    assert len(backfill_runs) <= 15, [r.job_name for r in backfill_runs]  # a stage's partitions in one run
    # the chain: the backfill's leaderboard confirmed once; the nightly's last leaderboard confirmed
    confirmations = instance.fetch_materializations(dg.AssetKey([PREFIX, "confirmation"]), limit=100).records
    boards = instance.fetch_materializations(dg.AssetKey([PREFIX, "leaderboard"]), limit=100).records
    first = [c for c in confirmations if c.storage_id <= confirmed_before]
    assert len(first) == 1 and 2 <= len(confirmations) <= len(boards), (len(confirmations), len(boards))
    assert confirmations[0].storage_id > boards[0].storage_id  # the latest leaderboard is the confirmed one
    evaluations = instance.fetch_materializations(
        dg.AssetKey([PREFIX, "holdout_evaluations"]), limit=1000
    ).records
    held = [r.partition_key for r in evaluations if r.storage_id < confirmed_before]
    assert held and len(held) == len(set(held))  # each holdout evaluation once before the nightly
    # the holdout's assets hold the finalists' partitions only, each materialized: none shown as missing
    assert set(finalists) == {r.partition_key for r in evaluations}
    import mlflow

    client = mlflow.MlflowClient(mlflow_server.url)
    champion = current_champion(client, NAME)
    with mlflow_tracking(mlflow_server.url):
        versions = client.search_model_versions(f"name='{NAME}'")
    assert champion is not None and len(versions) == 1  # the nightly's same recommendation: no new version
    # the index lives in Weaviate; the registered champion loads and answers from its collection
    from resources.vector_stores.weaviate_store import WeaviateStore

    store = WeaviateStore(url=weaviate_server.url, grpc_port=weaviate_server.grpc_port)
    import s3fs

    fs = s3fs.S3FileSystem(
        key=s3_server.key_id, secret=s3_server.secret, client_kwargs={"endpoint_url": s3_server.endpoint}
    )
    markers = [p for p in fs.find(f"{s3_server.bucket}/fleet-ui/vector_index") if p.endswith(".parquet")]
    (marker,) = markers  # one index (one chunking, one embedder)
    collection = pl.read_parquet(fs.open(marker, "rb"))["collection"][0]
    assert store.info(collection)["exists"] and store.info(collection)["count"] > 100
    with _weaviate_env(weaviate_server):
        with mlflow_tracking(mlflow_server.url):  # the artifacts are the server's (mlflow-artifacts:/)
            model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
        questions = pl.read_parquet(slice_data["qa"])["question"].head(3).to_list()
        predicted = model.predict(pl.DataFrame({"question": questions}).to_pandas())
    assert (
        model.metadata.metadata["store"] == "weaviate" and model.metadata.metadata["collection"] == collection
    )
    assert [len(ids) for ids in predicted["doc_ids"]] == [3, 3, 3]
    # the leaderboard `rag-sweep run` gives in process on the same sweep and store (after the model's
    # check: the local run publishes the same collections again)
    with _weaviate_env(weaviate_server):
        local = run_sweep(str(spec), str(tmp_path / "local"), progress=False, store="weaviate")
    deployed = pl.read_parquet(fs.open(f"{s3_server.bucket}/fleet-ui/leaderboards/{NAME}.parquet", "rb"))
    assert_same_board(local.board, deployed, skip=TIMED)  # (the nightly added its drift columns)
    assert champion.tags["config_key"] == local.board.filter(pl.col("recommended"))["config_key"][0]
    print(f"fleet deployment: {len(runs)} runs ({len(nightly)} nightly), {time.perf_counter() - t0:.0f} s")

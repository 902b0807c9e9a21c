"""Whole stack: Dagster webserver + daemon on PostgreSQL, Weaviate indexes, MLflow tracking server.

A backfill of a sweep slice is launched through the webserver's GraphQL API (as the UI does), the daemon
runs it, and the test waits for the backfill to succeed and the leaderboard to exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from rag_core.planning.stages import STAGES
from resources.vector_stores.weaviate_store import WeaviateStore
from tests.conftest import write_sweep
from tests.servers import _stop, free_port, graphql, mlflow_tracking, wait_http

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.stack]
PREFIX = "stack_slice"

LAUNCH = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
  }
}"""
STATUS = """
query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status numCancelable }
    ... on PythonError { message }
  }
}"""


def test_backfill_through_webserver_and_daemon(
    slice_data, postgres_server, mlflow_server, weaviate_server, tmp_path
):
    t_start = time.perf_counter()
    spec = write_sweep(
        tmp_path / "stack.yaml",
        slice_data,
        name="stack-slice",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": ["vector", "hybrid"], "top_k": 5},
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    db = postgres_server.create_db("dagster_stack")
    data = tmp_path / "data"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_USER": postgres_server.user,
        "DAGSTER_PG_PASSWORD": "unused",
        "DAGSTER_PG_DB": db,
        "RAG_SWEEP": str(spec),
        "RAG_DATA_DIR": str(data),
        "RAG_VECTOR_STORE": "weaviate",
        "WEAVIATE_URL": weaviate_server.url,
        "WEAVIATE_GRPC_PORT": str(weaviate_server.grpc_port),
        "MLFLOW_TRACKING_URI": mlflow_server.url,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    bindir = Path(sys.executable).parent
    port = free_port()
    logs = {name: (tmp_path / f"{name}.log").open("w") for name in ("webserver", "daemon")}
    procs = [
        subprocess.Popen(
            [str(bindir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            stdout=logs["webserver"],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
        subprocess.Popen(
            [str(bindir / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            stdout=logs["daemon"],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
    ]
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/server_info", 120, procs[0], tmp_path / "webserver.log")
        launched = graphql(
            url,
            LAUNCH,
            {
                "params": {
                    # every stage of a sweep that holds no question out (write_sweep's default: no confirmation)
                    "assetSelection": [{"path": [PREFIX, s.name]} for s in STAGES if s.name != "confirmation"]
                    + [{"path": [PREFIX, "champion_model"]}],  # the winner, to the model registry
                    "allPartitions": True,
                    "title": "stack test",
                }
            },
        )["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        backfill_id = launched["backfillId"]
        status, deadline = None, time.monotonic() + 900
        while time.monotonic() < deadline:
            res = graphql(url, STATUS, {"id": backfill_id})["partitionBackfillOrError"]
            status = res["status"]
            if status not in ("REQUESTED", "CANCELING", "FAILING"):
                break
            time.sleep(3)
        daemon_log = (tmp_path / "daemon.log").read_text()[-3000:]
        assert status in ("COMPLETED_SUCCESS", "COMPLETED"), f"backfill {status}\n{daemon_log}"
    finally:
        for p in procs:
            _stop(p)
    board = pl.read_parquet(data / "leaderboards" / "stack-slice.parquet")
    assert board.height == 2 and board["recall_at_k"].min() > 0.3
    # the index lives in Weaviate and the runs in the MLflow server
    store = WeaviateStore(url=weaviate_server.url, grpc_port=weaviate_server.grpc_port)
    (marker,) = (data / "vector_index").glob("*.parquet")  # one index: its collection lives in Weaviate
    info_name = pl.read_parquet(marker)["collection"][0]
    info = store.info(info_name)
    assert info["exists"] and info["count"] > 100
    import mlflow

    with mlflow_tracking(mlflow_server.url):
        runs = mlflow.search_runs(experiment_names=["stack-slice"], filter_string="tags.config_key != ''")
    assert len(runs) == 2
    # the registry holds the recommendation; its index is the sweep's Weaviate collection, found by name
    from shipping.registry import current_champion

    client = mlflow.MlflowClient(mlflow_server.url)
    champion = current_champion(client, "stack-slice")
    recommended = board.filter(pl.col("recommended"))["config_key"][0]
    assert champion is not None and champion.tags["config_key"] == recommended
    env_before = {k: os.environ.get(k) for k in ("WEAVIATE_URL", "WEAVIATE_GRPC_PORT")}
    os.environ.update(
        {"WEAVIATE_URL": weaviate_server.url, "WEAVIATE_GRPC_PORT": str(weaviate_server.grpc_port)}
    )
    try:
        with mlflow_tracking(mlflow_server.url):  # the artifacts are the server's (mlflow-artifacts:/)
            model = mlflow.pyfunc.load_model("models:/stack-slice@champion")
        questions = pl.read_parquet(slice_data["qa"])["question"].head(3).to_list()
        predicted = model.predict(pl.DataFrame({"question": questions}).to_pandas())
    finally:
        for k, v in env_before.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert (
        model.metadata.metadata["store"] == "weaviate" and model.metadata.metadata["collection"] == info_name
    )
    assert [len(d) for d in predicted["doc_ids"]] == [5, 5, 5]
    print(f"whole-stack test: {time.perf_counter() - t_start:.0f} s")

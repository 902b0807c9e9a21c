"""The production parts on real servers: Dagster on PostgreSQL, MLflow tracking server (PostgreSQL
backend), Weaviate indexes; and Weaviate agreeing with the embedded store."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import mlflow
import polars as pl
import psycopg2
import pytest

from rag_sweep.runner import run_sweep
from resources.tracking import MlflowTracking
from resources.vector_stores import VectorStores
from tests.conftest import write_sweep
from tests.servers import mlflow_tracking

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spec(slice_data, tmp_path_factory) -> Path:
    return write_sweep(
        tmp_path_factory.mktemp("prod") / "prod.yaml",
        slice_data,
        name="prod-slice",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": ["vector", "bm25", "hybrid"], "top_k": 5},
    )


def postgres_home(pg, tmp_path: Path, monkeypatch) -> Path:
    db = pg.create_db(f"dagster_{tmp_path.name[-12:].lower().replace('-', '_')}")
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    for k, v in {
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(pg.port),
        "DAGSTER_PG_USER": pg.user,
        "DAGSTER_PG_PASSWORD": "unused-trust-auth",
        "DAGSTER_PG_DB": db,
        "DAGSTER_HOME": str(home),
    }.items():
        monkeypatch.setenv(k, v)
    return home


@pytest.fixture(scope="module")
def stack_run(spec, postgres_server, mlflow_server, weaviate_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    with pytest.MonkeyPatch.context() as mp:
        postgres_home(postgres_server, tmp, mp)
        resources = {
            "vector_stores": VectorStores(
                data_dir=str(tmp / "data"),
                weaviate_url=weaviate_server.url,
                weaviate_grpc_port=weaviate_server.grpc_port,
            ),
            "tracking": MlflowTracking(tracking_uri=mlflow_server.url, default_dir=str(tmp)),
        }
        run = run_sweep(str(spec), str(tmp / "data"), progress=False, resources=resources, store="weaviate")
        yield {"board": run.board, "instance": run.instance, "plan": run.plan, "data": run.data, "run": run}


def test_dagster_runs_events_and_partitions_are_in_postgres(stack_run, postgres_server):
    instance = stack_run["instance"]
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert instance.get_concurrency_config().pool_config.default_pool_limit == 2
    plan = stack_run["plan"]
    url = instance.run_storage.postgres_url.replace("postgresql+psycopg2", "postgresql")
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("select count(*), count(*) filter (where status = 'SUCCESS') from runs")
        total, ok = cur.fetchone()
        # one run per stage (a batch of its partitions): the snapshots, 7 stages, the leaderboard, the champion
        assert total == ok and 1 + 7 + 1 <= total <= 1 + 7 + 1 + 1, total
        cur.execute(
            "select asset_key, count(distinct partition) from event_logs "
            "where dagster_event_type = 'ASSET_MATERIALIZATION' group by asset_key"
        )
        partitions = {k: n for k, n in cur.fetchall()}
    assert partitions['["prod_slice", "retrievals"]'] == len(plan.keys("retrievals")) == 3
    assert partitions['["prod_slice", "evaluations"]'] == 3
    assert instance.get_materialized_partitions(dg.AssetKey(["prod_slice", "vector_index"])) == set(
        plan.keys("vector_index")
    )


def test_mlflow_server_holds_one_run_per_config(stack_run, mlflow_server, tmp_path):
    plan = stack_run["plan"]
    with mlflow_tracking(mlflow_server.url):
        runs = mlflow.search_runs(experiment_names=[plan.sweep.name], filter_string="tags.config_key != ''")
        assert sorted(runs["tags.config_key"]) == sorted(plan.config_keys)
        assert set(runs["params.index.store"]) == {"weaviate"}
        assert set(runs["params.retrieval.mode"]) == {"vector", "bm25", "hybrid"}
        assert runs["metrics.recall_at_k"].between(0, 1).all()
        local = mlflow.artifacts.download_artifacts(
            run_id=runs["run_id"][0], artifact_path="per_query.parquet", dst_path=str(tmp_path)
        )
        assert pl.read_parquet(local).height == 20
        boards = mlflow.search_runs(
            experiment_names=[plan.sweep.name], filter_string="tags.kind = 'leaderboard'"
        )
        assert len(boards) == 1


def test_weaviate_and_embedded_store_agree(stack_run, spec, tmp_path):
    """The same config on LanceDB and on Weaviate: same vector top-k and the same vector retrieval metrics."""
    weav = stack_run["board"]
    data = tmp_path / "lance"
    shutil.copytree(stack_run["data"] / "embedding_cache", data / "embedding_cache")  # embed nothing twice
    lance = run_sweep(str(spec), str(data), progress=False, store="lancedb")
    metrics = ["precision_at_k", "recall_at_k", "mrr", "ndcg_at_k", "hit_rate_at_k"]
    key = next(k for k in stack_run["plan"].config_keys if "__vector-" in k)
    twin = key.replace("__weaviate__", "__lancedb__")
    a = weav.filter(pl.col("config_key") == key).select(metrics).row(0)
    b = lance.board.filter(pl.col("config_key") == twin).select(metrics).row(0)
    assert a == pytest.approx(b, abs=1e-9)
    # per query top-k chunk ids agree (scores equal to float tolerance, so ties aside)
    retrieval = key.rsplit("__", 2)[0]
    ret = {
        "weaviate": stack_run["run"].artifact("retrievals", retrieval),
        "lancedb": lance.artifact("retrievals", retrieval.replace("__weaviate__", "__lancedb__")),
    }
    same = sum(
        x == y
        for x, y in zip(
            ret["weaviate"]["chunk_ids"].to_list(), ret["lancedb"]["chunk_ids"].to_list(), strict=True
        )
    )
    assert same >= 19, f"{same}/20 queries with identical vector top-5"
    for x, y in zip(ret["weaviate"]["scores"], ret["lancedb"]["scores"], strict=True):
        assert x.to_list() == pytest.approx(y.to_list(), abs=1e-4)

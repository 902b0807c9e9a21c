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

from rag_assets.cli import run_sweep
from rag_assets.lineage import Lineage
from resources.tracking import MlflowTracking
from resources.vector_stores import LanceDBStore
from resources.vector_stores.weaviate_store import WeaviateStore
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
            "vector_store": WeaviateStore(url=weaviate_server.url, grpc_port=weaviate_server.grpc_port),
            "tracking": MlflowTracking(tracking_uri=mlflow_server.url, default_dir=str(tmp)),
        }
        board, defs, instance, sweep, data = run_sweep(
            str(spec), str(tmp / "data"), progress=False, resources=resources
        )
        yield {"board": board, "instance": instance, "sweep": sweep, "data": data, "db": instance.run_storage}


def test_dagster_runs_events_and_partitions_are_in_postgres(stack_run, postgres_server):
    instance = stack_run["instance"]
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert instance.get_concurrency_config().pool_config.default_pool_limit == 2
    sweep = stack_run["sweep"]
    url = instance.run_storage.postgres_url.replace("postgresql+psycopg2", "postgresql")
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("select count(*), count(*) filter (where status = 'SUCCESS') from runs")
        total, ok = cur.fetchone()
        assert total == ok >= 1 + 1 + 1 + 1 + 1 + 3 + 3 + 3 + 1
        cur.execute(
            "select asset_key, count(distinct partition) from event_logs "
            "where dagster_event_type = 'ASSET_MATERIALIZATION' group by asset_key"
        )
        partitions = {k: n for k, n in cur.fetchall()}
    assert partitions['["retrievals"]'] == len(sweep.retrieval_keys) == 3
    assert partitions['["evaluations"]'] == 3
    assert instance.get_materialized_partitions(dg.AssetKey("vector_index")) == set(sweep.index_keys)


def test_mlflow_server_holds_one_run_per_config(stack_run, mlflow_server, tmp_path):
    sweep = stack_run["sweep"]
    with mlflow_tracking(mlflow_server.url):
        runs = mlflow.search_runs(experiment_names=[sweep.name], filter_string="tags.config_key != ''")
        assert sorted(runs["tags.config_key"]) == sorted(sweep.config_keys)
        assert set(runs["params.retrieval.mode"]) == {"vector", "bm25", "hybrid"}
        assert runs["metrics.recall_at_k"].between(0, 1).all()
        local = mlflow.artifacts.download_artifacts(
            run_id=runs["run_id"][0], artifact_path="per_query.parquet", dst_path=str(tmp_path)
        )
        assert pl.read_parquet(local).height == 20
        boards = mlflow.search_runs(experiment_names=[sweep.name], filter_string="tags.kind = 'leaderboard'")
        assert len(boards) == 1


def test_weaviate_and_embedded_store_agree(stack_run, spec, tmp_path):
    """The same config on LanceDB and on Weaviate: same vector top-k and the same vector retrieval metrics."""
    weav = stack_run["board"]
    data = tmp_path / "lance"
    shutil.copytree(stack_run["data"] / "embedding_cache", data / "embedding_cache")  # embed nothing twice
    lance, *_ = run_sweep(
        str(spec),
        str(data),
        progress=False,
        resources={"vector_store": LanceDBStore(uri=str(data / "lancedb"))},
    )
    metrics = ["precision_at_k", "recall_at_k", "mrr", "ndcg_at_k", "hit_rate_at_k"]
    key = next(k for k in stack_run["sweep"].config_keys if "__vector-" in k)
    a = weav.filter(pl.col("config_key") == key).select(metrics).row(0)
    b = lance.filter(pl.col("config_key") == key).select(metrics).row(0)
    assert a == pytest.approx(b, abs=1e-9)
    # per query top-k chunk ids agree (scores equal to float tolerance, so ties aside)
    sweep = stack_run["sweep"]
    config = next(c for c in sweep.configs if c.config_key == key)
    ret = {
        backend: pl.read_parquet(d / "retrievals" / f"{Lineage(sweep, backend).retrieval_fp(config)}.parquet")
        for backend, d in (("weaviate", stack_run["data"]), ("lancedb", data))
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

"""Materialize a slice of the example sweep in process, through the real assets, model, store and MLflow."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest
from mlflow import MlflowClient

from rag_assets.cli import plan, run_sweep
from rag_assets.lineage import Lineage
from rag_core.metrics import SCORABLE_METRICS
from resources.artifacts import ArtifactStore

pytestmark = pytest.mark.slow


def _materializations(instance, asset: str) -> list:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
    return [r.asset_materialization for r in records]


def test_every_partition_materialized(sweep_run):
    sweep, instance = sweep_run["sweep"], sweep_run["instance"]
    expected = {
        "chunksets": sweep.chunk_keys,
        "embeddings": sweep.embedding_keys,
        "vector_index": sweep.index_keys,
        "retrievals": sweep.retrieval_keys,
        "rerankings": sweep.rerank_keys,
        "answers": sweep.config_keys,
        "evaluations": sweep.config_keys,
    }
    assert len(sweep.configs) == 4
    for asset, keys in expected.items():
        done = instance.get_materialized_partitions(dg.AssetKey(asset))
        assert done == set(keys), asset
    assert _materializations(instance, "leaderboard")


def test_embedding_partitions_are_unique_chunkings_and_calls_unique_texts(sweep_run):
    sweep, instance, data = sweep_run["sweep"], sweep_run["instance"], sweep_run["data"]
    # one embedding partition per (chunking, embedder) pair, not per config
    assert len(sweep.embedding_keys) == 2 < len(sweep.configs)
    mats = _materializations(instance, "embeddings")
    assert len(mats) == 2
    calls = sum(m.metadata["embedding_calls"].value for m in mats)
    artifacts = ArtifactStore(data_dir=str(data))
    lineage = Lineage(sweep)
    texts = set()
    for key in sweep.chunk_keys:
        chunks = artifacts.read("chunksets", lineage.chunk_fp(sweep.first("chunk_key", key)), key)
        texts |= set(chunks["index_text"].to_list())
    assert calls == len(texts)
    # the two chunkings share texts (short documents are one chunk in both), embedded once
    total = sum(m.metadata["texts"].value for m in mats)
    assert total > calls


def test_leaderboard_has_one_row_per_config_with_metrics_in_unit_interval(sweep_run):
    board, sweep = sweep_run["board"], sweep_run["sweep"]
    assert sorted(board["config_key"].to_list()) == sorted(sweep.config_keys)
    present = [m for m in SCORABLE_METRICS if m in board.columns]
    assert set(SCORABLE_METRICS) - set(present) == {"faithfulness_judge"}  # no judge model configured
    for m in (*present, "overall_score", "answer_coverage", "chunk_cohesion", "chunk_separation"):
        values = board[m].to_list()
        assert all(0.0 <= v <= 1.0 for v in values), m
    assert board["overall_score"].is_sorted(descending=True)
    assert board["recall_at_k"].max() > 0.3  # real retrieval finds gold paragraphs
    assert board["rank"].to_list() == list(range(1, 5))


def test_mlflow_holds_one_run_per_config(sweep_run):
    sweep, data = sweep_run["sweep"], sweep_run["data"]
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(sweep.name)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert sorted(r.data.tags["config_key"] for r in runs) == sorted(sweep.config_keys)
    for r in runs:
        c = next(c for c in sweep.configs if c.config_key == r.data.tags["config_key"])
        assert r.data.params["retrieval.mode"] == c.retrieval.mode
        assert r.data.params["chunking.chunk_size"] == str(c.chunking.chunk_size)
        assert 0.0 <= r.data.metrics["ndcg_at_k"] <= 1.0
        assert r.data.tags["sweep"] == sweep.name and r.data.tags["partition_key"] == c.config_key
        assert r.data.tags["dagster_run_id"]
        artifacts = [a.path for a in client.list_artifacts(r.info.run_id)]
        assert "per_query.parquet" in artifacts
        local = client.download_artifacts(r.info.run_id, "per_query.parquet")
        assert pl.read_parquet(local).height == 20


def test_rerun_of_unchanged_spec_reuses_everything(sweep_run, slice_sweep):
    sweep, data, instance = sweep_run["sweep"], sweep_run["data"], sweep_run["instance"]
    artifacts = ArtifactStore(data_dir=str(data))
    steps = plan(sweep, artifacts, force=False)
    # only the always-cheap steps remain: inputs snapshot, evaluations (MLflow check) and the leaderboard
    assert {a for a, _ in steps} == {"corpus", "qa_set", "evaluations", "leaderboard"}
    before = len(_materializations(instance, "embeddings"))
    board, *_ = run_sweep(str(slice_sweep), str(data), progress=False)
    assert len(_materializations(instance, "embeddings")) == before
    assert board.drop("rank").equals(sweep_run["board"].drop("rank"))
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(sweep.name)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert len(runs) == len(sweep.configs)  # a reused evaluation is not logged twice

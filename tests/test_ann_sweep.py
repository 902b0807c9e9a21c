"""A sweep over index types on the example slice, end to end: the approximate indexes are built from the
one embeddings partition, their recall against exact search is measured per config and lands on the board,
in MLflow and in the ship report with the build's time and memory."""

from __future__ import annotations

import pytest

from rag_assets.board_files import leaderboard_path
from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep

pytestmark = pytest.mark.slow

ANN = [
    "exact",
    # one probe of two partitions: a share of the chunks searched
    {"type": "ivf_hnsw_sq", "num_partitions": 2, "nprobes": 1, "m": 4, "ef_construction": 8, "ef": 5},
]


@pytest.fixture(scope="module")
def ann_sweep(small_slice, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ann")
    spec = write_sweep(
        tmp / "ann.yaml",
        small_slice,
        name="ann",
        chunking={"method": "recursive", "chunk_size": 200, "chunk_overlap": 0},
        index=[
            {"store": "lancedb", "ann": ANN},
            {"store": "chroma", "ann": {"type": "hnsw", "m": 4, "ef": 8}},
        ],
        retrieval={"mode": ["vector", "bm25"], "top_k": 3},
    )
    run = run_sweep(str(spec), str(tmp / "data"), progress=False)
    return run, tmp / "data"


def test_every_index_is_built_once_from_one_embedding_and_measured(ann_sweep):
    run, _ = ann_sweep
    plan, board = run.plan, run.board
    assert len(plan.keys("embeddings")) == 1
    # lancedb exact and ivf_hnsw_sq, chroma hnsw, and chroma exact for its bm25 config (it searches no vector)
    assert len(plan.keys("vector_index")) == 4
    rows = {r["config_key"]: r for r in board.to_dicts()}
    for c in plan.configs:
        r = rows[plan.key_of(c)]
        assert r["index_build_s"] > 0 and r["index_build_peak_mb"] >= 0
        if c.index.ann.approximate and c.retrieval.mode == "vector":
            assert 0.0 <= r["ann_recall_at_k"] <= 1.0
        else:  # exact, or a keyword search that never reads the vector index
            assert r["ann_recall_at_k"] is None
    # the per-question figure is the overlap with the store's exact search at the config's depth
    c = next(c for c in plan.configs if c.index.ann.type == "ivf_hnsw_sq" and c.retrieval.mode == "vector")
    per_question = run.artifact("retrievals", plan.key_of(c, "retrievals"))
    assert rows[plan.key_of(c)]["ann_recall_at_k"] == pytest.approx(per_question["ann_recall_at_k"].mean())


def test_mlflow_and_the_ship_report_show_the_index(ann_sweep):
    from mlflow import MlflowClient

    run, data = ann_sweep
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("ann")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    approx = [r for r in runs if "ivf_hnsw_sq" in r.data.params.get("index.ann", "")]
    assert len(approx) == 1  # the bm25 config searches no vector: no approximate index of its own
    vector = next(r for r in approx if r.data.params["retrieval.mode"] == "vector")
    assert 0.0 <= vector.data.metrics["ann_recall_at_k"] <= 1.0
    assert "index_build_s" in vector.data.metrics
    report = leaderboard_path(str(data), "ann").with_suffix(".report.md").read_text()
    assert "## Approximate vector indexes: what they cost and lose" in report
    assert "## What each index setting changed in retrieval" in report


@pytest.mark.parametrize("ann_type", ["ivf_hnsw_sq", "hnsw"])
def test_the_shipped_model_serves_the_evaluated_index(ann_sweep, small_slice, tmp_path, ann_type):
    """An approximate index is one random draw of its training: the exported model ships the build that was
    evaluated, and, loaded twice, retrieves on every question exactly the chunks the evaluation did."""
    import json

    import mlflow.pyfunc

    from rag_sweep.cli import main

    run, data = ann_sweep
    plan = run.plan
    c = next(c for c in plan.configs if c.index.ann.type == ann_type and c.retrieval.mode == "vector")
    key = plan.key_of(c)
    out = tmp_path / "model"
    assert (
        main(
            [
                "export",
                str(data.parent / "ann.yaml"),
                "--config",
                key,
                "--out",
                str(out),
                "--data-dir",
                str(data),
            ]
        )
        == 0
    )
    manifest = json.loads((out / "artifacts" / "bundle" / "pipeline.json").read_text())
    assert manifest["index_build"]["record"]["ann"]["type"] == ann_type
    assert any(name.startswith("index/") for name in manifest["content_sha256"])
    evaluated = run.artifact("retrievals", plan.key_of(c, "retrievals"))
    from rag_core.data.datasets import load_qa

    qa = load_qa(small_slice["qa"])
    questions = dict(zip(qa["query_id"], qa["question"], strict=True))
    want = {q: list(ids) for q, ids in zip(evaluated["query_id"], evaluated["chunk_ids"], strict=True)}
    ids = sorted(want)
    for _ in range(2):  # each load a fresh copy of the shipped build, never a new draw
        model = mlflow.pyfunc.load_model(str(out))
        got = model.predict([questions[q] for q in ids])
        differ = [q for q, chunks in zip(ids, got["chunk_ids"], strict=True) if list(chunks) != want[q]]
        assert not differ, (
            f"{len(differ)} of {len(ids)} questions retrieved other chunks than evaluated: {differ[:3]}"
        )


def test_the_recall_is_that_of_the_chunks_the_config_returned(ann_sweep, small_slice):
    """ann_recall_at_k of each question is the overlap of the chunks the config's retrieval returned with the
    exact search's top k, both taken as a retrieval takes them (k + TIE_MARGIN deep, top k kept)."""
    from rag_core.data.datasets import load_qa
    from rag_core.retrieval.ann_recall import recall_at_k
    from rag_core.retrieval.retrieve import TIE_MARGIN, ranked
    from resources.embedders import EmbeddingService
    from resources.vector_stores import VectorStores

    run, data = ann_sweep
    plan = run.plan
    c = next(c for c in plan.configs if c.index.ann.type == "ivf_hnsw_sq" and c.retrieval.mode == "vector")
    frame = run.artifact("retrievals", plan.key_of(c, "retrievals"))
    marker = run.artifact("vector_index", plan.key_of(c, "vector_index"))
    store = VectorStores(data_dir=str(data)).get("lancedb")
    qa = load_qa(small_slice["qa"])
    question = dict(zip(qa["query_id"], qa["question"], strict=True))
    vectors, _ = EmbeddingService(cache_dir=str(data / "embedding_cache")).embed(
        c.embedding.model, [question[q] for q in frame["query_id"]]
    )
    k = c.retrieval.top_k
    for row, v in zip(frame.iter_rows(named=True), vectors, strict=True):
        exact = ranked(store.exact_vector_search(marker["collection"][0], v, k + TIE_MARGIN), k)
        assert row["ann_recall_at_k"] == recall_at_k(list(row["chunk_ids"]), [h.chunk_id for h in exact])

"""A sweep over the embedded vector stores and a metadata filter, in process on the example slice.

The store is a sweep dimension (`index.store`): four indexes are built from one embeddings partition (the
corpus is embedded once), and the stores are compared on the same vectors: exact cosine search agrees
across LanceDB, Qdrant, Chroma and Milvus Lite; BM25 computed by Qdrant (sparse vectors + its idf) equals
the in-process BM25 behind Chroma; the retrieval filter holds on every hit of every store.
"""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest

from rag_core.data.filters import matches, parse_filter
from rag_sweep.runner import run_sweep
from tests.conftest import write_sweep

pytestmark = pytest.mark.slow

STORES = ["lancedb", "qdrant", "chroma", "milvus"]
FILTER = {"half": "a", "rank": {"$gte": 10}}


def _with_metadata(slice_data, tmp_path) -> dict:
    """The slice corpus as JSONL, each document carrying `half` (a/b) and `rank` (its position)."""
    corpus = pl.read_parquet(slice_data["corpus"])
    path = tmp_path / "corpus.jsonl"
    with path.open("w") as f:
        for i, row in enumerate(corpus.iter_rows(named=True)):
            meta = {"half": "ab"[i % 2], "rank": i}
            f.write(
                json.dumps(
                    {"doc_id": row["doc_id"], "title": row["title"], "text": row["text"], "metadata": meta}
                )
                + "\n"
            )
    return {**slice_data, "corpus": path}


@pytest.fixture(scope="module")
def store_sweep(slice_data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stores")
    spec = write_sweep(
        tmp / "stores.yaml",
        _with_metadata(slice_data, tmp),
        name="stores",
        chunking={"method": "recursive", "chunk_size": 400, "chunk_overlap": 0},
        index={"store": STORES},
        retrieval=[
            {"mode": ["vector", "bm25"], "top_k": 5},
            {"mode": "vector", "top_k": 5, "filter": FILTER},
        ],
    )
    run = run_sweep(str(spec), str(tmp / "data"), progress=False)

    def retrievals(store: str, mode: str, filtered: bool) -> pl.DataFrame:
        c = next(
            c
            for c in run.plan.configs
            if c.index.store == store and c.retrieval.mode == mode and bool(c.retrieval.filter) == filtered
        )
        return run.artifact("retrievals", run.plan.key_of(c, "retrievals"))

    return {
        "board": run.board,
        "instance": run.instance,
        "plan": run.plan,
        "retrievals": retrievals,
        "run": run,
    }


def test_stores_share_one_embeddings_partition(store_sweep):
    plan, instance = store_sweep["plan"], store_sweep["instance"]
    (embeddings,) = plan.keys("embeddings")
    assert len(plan.configs) == 12
    assert plan.keys("vector_index") == [f"{embeddings}__{s}" for s in STORES]
    emb = instance.fetch_materializations(dg.AssetKey(["stores", "embeddings"]), limit=10).records
    assert len(emb) == 1  # embedded once for four stores
    assert instance.get_materialized_partitions(dg.AssetKey(["stores", "vector_index"])) == set(
        plan.keys("vector_index")
    )
    board = store_sweep["board"]
    assert board.height == 12 and sorted(set(board["index.store"])) == sorted(STORES)


def test_exact_vector_search_agrees_across_stores(store_sweep):
    base = store_sweep["retrievals"]("lancedb", "vector", False)
    for store in STORES[1:]:
        other = store_sweep["retrievals"](store, "vector", False)
        same = sum(
            a == b for a, b in zip(base["chunk_ids"].to_list(), other["chunk_ids"].to_list(), strict=True)
        )
        assert same >= base.height - 1, f"{store}: {same}/{base.height} identical top-5"
        for a, b in zip(base["scores"].to_list(), other["scores"].to_list(), strict=True):
            assert a[0] == pytest.approx(b[0], abs=1e-4)


def test_qdrant_bm25_equals_the_in_process_bm25(store_sweep):
    qdrant, chroma = (store_sweep["retrievals"](s, "bm25", False) for s in ("qdrant", "chroma"))
    for a, b in zip(qdrant["scores"].to_list(), chroma["scores"].to_list(), strict=True):
        assert a == pytest.approx(b, rel=1e-4)  # same scores, rank by rank (ties may order differently)
    board = store_sweep["board"].filter(pl.col("retrieval.mode") == "bm25")
    recall = dict(zip(board["index.store"], board["recall_at_k"], strict=True))
    assert min(recall.values()) > 0.3 and max(recall.values()) - min(recall.values()) < 0.2, recall


def test_the_retrieval_filter_holds_on_every_store(store_sweep):
    corpus = store_sweep["run"].artifact("corpus")
    meta = {r["doc_id"]: json.loads(r["metadata"]) for r in corpus.iter_rows(named=True)}
    conditions = parse_filter(FILTER)
    results = {s: store_sweep["retrievals"](s, "vector", True) for s in STORES}
    for store, df in results.items():
        doc_ids = df["doc_ids"].explode().drop_nulls().to_list()
        assert len(doc_ids) == 5 * df.height, store  # enough matching documents to fill every top-5
        assert all(matches(conditions, {"doc_id": d, **meta[d]}) for d in doc_ids), store
    assert results["qdrant"]["chunk_ids"].to_list() == results["milvus"]["chunk_ids"].to_list()

"""Approximate vector indexes (`index.ann`) on the real stores: each is built with its settings, searched
with them, and measured against the store's exact search on a constructed set; recall is the overlap."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from rag_core.planning.ann import AnnIndex
from rag_core.retrieval.ann_recall import ann_recalls, index_figures, recall_at_k
from rag_core.retrieval.retrieve import TIE_MARGIN, ranked
from resources.vector_stores import LanceDBStore
from resources.vector_stores.chroma_store import ChromaStore
from resources.vector_stores.milvus_store import MilvusLiteStore
from resources.vector_stores.qdrant_store import QdrantStore
from resources.vector_stores.weaviate_store import WeaviateStore

N, DIM, K = 1200, 24, 10
RNG = np.random.default_rng(7)
VECS = RNG.normal(size=(N, DIM)).astype(np.float32)
VECS /= np.linalg.norm(VECS, axis=1, keepdims=True)
QUERIES = RNG.normal(size=(25, DIM)).astype(np.float32)
ROWS = [
    {
        "chunk_id": f"c{i:04d}",
        "doc_id": f"d{i // 3}",
        "text": f"chunk {i}",
        "metadata": json.dumps({"odd": i % 2}),
    }
    for i in range(N)
]


def exact_top(vector: np.ndarray, k: int, keep=lambda i: True) -> list[str]:
    """The reference: cosine against every row, computed here."""
    scores = VECS @ (vector / np.linalg.norm(vector))
    order = [i for i in np.argsort(-scores, kind="stable") if keep(i)]
    return [ROWS[i]["chunk_id"] for i in order[:k]]


def test_recall_is_the_overlap_with_the_exact_top_k():
    assert recall_at_k(["a", "b", "c", "d"], ["a", "c", "e", "f"]) == 0.5
    assert recall_at_k(["a", "b"], ["b", "a"]) == 1.0
    assert recall_at_k([], ["a"]) == 0.0
    assert recall_at_k(["a"], []) is None  # a filter that matched nothing: no reference


STORES = {
    "lancedb": lambda tmp, _: LanceDBStore(uri=str(tmp / "lancedb")),
    "chroma": lambda tmp, _: ChromaStore(path=str(tmp / "chroma")),
    "milvus": lambda tmp, _: MilvusLiteStore(path=str(tmp / "milvus")),
    "weaviate": lambda tmp, request: WeaviateStore(
        url=(s := request.getfixturevalue("weaviate_server")).url, grpc_port=s.grpc_port
    ),
}
CASES = [
    ("lancedb", AnnIndex(type="ivf_pq", num_partitions=16, num_sub_vectors=4, nprobes=1)),
    ("lancedb", AnnIndex(type="ivf_sq", num_partitions=16, nprobes=1)),
    ("lancedb", AnnIndex(type="ivf_rq", num_partitions=16, num_bits=2, nprobes=1)),
    ("lancedb", AnnIndex(type="ivf_hnsw_sq", num_partitions=4, m=4, ef_construction=16, ef=10, nprobes=1)),
    ("chroma", AnnIndex(type="hnsw", m=4, ef_construction=8, ef=10)),
    ("milvus", AnnIndex(type="hnsw", m=4, ef_construction=8, ef=10)),
    pytest.param("weaviate", AnnIndex(type="hnsw", m=4, ef_construction=8, ef=10), marks=pytest.mark.stack),
]


@pytest.mark.parametrize(("backend", "ann"), CASES)
def test_an_approximate_index_against_exact_search(backend, ann, tmp_path, request):
    """The store's exact search is the reference computed here (every row compared), under a filter too;
    the approximate search uses the index's settings, and its recall is the overlap with that reference,
    question by question."""
    store = STORES[backend](tmp_path, request)
    ann = ann.effective()
    assert store.upsert("Ann_t", ROWS, VECS, ann=ann) == N
    odd = {"odd": 1}
    for q in QUERIES[:5]:
        assert [h.chunk_id for h in store.exact_vector_search("Ann_t", q, K)] == exact_top(q, K)
        got = [h.chunk_id for h in store.exact_vector_search("Ann_t", q, K, odd)]
        assert got == exact_top(q, K, lambda i: i % 2 == 1)
    recalls = ann_recalls(store, "Ann_t", QUERIES, K)
    # as a retrieval takes them: searched K + TIE_MARGIN deep, the top K kept by the tie rule
    hand = [
        recall_at_k(
            [h.chunk_id for h in ranked(store.vector_search("Ann_t", q, K + TIE_MARGIN), K)], exact_top(q, K)
        )
        for q in QUERIES
    ]
    assert recalls == hand
    assert all(0.0 <= r <= 1.0 for r in recalls)
    if backend == "lancedb":  # one probe of 16 (or 4) partitions: the index answers from a share of the rows
        assert np.mean(recalls) < 0.9, recalls
    assert built_graph(store, "Ann_t") in (None, {"m": 4, "ef_construction": 8, "ef": 10})


def built_graph(store, collection: str) -> dict | None:
    """The HNSW settings the store itself reports for the collection's build (None: it reports none)."""
    if isinstance(store, ChromaStore):
        hnsw = store._collection(store._record(collection)["physical"]).configuration["hnsw"]
        return {
            "m": hnsw["max_neighbors"],
            "ef_construction": hnsw["ef_construction"],
            "ef": hnsw["ef_search"],
        }
    if isinstance(store, MilvusLiteStore):
        index = store._client(store._record(collection)["physical"]).describe_index("chunks", "dense")
        assert index["index_type"] == "HNSW", index  # Milvus Lite does not report the graph's settings
        return None
    if isinstance(store, WeaviateStore):
        with store._client() as client:
            vi = client.collections.get(collection).config.get().vector_config["default"].vector_index_config
        return {"m": vi.max_connections, "ef_construction": vi.ef_construction, "ef": vi.ef}
    return None


def test_a_wide_search_of_an_approximate_index_finds_what_exact_search_finds(tmp_path):
    """The settings are applied at search: every partition probed and refined, IVF-PQ finds the exact top k
    (a store that ignored nprobes would stay at one partition's recall)."""
    store = LanceDBStore(uri=str(tmp_path / "lancedb"))
    narrow = AnnIndex(type="ivf_pq", num_partitions=16, num_sub_vectors=4, nprobes=1).effective()
    wide = AnnIndex(
        type="ivf_pq", num_partitions=16, num_sub_vectors=4, nprobes=16, refine_factor=50
    ).effective()
    store.upsert("Narrow", ROWS, VECS, ann=narrow)
    store.upsert("Wide", ROWS, VECS, ann=wide)
    assert np.mean(ann_recalls(store, "Wide", QUERIES, K)) >= 0.98
    assert np.mean(ann_recalls(store, "Narrow", QUERIES, K)) < np.mean(ann_recalls(store, "Wide", QUERIES, K))


def test_lancedb_builds_the_type_it_is_given_and_ivf_sq_or_rq_searched_wide_finds_the_exact_top_k(tmp_path):
    """Each type is the index LanceDB reports for the build (IVF-RQ with the bits it was given); IVF-SQ and
    IVF-RQ with every partition probed and refined find what exact search finds, and IVF-RQ at one bit
    without the refine step finds less."""
    import lancedb

    store = LanceDBStore(uri=str(tmp_path / "lancedb"))
    built = {}
    for name, ann in {
        "ivf_pq": AnnIndex(type="ivf_pq", num_partitions=16, num_sub_vectors=4),
        "ivf_sq": AnnIndex(type="ivf_sq", num_partitions=16, nprobes=16, refine_factor=10),
        "ivf_rq": AnnIndex(type="ivf_rq", num_partitions=16, nprobes=16, refine_factor=10),
        "ivf_rq_1bit": AnnIndex(type="ivf_rq", num_partitions=16, num_bits=1, nprobes=16, refine_factor=1),
    }.items():
        store.upsert(name, ROWS, VECS, ann=ann.effective())
        table = lancedb.connect(store.uri).open_table(store.info(name)["build"])
        built[name] = {
            (i.index_type, (i.index_details or {}).get("compression", {}).get("num_bits"))
            for i in table.list_indices()
            if i.columns == ["vector"]
        }
    assert built == {
        "ivf_pq": {("IvfPq", 8)},
        "ivf_sq": {("IvfSq", 8)},  # one byte a dimension
        "ivf_rq": {("IvfRq", 4)},  # the product's default, not LanceDB's 1
        "ivf_rq_1bit": {("IvfRq", 1)},
    }
    assert np.mean(ann_recalls(store, "ivf_sq", QUERIES, K)) >= 0.98
    assert np.mean(ann_recalls(store, "ivf_rq", QUERIES, K)) >= 0.98
    assert np.mean(ann_recalls(store, "ivf_rq_1bit", QUERIES, K)) < 0.98


def test_an_exact_index_is_its_own_reference(tmp_path):
    store = LanceDBStore(uri=str(tmp_path / "lancedb"))
    store.upsert("Exact", ROWS, VECS)
    assert ann_recalls(store, "Exact", QUERIES, K) == [1.0] * len(QUERIES)


def test_a_store_refuses_an_index_type_it_lacks_before_building(tmp_path):
    store = QdrantStore(path=str(tmp_path / "qdrant"))
    with pytest.raises(ValueError, match=r"^qdrant has no 'hnsw' index; it builds exact$"):
        store.upsert("T", ROWS, VECS, ann=AnnIndex(type="hnsw").effective())
    assert not (tmp_path / "qdrant").exists() or not any((tmp_path / "qdrant").iterdir())


def test_index_figures_are_the_mean_recall_and_the_build():
    import polars as pl

    frame = pl.DataFrame(
        {
            "ann_recall_at_k": [1.0, 0.5, None],
            "index_build_s": [2.0, 2.0, 2.0],
            "index_build_peak_mb": [9.0] * 3,
        }
    )
    assert index_figures(frame) == {"ann_recall_at_k": 0.75, "index_build_s": 2.0, "index_build_peak_mb": 9.0}
    assert index_figures(frame.drop("ann_recall_at_k")) == {"index_build_s": 2.0, "index_build_peak_mb": 9.0}


def test_the_report_says_which_retrieval_metrics_an_index_setting_changed():
    import polars as pl

    from rag_core.decision.ann_report import ann_sections, index_changes

    board = pl.DataFrame(
        {
            "config_key": ["exact", "ivf", "hnsw-bm25", "exact-bm25"],
            "index.store": ["lancedb"] * 4,
            "index.ann": [None, '{"type": "ivf_pq"}', '{"type": "ivf_pq"}', None],
            "retrieval.mode": ["vector", "vector", "bm25", "bm25"],
            "recall_at_k": [0.8, 0.7, 0.5, 0.5],
            "ndcg_at_k": [0.6, 0.6, 0.4, 0.4],
            "ann_recall_at_k": [None, 0.9, None, None],
        }
    )
    assert index_changes(board) == [
        '- ivf: the index {"type": "ivf_pq"} changed recall_at_k 0.800 → 0.700 against the exact index (exact)',
        '- hnsw-bm25: the index {"type": "ivf_pq"} did not change the retrieval metrics against the exact index '
        "(exact-bm25)",
    ]
    (_, _, table), _ = ann_sections(board)
    assert table["index.ann"].to_list() == ["exact", '{"type": "ivf_pq"}', '{"type": "ivf_pq"}', "exact"]
    assert ann_sections(board.with_columns(pl.lit(None, pl.String).alias("index.ann"))) == []


@pytest.mark.parametrize("rows, asked", [(300, 4), (700, 8), (2000, 32), (6000, 16)])
def test_what_lancedb_trains_is_what_the_product_records(tmp_path, rows, asked):
    """LanceDB trains fewer IVF-PQ partitions than asked on few rows and says so only in its log
    ("training 7 of the 32 requested IVF partitions"): the product's figure (`trained_ann`, on the board as
    index_ann_partitions) is checked against that line, built in a process of its own to read its log."""
    import re
    import subprocess
    import sys

    code = f"""
import numpy as np
from rag_core.planning.ann import AnnIndex
from resources.vector_stores import LanceDBStore
rng = np.random.default_rng(0)
vectors = rng.normal(size=({rows}, 16)).astype(np.float32)
rows = [{{"chunk_id": f"c{{i}}", "doc_id": f"d{{i}}", "text": "t", "metadata": "{{}}"}} for i in range({rows})]
ann = AnnIndex(type="ivf_pq", num_partitions={asked}, num_sub_vectors=4)
store = LanceDBStore(uri={str(tmp_path / "lancedb")!r})
store.upsert("Rag_x", rows, vectors, ann=ann)
print("TRAINED", store.trained_ann(ann, {rows})["num_partitions"])
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "RUST_LOG": "warn"}
    )
    assert out.returncode == 0, out.stderr
    recorded = int(re.search(r"TRAINED (\d+)", out.stdout)[1])
    said = re.search(r"training (\d+) of the (\d+) requested IVF partitions", out.stderr)
    if said:
        assert (int(said[1]), int(said[2])) == (recorded, asked)
    else:  # LanceDB trained every partition asked for
        assert recorded == asked

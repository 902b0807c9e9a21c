"""Contract tests every vector store passes: the embedded default (LanceDB) and a real Weaviate server."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from resources.vector_stores import LanceDBStore
from resources.vector_stores.weaviate_store import WeaviateImportError, WeaviateStore

TEXTS = [
    "the cat sat on the mat",
    "dogs are loyal animals",
    "cats purr when they are happy",
    "the stock market fell sharply",
    "python is a programming language",
    "the mat was red and soft",
]
ROWS = [
    {"chunk_id": f"c{i}", "doc_id": f"d{i // 2}", "text": t, "metadata": "{}"} for i, t in enumerate(TEXTS)
]
VECS = np.random.default_rng(0).normal(size=(len(TEXTS), 16)).astype(np.float32)
VECS /= np.linalg.norm(VECS, axis=1, keepdims=True)


@pytest.fixture(params=["lancedb", "weaviate"])
def store(request, tmp_path):
    if request.param == "lancedb":
        return LanceDBStore(uri=str(tmp_path / "lance"))
    server = request.getfixturevalue("weaviate_server")
    return WeaviateStore(url=server.url, grpc_port=server.grpc_port)


def test_contract(store):
    name = "Rag_contract_" + type(store).__name__.lower()
    store.delete(name)
    assert store.info(name)["exists"] is False
    assert store.upsert(name, ROWS, VECS) == len(ROWS)
    info = store.info(name)
    assert info["exists"] is True and info["count"] == len(ROWS)
    # vector search: the query vector itself ranks first with cosine 1
    hits = store.vector_search(name, VECS[3], 3)
    assert [h.chunk_id for h in hits][0] == "c3" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].doc_id == "d1" and hits[0].text == TEXTS[3]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # keyword search finds lexical matches only
    kw = store.keyword_search(name, "stock market?", 3)
    assert [h.chunk_id for h in kw] == ["c3"]
    # hybrid with alpha 1 is the vector ranking, alpha 0 the keyword ranking
    assert [h.chunk_id for h in store.hybrid_search(name, "mat", VECS[4], 3, 1.0, "weighted")][0] == "c4"
    assert {h.chunk_id for h in store.hybrid_search(name, "mat", VECS[4], 2, 0.0, "weighted")} == {"c0", "c5"}
    # re-upsert replaces, never duplicates
    store.upsert(name, ROWS[:4], VECS[:4])
    assert store.info(name)["count"] == 4
    store.delete(name)
    assert store.info(name)["exists"] is False


def test_queries_never_see_a_half_built_index(store):
    name = "Rag_swap_" + type(store).__name__.lower()
    big_rows = [{**ROWS[i % 6], "chunk_id": f"x{i}"} for i in range(600)]
    big_vecs = np.repeat(VECS, 100, axis=0)
    store.upsert(name, big_rows, big_vecs)
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            seen.append(store.info(name)["count"])
            time.sleep(0.01)

    t = threading.Thread(target=reader)
    t.start()
    store.upsert(name, big_rows[:300], big_vecs[:300])
    stop.set()
    t.join()
    assert set(seen) <= {600, 300}, "a reader saw a partial index"
    assert store.info(name)["count"] == 300
    store.delete(name)


def test_weaviate_partial_import_is_an_error(weaviate_server):
    store = WeaviateStore(url=weaviate_server.url, grpc_port=weaviate_server.grpc_port)
    name = "Rag_partial"
    vectors = [v.tolist() for v in VECS]
    vectors[2] = vectors[2][:8]  # one object with the wrong dimension fails on the server

    class Ragged:  # an array-like whose rows differ in length, as a corrupted input would
        def __iter__(self):
            return iter(np.asarray(v, np.float32) for v in vectors)

    with pytest.raises(WeaviateImportError, match="failed to import"):
        store.upsert(name, ROWS, Ragged())
    assert store.info(name)["exists"] is False  # nothing half-built left behind


def test_weaviate_filters(weaviate_server):
    store = WeaviateStore(url=weaviate_server.url, grpc_port=weaviate_server.grpc_port)
    store.upsert("Rag_filters", ROWS, VECS)
    hits = store.vector_search("Rag_filters", VECS[0], 6, where={"doc_id": "d2"})
    assert {h.chunk_id for h in hits} == {"c4", "c5"}
    store.delete("Rag_filters")


def test_dead_weaviate_fails_fast_naming_the_url():
    from tests.servers import free_port

    port = free_port()
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        WeaviateStore(url=f"http://127.0.0.1:{port}", grpc_port=free_port()).info("X")
    assert time.perf_counter() - t0 < 10

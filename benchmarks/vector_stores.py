"""Benchmark: build and query time of every vector store on the example corpus, as ratios to LanceDB.

    .venv/bin/python benchmarks/vector_stores.py [--queries 100] [--repeat 3]

Indexes the example corpus (one row per document, random unit vectors of the MiniLM dimension, so the
benchmark measures the stores and not the embedder) in each embedded store (and in Weaviate when
WEAVIATE_URL is set), then runs the example questions in vector, bm25 and hybrid mode. Machines here are
noisy: each figure is the median of --repeat rounds and printed next to its ratio to LanceDB measured in
the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources.vector_stores import VectorStores  # noqa: E402

DATA = ROOT / "examples" / "data" / "hotpotqa_distractor_100"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    corpus = pl.read_parquet(DATA / "corpus.parquet")
    questions = pl.read_parquet(DATA / "queries.parquet")["question"].to_list()[: args.queries]
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(corpus.height, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    qvecs = rng.normal(size=(len(questions), 384)).astype(np.float32)
    rows = [
        {"chunk_id": r["doc_id"], "doc_id": r["doc_id"], "text": r["text"], "metadata": "{}"}
        for r in corpus.iter_rows(named=True)
    ]
    backends = ["lancedb", "qdrant", "chroma", "milvus"] + (
        ["weaviate"] if os.environ.get("WEAVIATE_URL") else []
    )
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            store = VectorStores.from_env(tmp).get(backend)
            name = f"Rag_bench_{backend}"
            rounds: dict[str, list[float]] = {"build_s": [], "vector_ms": [], "bm25_ms": [], "hybrid_ms": []}
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                store.upsert(name, rows, vecs)
                rounds["build_s"].append(time.perf_counter() - t0)
                for mode in ("vector", "bm25", "hybrid"):
                    t0 = time.perf_counter()
                    for q, v in zip(questions, qvecs, strict=True):
                        store.retrieve(name, mode, q, v, 10, 0.5, "rrf")
                    rounds[f"{mode}_ms"].append((time.perf_counter() - t0) * 1000 / len(questions))
            store.delete(name)
            results[backend] = {k: statistics.median(v) for k, v in rounds.items()}
            print(f"  {backend}: done", file=sys.stderr)
    base = results["lancedb"]
    print(f"{corpus.height} documents, {len(questions)} queries per mode, median of {args.repeat} rounds")
    print(f"{'store':10} {'build s':>14} {'vector ms/q':>16} {'bm25 ms/q':>16} {'hybrid ms/q':>16}")
    for backend, r in results.items():
        cells = [
            f"{r[k]:7.2f} ({r[k] / base[k]:4.2f}x)" for k in ("build_s", "vector_ms", "bm25_ms", "hybrid_ms")
        ]
        print(f"{backend:10} {cells[0]:>14} {cells[1]:>16} {cells[2]:>16} {cells[3]:>16}")


if __name__ == "__main__":
    main()

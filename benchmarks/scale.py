"""Benchmark: how time and peak memory grow with the corpus, from 1k to 50k chunks.

    .venv/bin/python benchmarks/scale.py [--sizes 1000,5000,10000,50000] [--queries 100]

For each size, a new process (so its peak memory is its own): a synthetic corpus (seeded; documents of ~5
paragraphs of words drawn from a Zipf-like vocabulary) chunked by `rag_core.chunking.chunkers` (recursive, 384 chars),
the chunks indexed in LanceDB (the default store: vectors + its BM25 full-text index, one `upsert`), then
`--queries` keyword (BM25) and vector searches. The vectors are seeded random unit vectors of the model's
width (384), standing in for embeddings: the model's own cost is linear in the texts and measured by
`benchmarks/embedding_throughput.py` (the estimate printed uses that rate, 56 texts/s on 2 cores). Prints,
per size: seconds of each stage, peak RSS, and growth against the smallest size (x time per x chunks).
Goal: 50k chunks within 2 GB peak.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EMBED_RATE = 56.0  # texts/s of all-MiniLM-L6-v2 on 2 cores (benchmarks/embedding_throughput.py)

ONE_SIZE = r"""
import json, resource, sys, tempfile, time
import numpy as np, polars as pl
sys.path.insert(0, {root!r})
from rag_core.chunking.chunkers import chunk_corpus
from resources.vector_stores.lancedb_store import LanceDBStore

target, n_queries = {chunks}, {queries}
rng = np.random.default_rng(0)
vocab = np.array([f"w{{i}}" for i in range(20000)])
weights = 1 / np.arange(1, len(vocab) + 1); weights /= weights.sum()

def doc(i):
    paras = [" ".join(rng.choice(vocab, rng.integers(40, 90), p=weights)) + "." for _ in range(5)]
    return {{"doc_id": f"d{{i}}", "title": f"Doc {{i}}", "text": "\n\n".join(paras), "metadata": None}}

t = {{}}
t0 = time.perf_counter()
n_docs = max(1, target // 5)
corpus = pl.DataFrame([doc(i) for i in range(n_docs)])
t["corpus"] = time.perf_counter() - t0
t0 = time.perf_counter()
chunks = chunk_corpus(corpus, "recursive", 384, 48)
t["chunking"] = time.perf_counter() - t0
rows = [{{"chunk_id": c, "doc_id": d, "text": x}} for c, d, x in zip(chunks["chunk_id"], chunks["doc_id"], chunks["index_text"])]
vectors = rng.standard_normal((len(rows), 384)).astype(np.float32)
vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
with tempfile.TemporaryDirectory() as tmp:
    store = LanceDBStore(uri=tmp)
    store.upsert("warm-up", rows[:10], vectors[:10])  # imports and first-call set-up, not the size's cost
    t0 = time.perf_counter()
    store.upsert("bench", rows, vectors)
    t["index (vectors + BM25)"] = time.perf_counter() - t0
    queries = [" ".join(rng.choice(vocab[:2000], 6)) for _ in range(n_queries)]
    t0 = time.perf_counter()
    for q in queries:
        store.keyword_search("bench", q, 10)
    t["bm25 searches"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for v in vectors[:n_queries]:
        store.vector_search("bench", v, 10)
    t["vector searches"] = time.perf_counter() - t0
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"chunks": len(rows), "seconds": t, "peak_mb": peak_mb}}))
"""


def one(chunks: int, queries: int) -> dict:
    code = ONE_SIZE.format(root=str(ROOT), chunks=chunks, queries=queries)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,10000,50000")
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()
    results = [one(int(s), args.queries) for s in args.sizes.split(",")]
    stages = [s for s in results[0]["seconds"] if s != "corpus"]
    print(
        f"{'chunks':>7} " + " ".join(f"{s:>22}" for s in stages) + f" {'peak MB':>8} {'embedding (est.)':>17}"
    )
    for r in results:
        cells = " ".join(f"{r['seconds'][s]:21.2f}s" for s in stages)
        print(f"{r['chunks']:7d} {cells} {r['peak_mb']:8.0f} {r['chunks'] / EMBED_RATE:16.0f}s")
    first, last = results[0], results[-1]
    x = last["chunks"] / first["chunks"]
    growth = ", ".join(f"{s} x{last['seconds'][s] / max(first['seconds'][s], 1e-9):.1f}" for s in stages)
    print(f"growth from {first['chunks']} to {last['chunks']} chunks (x{x:.0f}): {growth}")
    verdict = "within" if last["peak_mb"] <= 2048 else "OVER"
    print(f"peak memory at {last['chunks']} chunks: {last['peak_mb']:.0f} MB ({verdict} the 2 GB goal)")


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: where a LanceDB build's time goes, and what each approximate index recalls for it.

    .venv/bin/python benchmarks/ann_build.py [--chunks 10000] [--queries 100] [--dim 384] [--probes 0.25]

One synthetic table as benchmarks/scale.py's (words of a Zipf-like vocabulary, the hashing embedder's
vectors): the table written, its BM25 full-text index, then each vector index built in turn on the same
table (IVF-PQ as LanceDB trains it by default, 50 k-means rounds; IVF-PQ at 10 rounds; IVF-SQ; IVF-HNSW-SQ
in one partition) and searched by `--queries` questions (8 words of a chunk) at `--probes` of its
partitions with refine_factor 10 (the graph: ef 128, no refine): its build seconds, ann_recall_at_k (k=10)
against numpy's exact top k, and search p50/p95. Also prints how close the exact neighbours are: the mean
cosine of the 1st, 2nd, 10th and 11th (a small 10th-11th gap is what an approximate index must resolve).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import hashing_static  # noqa: E402

K = 10


def main() -> None:
    import lancedb
    import pyarrow as pa

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--probes", type=float, default=0.25)
    args = ap.parse_args()
    n, dim = args.chunks, args.dim
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(20000)])
    weights = 1 / np.arange(1, len(vocab) + 1)
    words = rng.choice(vocab, size=(n, 60), p=weights / weights.sum())
    texts = [" ".join(r) for r in words]
    encode = hashing_static(dim)
    vectors = encode(texts).astype(np.float32)
    qvec = encode([" ".join(words[i, 10:18]) for i in rng.choice(n, args.queries, replace=False)])
    scores = qvec @ vectors.T
    truth = [set(np.argsort(-s, kind="stable")[:K].tolist()) for s in scores]
    ranked = -np.sort(-scores, axis=1)
    print(
        f"{n:,d} chunks; exact neighbours' mean cosine: 1st {ranked[:, 0].mean():.3f}, 2nd "
        f"{ranked[:, 1].mean():.3f}, 10th {ranked[:, 9].mean():.3f}, 11th {ranked[:, 10].mean():.3f}"
    )
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "text": pa.array(texts),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        db = lancedb.connect(tmp)
        t0 = time.perf_counter()
        tbl = db.create_table("t", table)
        print(f"table written: {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
        tbl.create_index("text", config=lancedb.index.FTS(base_tokenizer="simple", lower_case=True))
        print(f"BM25 full-text index: {time.perf_counter() - t0:.2f} s")
        # LanceDB trains at most n / 256 partitions
        parts = max(2, min(int(math.sqrt(n)), n // 256))
        probes = max(1, math.ceil(parts * args.probes))
        ix = lancedb.index
        builds = {
            "ivf_pq (50 rounds)": (
                ix.IvfPq(distance_type="cosine", num_partitions=parts, num_sub_vectors=48),
                {},
            ),
            "ivf_pq (10 rounds)": (
                ix.IvfPq(distance_type="cosine", num_partitions=parts, num_sub_vectors=48, max_iterations=10),
                {},
            ),
            "ivf_sq": (ix.IvfSq(distance_type="cosine", num_partitions=parts), {}),
            "ivf_hnsw_sq (1 partition)": (
                ix.IvfHnswSq(distance_type="cosine", num_partitions=1, m=16, ef_construction=128),
                {"ef": 128},
            ),
        }
        for name, (config, search) in builds.items():
            t0 = time.perf_counter()
            tbl.create_index("vector", config=config, replace=True)
            built = time.perf_counter() - t0
            lat, rec = [], []
            for i, q in enumerate(qvec):
                s = tbl.search(q, vector_column_name="vector").distance_type("cosine")
                s = s.ef(search["ef"]) if "ef" in search else s.nprobes(probes).refine_factor(10)
                t0 = time.perf_counter()
                got = {r["id"] for r in s.limit(K).select(["id"]).to_list()}
                lat.append((time.perf_counter() - t0) * 1000)
                rec.append(len(got & truth[i]) / K)
            at = "ef 128" if "ef" in search else f"{probes} of {parts} partitions, refine 10"
            print(
                f"{name:28} build {built:7.2f} s   recall {np.mean(rec):.3f}   p50/p95 "
                f"{np.percentile(lat[1:], 50):5.1f}/{np.percentile(lat[1:], 95):5.1f} ms   ({at})"
            )


if __name__ == "__main__":
    sys.exit(main())

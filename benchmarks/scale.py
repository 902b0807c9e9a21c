"""Benchmark: how every stage's time and peak memory grow with the corpus, to a million chunks.

    .venv/bin/python benchmarks/scale.py [--sizes 10000,100000,1000000] [--queries 200] [--dim 384]
        [--index ivf_rq] [--bits 4] [--probes 0.3] [--refine 10]

For each size, a new process (so its memory is its own): a synthetic corpus (seeded; documents of ~5
paragraphs of words drawn from a Zipf-like vocabulary), chunked by `rag_core.chunking.chunkers` (recursive,
384 chars), embedded by a fast deterministic embedder registered as an embedding plug-in (`hashing-static`:
each word a seeded random vector, a chunk the normalized sum of its words', a static model of the
model2vec kind) so that the model is not what is measured (all-MiniLM-L6-v2's own rate is
benchmarks/embedding_throughput.py's), then indexed in LanceDB (the default store; one `upsert`: the table,
its BM25 full-text index and an approximate vector index, `--index`: IVF-RQ, RaBitQ codes of `--bits` a
dimension, or IVF-SQ, a byte a dimension; ~sqrt(n) partitions, `--probes` of them searched, `--refine` x k
candidates re-ranked by their full vectors), and searched by `--queries` questions
(each a few words of one chunk): BM25 and the approximate vector search; ann_recall_at_k at k=10
(rag_core/retrieval/ann_recall.py) against the exact top k of every question, computed by numpy over all
the vectors (the store's exact search, ~7 s a question at 1M, is timed on its first 10 questions only).

Prints per size: each stage's seconds and peak resident memory above the process's start (and the whole
process's peak), search p50/p95, ann_recall_at_k, and per stage the growth from the smallest size to the
largest and over the last step (a small size's fractions of a second are mostly fixed costs) against the
growth in chunks (linear: the same ratio). Goals at 1M: peak <= 8 GB; approximate
vector search p95 <= 20 ms at ann_recall_at_k >= 0.95; BM25 p95 <= 20 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

K = 10
GOAL_PEAK_MB, GOAL_P95_MS, GOAL_RECALL = 8192, 20.0, 0.95


def hashing_static(dim: int):
    """encode(texts): each word a random unit vector seeded by its CRC-32, a text the normalized sum of
    its words' (one sparse count matrix times the word vectors: numpy work, no model)."""
    from scipy import sparse

    words: dict[str, int] = {}
    table: list[np.ndarray] = []

    def word_id(w: str) -> int:
        i = words.get(w)
        if i is None:
            i = words[w] = len(table)
            table.append(
                np.random.default_rng(zlib.crc32(w.encode())).standard_normal(dim).astype(np.float32)
            )
        return i

    def encode(texts: list[str]) -> np.ndarray:
        rows, cols = [], []
        for r, text in enumerate(texts):
            ids = [word_id(w) for w in text.lower().split()]
            rows += [r] * len(ids)
            cols += ids
        counts = sparse.csr_matrix(
            (np.ones(len(cols), np.float32), (rows, cols)), shape=(len(texts), len(table))
        )
        out = np.asarray(counts @ np.stack(table))
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    return encode


def synthetic_paragraphs(rng: np.random.Generator, n_docs: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Five paragraphs a document of 40-64 words drawn from a Zipf-like vocabulary of 20,000: (the words,
    each paragraph's length, the paragraphs), from `rng` (seeded by the caller: the same corpus each run)."""
    vocab = np.array([f"w{i}" for i in range(20000)])
    weights = 1 / np.arange(1, len(vocab) + 1)
    words = rng.choice(vocab, size=(n_docs * 5, 64), p=weights / weights.sum())
    lengths = rng.integers(40, 65, n_docs * 5)
    return words, lengths, [" ".join(words[i, : lengths[i]]) + "." for i in range(n_docs * 5)]


def synthetic_corpus(paras: list[str]):
    """The corpus of `synthetic_paragraphs`' paragraphs, five to a document (doc_id d<i>)."""
    import polars as pl

    n_docs = len(paras) // 5
    return pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(n_docs)],
            "title": [f"Doc {i}" for i in range(n_docs)],
            "text": ["\n\n".join(paras[5 * i : 5 * i + 5]) for i in range(n_docs)],
            "metadata": [None] * n_docs,
        }
    )


def one_size(
    target: int, n_queries: int, dim: int, index: str, bits: int, probes: float, refine: int
) -> dict:
    from rag_core.chunking.chunkers import chunk_corpus
    from rag_core.common.peak_memory import measured
    from rag_core.components.embedders import EMBEDDERS, Embedder
    from rag_core.metrics import percentile
    from rag_core.planning.ann import AnnIndex
    from rag_core.retrieval.ann_recall import recall_at_k
    from resources.vector_stores.lancedb_store import LanceDBStore

    EMBEDDERS.register(
        "hashing-static", Embedder("hashing-static", "a static hashing embedder", hashing_static(dim))
    )
    encode = EMBEDDERS.get("hashing-static").encode
    rng = np.random.default_rng(0)
    stages: dict[str, dict] = {}

    def record(name: str, m) -> None:
        stages[name] = {"s": m.seconds, "peak_mb": m.peak_mb, "rss_mb": m.peak_rss_mb}

    with measured() as m:
        words, _, paras = synthetic_paragraphs(rng, max(1, target // 5))
        corpus = synthetic_corpus(paras)
        del words, paras
    record("corpus", m)
    with measured() as m:
        chunks = chunk_corpus(corpus, "recursive", 384, 48)
    record("chunking", m)
    del corpus
    texts = chunks["index_text"].to_list()
    with measured() as m:
        vectors = np.concatenate([encode(texts[i : i + 50_000]) for i in range(0, len(texts), 50_000)])
    record("embedding", m)
    rows = [
        {"chunk_id": c, "doc_id": d, "text": x}
        for c, d, x in zip(chunks["chunk_id"], chunks["doc_id"], texts, strict=True)
    ]
    del chunks
    n = len(rows)
    # IVF-RQ or IVF-SQ (no codebooks to train: IVF-PQ's training was its build's time): ~sqrt(n)
    # partitions, a share of them probed, refine x k candidates re-ranked by their full vectors
    partitions = max(2, int(math.sqrt(n)))
    ann = AnnIndex(
        type=index,
        num_partitions=partitions,
        nprobes=max(1, math.ceil(partitions * probes)),
        refine_factor=refine,
        **({"num_bits": bits} if index == "ivf_rq" else {}),
    ).effective()
    questions = []
    for i in rng.choice(n, n_queries, replace=False):
        w = texts[i].split("\n", 1)[-1].split()
        start = int(rng.integers(0, max(1, len(w) - 8)))
        questions.append(" ".join(w[start : start + 8]))
    qvec = encode(questions)
    with measured() as m:  # the reference: every question's exact top k (cosine; the vectors are unit)
        exact_top = []
        for q in qvec:
            scores = np.concatenate([vectors[i : i + 100_000] @ q for i in range(0, n, 100_000)])
            top = np.argpartition(-scores, K)[:K]
            exact_top.append([rows[i]["chunk_id"] for i in top[np.argsort(-scores[top], kind="stable")]])
    record("exact top-k (numpy reference)", m)
    with tempfile.TemporaryDirectory() as tmp:
        store = LanceDBStore(uri=tmp)
        store.upsert("warm-up", rows[:300], vectors[:300])  # imports and first-call set-up, not the size's
        with measured() as m:
            store.upsert("bench", rows, vectors, ann=ann)
        record(f"index (table + BM25 + {index})", m)
        del rows, vectors
        searches: dict[str, list[float]] = {"bm25": [], "vector (ann)": [], "vector (exact)": []}
        found: list[list[str]] = []
        calls = {
            "bm25": lambda i: store.keyword_search("bench", questions[i], K),
            "vector (ann)": lambda i: store.vector_search("bench", qvec[i], K),
            "vector (exact)": lambda i: store.exact_vector_search("bench", qvec[i], K),
        }
        import time

        for name, call in calls.items():
            call(0)  # the first query opens the index: untimed
            with measured() as m:
                for i in range(n_queries if name != "vector (exact)" else min(n_queries, 10)):
                    t0 = time.perf_counter()
                    hits = call(i)
                    searches[name].append((time.perf_counter() - t0) * 1000)
                    if name == "vector (ann)":
                        found.append([h.chunk_id for h in hits])
            record(f"{name} searches", m)
    recall = float(np.mean([recall_at_k(a, e) for a, e in zip(found, exact_top, strict=True)]))
    latency = {k: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for k, v in searches.items()}
    return {"chunks": n, "stages": stages, "latency_ms": latency, "ann_recall_at_k": recall, "ann": ann.key}


def run_size(chunks: int, queries: int, dim: int, index: str, bits: int, probes: float, refine: int) -> dict:
    cmd = [sys.executable, __file__, "--one", str(chunks), "--queries", str(queries), "--dim", str(dim)]
    cmd += ["--index", index, "--bits", str(bits), "--probes", str(probes), "--refine", str(refine)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(results: list[dict]) -> None:
    names = list(results[0]["stages"])
    print(
        f"{'stage':34} "
        + " ".join(f"{r['chunks']:>18,d}" for r in results)
        + "   growth (chunks x), last step (chunks x)"
    )
    first, prev, last = results[0], results[-2] if len(results) > 1 else results[0], results[-1]
    x, x_last = last["chunks"] / first["chunks"], last["chunks"] / prev["chunks"]
    for s in names:
        cells = " ".join(f"{r['stages'][s]['s']:8.2f}s {r['stages'][s]['peak_mb']:6.0f}MB" for r in results)
        growth = last["stages"][s]["s"] / max(first["stages"][s]["s"], 1e-9)
        step = last["stages"][s]["s"] / max(prev["stages"][s]["s"], 1e-9)
        print(f"{s:34} {cells}   x{growth:.1f} (x{x:.0f}), x{step:.1f} (x{x_last:.0f})")
    print(
        f"{'process peak RSS':34} "
        + " ".join(f"{max(v['rss_mb'] for v in r['stages'].values()):16.0f}MB" for r in results)
    )
    for kind in results[0]["latency_ms"]:
        cells = " ".join(
            f"{r['latency_ms'][kind]['p50']:7.1f}/{r['latency_ms'][kind]['p95']:7.1f}ms" for r in results
        )
        print(f"{kind + ' p50/p95':34} {cells}")
    print(f"{'ann_recall_at_k (k=10)':34} " + " ".join(f"{r['ann_recall_at_k']:18.3f}" for r in results))
    print(f"ann index: {', '.join(r['ann'] for r in results)}")
    peak = max(v["rss_mb"] for v in last["stages"].values())
    lat = last["latency_ms"]
    checks = {
        f"peak <= {GOAL_PEAK_MB} MB": peak <= GOAL_PEAK_MB,
        f"ann p95 <= {GOAL_P95_MS:g} ms": lat["vector (ann)"]["p95"] <= GOAL_P95_MS,
        f"ann_recall_at_k >= {GOAL_RECALL}": last["ann_recall_at_k"] >= GOAL_RECALL,
        f"bm25 p95 <= {GOAL_P95_MS:g} ms": lat["bm25"]["p95"] <= GOAL_P95_MS,
    }
    print(
        f"goals at {last['chunks']:,d} chunks: "
        + ", ".join(f"{k}: {'met' if ok else 'MISSED'}" for k, ok in checks.items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--index", choices=("ivf_rq", "ivf_sq"), default="ivf_rq", help="the approximate index")
    ap.add_argument("--bits", type=int, default=4, help="ivf_rq: RaBitQ bits a dimension")
    ap.add_argument("--probes", type=float, default=0.3, help="the share of IVF partitions searched")
    ap.add_argument("--refine", type=int, default=10, help="refine_factor: candidates re-ranked, x k")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process: its JSON
    ap.add_argument("--results", help="also write the sizes' figures to this JSON file")
    args = ap.parse_args()
    if args.one:
        figures = one_size(args.one, args.queries, args.dim, args.index, args.bits, args.probes, args.refine)
        print(json.dumps(figures))
        return
    results = []
    for s in args.sizes.split(","):
        results.append(
            run_size(int(s), args.queries, args.dim, args.index, args.bits, args.probes, args.refine)
        )
        # each size's figures as soon as they are measured: a long run stopped later keeps them
        print(f"measured {json.dumps(results[-1])}", file=sys.stderr, flush=True)
        if args.results:
            Path(args.results).write_text(json.dumps(results, indent=1))
    report(results)


if __name__ == "__main__":
    sys.exit(main())

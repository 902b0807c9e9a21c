"""The baseline a sweep is measured against: a plain loop that builds every config from scratch.

    .venv/bin/python benchmarks/naive_loop.py SPEC --work DIR [--out metrics.json]

For each config of the sweep, in order, with nothing shared between configs: chunk the corpus, embed every
chunk (an empty embedding cache per config), build its index in a new LanceDB folder, then retrieve,
rerank, answer and evaluate, through the same `rag_core` functions and resources the pipeline's stages
call, so the work per config is the pipeline's. No Dagster, no MLflow, no artifacts: what a team writes
before it has a tool. Prints one line per config; `--out` writes each config's metric means (keyed by
config key), which `benchmarks/overhead.py` compares with the sweep's leaderboard (the same work gives
the same scores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the CLI: no remote price list at import
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

COMPARED = ("recall_at_k", "ndcg_at_k", "exact_match", "token_f1", "faithfulness")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--work", required=True, help="an empty folder for the per-config caches and indexes")
    ap.add_argument("--out", help="write each config's metric means here (JSON)")
    args = ap.parse_args()

    import litellm

    from rag_core.chunking.chunkers import chunk_corpus
    from rag_core.data.datasets import load_corpus, load_qa
    from rag_core.evaluation.evaluate import evaluate
    from rag_core.generation.answering import answer
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import load_sweep
    from rag_core.retrieval.rerank import rerank
    from rag_core.retrieval.retrieve import retrieve
    from resources.embedders import EmbeddingService
    from resources.llm import LLMClient
    from resources.vector_stores import LanceDBStore

    plan = Plan.resolve(load_sweep(args.spec))
    sweep = plan.sweep
    corpus = load_corpus(sweep.corpus_path)
    qa = load_qa(sweep.qa_path, set(corpus["doc_id"].to_list()), sweep.max_queries, corpus)
    llm = LLMClient()
    work = Path(args.work)
    scores = {}
    for i, key in enumerate(plan.config_keys):
        t0 = time.perf_counter()
        c = plan.config(key)
        embedder = EmbeddingService(cache_dir=str(work / f"cache{i}"))  # nothing reused across configs
        model = c.embedding.model

        def embed(texts: list[str], embedder=embedder, model=model):
            return embedder.embed(model, texts)[0]

        ch = c.chunking
        chunks = chunk_corpus(corpus, ch.method, ch.chunk_size, ch.chunk_overlap)
        vectors = embed(chunks["index_text"].to_list())
        store = LanceDBStore(uri=str(work / f"index{i}"))
        rows = chunks.select("chunk_id", "doc_id", "index_text", "metadata").rename({"index_text": "text"})
        store.upsert("naive", rows.to_dicts(), vectors, c.index.bm25_analyzer)
        chunk_vectors = dict(zip(chunks["chunk_id"].to_list(), vectors, strict=True))
        retrieved = retrieve(c, qa, chunks, store, "naive", embed, llm)
        reranked = rerank(c, retrieved, qa, llm, chunk_vectors=lambda cv=chunk_vectors: cv, embed=embed)

        def count_tokens(text: str, model=c.generation.model) -> int:
            return litellm.token_counter(model=model, text=text)

        answers = answer(c, qa, reranked, llm, count_tokens, parents=lambda ch=chunks: (ch, corpus))
        _, metrics = evaluate(
            c,
            qa,
            reranked,
            answers,
            chunks,
            embed=embed,
            chunk_vectors=chunk_vectors,
            token_counts=lambda texts, e=embedder, m=model: e.token_counts(m, texts),
            max_tokens=embedder.max_tokens(model),
            judged=None,
        )
        scores[key] = {m: metrics.get(m) for m in COMPARED}
        print(f"{plan.labels[key]}: {len(chunks)} chunks, {time.perf_counter() - t0:.1f} s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(scores))


if __name__ == "__main__":
    sys.exit(main())

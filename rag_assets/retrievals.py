"""Retrievals: the top fetch_k chunks of every question (partitioned by index + retrieval settings).

fetch_k is the reranker's candidate count, or top_k without a reranker. An optional LLM query
transformation (rewrite, multi_query, hyde; rag_core/query_transform.py) runs first; when it fails or
returns nothing usable the original question is used and the fallback is counted.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import numpy as np
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.fusion import rrf_many
from rag_core.metrics import percentile
from rag_core.query_transform import parse_reply, prompt_for
from rag_core.spec import RagConfig, Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import EmbeddingService
from resources.llm import NO_USAGE, LLMClient, usage
from resources.vector_stores import Hit, VectorStore, VectorStoreCatalog, store_of

RETRIEVAL_SCHEMA = {
    "query_id": pl.String,
    "queries": pl.List(pl.String),  # what was searched: the question, or its transformation(s)
    "transform_fallback": pl.Boolean,
    "transform_tokens": pl.Int64,
    "transform_cost_usd": pl.Float64,
    "transform_ms": pl.Float64,
    "chunk_ids": pl.List(pl.String),
    "doc_ids": pl.List(pl.String),
    "scores": pl.List(pl.Float64),
    "titles": pl.List(pl.String),
    "texts": pl.List(pl.String),
    "latency_ms": pl.Float64,
}


def transform_queries(
    c: RagConfig, questions: list[str], llm: LLMClient
) -> list[tuple[list[str], bool, dict]]:
    """Per question: (queries to search, fell back?, usage). Without a transformation: ([question], False)."""
    r = c.retrieval
    if r.query_transform == "none":
        return [([q], False, NO_USAGE) for q in questions]

    def one(q: str) -> tuple[list[str], bool, dict]:
        out = llm.complete(
            r.query_model, prompt_for(r.query_transform, q, r.n_queries), temperature=0.0, max_tokens=256
        )
        parsed = [] if out.error else parse_reply(r.query_transform, out.text, r.n_queries)
        return (parsed, False, usage(out)) if parsed else ([q], True, usage(out))

    with ThreadPoolExecutor(max_workers=llm.max_concurrency) as pool:
        return list(pool.map(one, questions))


def search(
    store: VectorStore,
    collection: str,
    c: RagConfig,
    question: str,
    queries: list[str],
    fell_back: bool,
    embed,
) -> list[Hit]:
    r, k = c.retrieval, c.fetch_k

    def run(text: str, vector) -> list[Hit]:
        return store.retrieve(collection, r.mode, text, vector, k, r.hybrid_alpha, r.fusion, r.filter)

    if r.query_transform == "multi_query" and not fell_back:
        texts = [question, *queries]
        vectors = embed(texts) if r.mode != "bm25" else [None] * len(texts)
        rankings = [run(t, v) for t, v in zip(texts, vectors, strict=True)]
        by_id = {h.chunk_id: h for ranking in rankings for h in ranking}
        fused = rrf_many([[(h.chunk_id, h.score) for h in ranking] for ranking in rankings])[:k]
        return [Hit(cid, by_id[cid].doc_id, by_id[cid].text, s) for cid, s in fused]
    if r.query_transform == "hyde" and not fell_back:
        passage = queries[0]  # the hypothetical answer replaces the question's vector
        keyword = f"{question} {passage}" if r.mode == "bm25" else question
        return run(keyword, None if r.mode == "bm25" else embed([passage])[0])
    text = queries[0]  # the question, or its rewrite
    return run(text, None if r.mode == "bm25" else embed([text])[0])


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.retrievals,
        deps=[dg.AssetDep("vector_index", partition_mapping=parts.index_to_retrieval), "qa_set"],
        group_name="evaluation",
        kinds={"parquet"},
        automation_condition=EAGER,
        description="Per query: searched queries, ranked chunk ids, doc ids, scores and texts, and the search "
        "latency (ms of the store queries; embeddings come from the cache).",
    )
    def retrievals(
        context: dg.AssetExecutionContext,
        artifacts: ArtifactStore,
        embedder: EmbeddingService,
        vector_store: dg.ResourceParam[VectorStore],
        vector_stores: VectorStoreCatalog,
        llm: LLMClient,
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("retrieval_key", context.partition_key)
        fp = lineage.retrieval_fp(c)
        reused = artifacts.exists("retrievals", fp) and not forced(context)
        if reused:
            df = artifacts.read("retrievals", fp, "retrievals")
        else:
            qa = artifacts.read("qa", lineage.qa_fp, "qa_set")
            chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
            by_id = {
                row["chunk_id"]: row
                for row in chunks.select("chunk_id", "title", "text").iter_rows(named=True)
            }
            questions = qa["question"].to_list()
            transformed = transform_queries(c, questions, llm)
            model = c.embedding.model
            # embed every text searched by vector in one cached batch, then look vectors up per query
            to_embed = list(
                dict.fromkeys(
                    t for q, (qs, _, _) in zip(questions, transformed, strict=True) for t in [q, *qs]
                )
            )
            cache = (
                dict(zip(to_embed, embedder.embed(model, to_embed)[0], strict=True))
                if c.retrieval.mode != "bm25"
                else {}
            )

            def embed(texts: list[str]) -> np.ndarray:
                return np.stack([cache[t] for t in texts])

            collection = lineage.collection(c)
            store = store_of(lineage.backend_of(c), vector_store, vector_stores)
            rows = []
            for qid, question, (queries, fell_back, used) in zip(
                qa["query_id"], questions, transformed, strict=True
            ):
                t0 = time.perf_counter()
                hits = search(store, collection, c, question, queries, fell_back, embed)
                rows.append(
                    {
                        "query_id": qid,
                        "queries": queries,
                        "transform_fallback": fell_back,
                        "transform_tokens": used["tokens"],
                        "transform_cost_usd": used["cost_usd"],
                        "transform_ms": used["ms"],
                        "chunk_ids": [h.chunk_id for h in hits],
                        "doc_ids": [h.doc_id for h in hits],
                        "scores": [h.score for h in hits],
                        "titles": [by_id[h.chunk_id]["title"] for h in hits],
                        "texts": [by_id[h.chunk_id]["text"] for h in hits],
                        "latency_ms": (time.perf_counter() - t0) * 1000,
                    }
                )
            df = pl.DataFrame(rows, schema=RETRIEVAL_SCHEMA)
            artifacts.write("retrievals", fp, df)
        lat = df["latency_ms"].to_list()
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("retrievals", fp), reused),
                "dagster/row_count": df.height,
                "latency_p50_ms": round(percentile(lat, 50), 3),
                "latency_p95_ms": round(percentile(lat, 95), 3),
                "mean_hits": float(df["chunk_ids"].list.len().mean()),
                "fetch_k": c.fetch_k,
                "store": lineage.backend_of(c),
                "transform_fallbacks": int(df["transform_fallback"].sum()),
                **{
                    f"config/{k}": v for k, v in c.settings("retrieval")["retrieval"].items() if v is not None
                },
            },
            data_version=dg.DataVersion(fp),
        )

    return retrievals

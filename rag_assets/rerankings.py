"""Rerankings: a reranker's top_k out of the retrieved candidates (partitioned by retrieval + reranker).

Two rerankers over one retrieval share its partition: retrieval is not re-run. `none` keeps the first
top_k. An LLM reranking whose reply cannot be parsed (or whose call fails) keeps the retrieval order, and
the fallback is counted.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import numpy as np
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.embeddings import chunk_vectors
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_assets.retrievals import RETRIEVAL_SCHEMA
from rag_core.metrics import percentile
from rag_core.rerank import llm_rerank_prompt, mmr, parse_ordering
from rag_core.spec import RagConfig, Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import EmbeddingService
from resources.llm import NO_USAGE, LLMClient, usage

RERANK_SCHEMA = {
    **RETRIEVAL_SCHEMA,
    "rerank_fallback": pl.Boolean,
    "rerank_ms": pl.Float64,
    "rerank_tokens": pl.Int64,
    "rerank_cost_usd": pl.Float64,
}
LIST_COLUMNS = ("chunk_ids", "doc_ids", "scores", "titles", "texts")

_CROSS_ENCODERS: dict[str, object] = {}
_LOCK = threading.Lock()


def cross_encoder(path: str):
    with _LOCK:
        if path not in _CROSS_ENCODERS:
            from sentence_transformers import CrossEncoder

            _CROSS_ENCODERS[path] = CrossEncoder(path, device="cpu")
        return _CROSS_ENCODERS[path]


def orders(
    c: RagConfig, rows: list[dict], questions: dict[str, str], llm: LLMClient, vectors
) -> list[tuple[list[int], bool, dict]]:
    """Per query: (candidate indices in the new order, fell back?, usage: tokens, cost, ms)."""
    method, k = c.rerank.method, c.retrieval.top_k
    model = cross_encoder(c.rerank.model) if method == "cross_encoder" else None

    def one(r: dict) -> tuple[list[int], bool, dict]:
        t0 = time.perf_counter()
        n = len(r["texts"] or [])
        if method == "none" or n == 0:
            return list(range(n)), False, NO_USAGE
        if method == "mmr":
            q, cands = vectors(r)
            order = mmr(q, cands, k, c.rerank.mmr_lambda)
        elif method == "cross_encoder":
            scores = model.predict([(questions[r["query_id"]], t) for t in r["texts"]])
            order = sorted(range(n), key=lambda i: (-float(scores[i]), i))
        else:  # llm
            reply = llm.complete(
                c.rerank.model, llm_rerank_prompt(questions[r["query_id"]], r["texts"]), max_tokens=128
            )
            parsed = None if reply.error else parse_ordering(reply.text, n)
            return (
                (parsed, False, usage(reply)) if parsed is not None else (list(range(n)), True, usage(reply))
            )
        return order, False, {**NO_USAGE, "ms": (time.perf_counter() - t0) * 1000}

    if method != "llm":
        return [one(r) for r in rows]
    with ThreadPoolExecutor(max_workers=llm.max_concurrency) as pool:
        return list(pool.map(one, rows))


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.reranks,
        deps=[dg.AssetDep("retrievals", partition_mapping=parts.retrieval_to_rerank), "qa_set"],
        group_name="evaluation",
        kinds={"parquet"},
        pool="llm",
        automation_condition=EAGER,
        description="Per query: the final top_k chunks after reranking (none, mmr, llm, cross_encoder).",
    )
    def rerankings(
        context: dg.AssetExecutionContext,
        artifacts: ArtifactStore,
        embedder: EmbeddingService,
        llm: LLMClient,
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("rerank_key", context.partition_key)
        fp = lineage.rerank_fp(c)
        reused = artifacts.exists("rerankings", fp) and not forced(context)
        if reused:
            df = artifacts.read("rerankings", fp, "rerankings")
        else:
            ret = artifacts.read("retrievals", lineage.retrieval_fp(c), f"retrievals {c.retrieval_key}")
            qa = artifacts.read("qa", lineage.qa_fp, "qa_set")
            questions = dict(zip(qa["query_id"], qa["question"], strict=True))
            rows = list(ret.iter_rows(named=True))
            vectors = None
            if c.rerank.method == "mmr":
                chunk_vec = chunk_vectors(artifacts, lineage, c)
                qids = [r["query_id"] for r in rows]
                qvec = dict(
                    zip(qids, embedder.embed(c.embedding.model, [questions[q] for q in qids])[0], strict=True)
                )

                def vectors(r: dict):
                    cands = (
                        np.stack([chunk_vec[x] for x in r["chunk_ids"]])
                        if r["chunk_ids"]
                        else np.zeros((0, 1))
                    )
                    return qvec[r["query_id"]], cands

            ordered = orders(c, rows, questions, llm, vectors)
            out = []
            for r, (order, fell_back, used) in zip(rows, ordered, strict=True):
                keep = order[: c.retrieval.top_k]
                out.append(
                    {
                        **r,
                        **{col: [r[col][i] for i in keep] for col in LIST_COLUMNS},
                        "rerank_fallback": fell_back,
                        "rerank_ms": used["ms"],
                        "rerank_tokens": used["tokens"],
                        "rerank_cost_usd": used["cost_usd"],
                    }
                )
            df = pl.DataFrame(out, schema=RERANK_SCHEMA)
            artifacts.write("rerankings", fp, df)
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("rerankings", fp), reused),
                "dagster/row_count": df.height,
                "method": c.rerank.method,
                "rerank_fallbacks": int(df["rerank_fallback"].sum()),
                "rerank_p50_ms": round(percentile(df["rerank_ms"].to_list(), 50), 3),
                "rerank_p95_ms": round(percentile(df["rerank_ms"].to_list(), 95), 3),
                "rerank_cost_usd": float(df["rerank_cost_usd"].sum()),
            },
            data_version=dg.DataVersion(fp),
        )

    return rerankings

"""Rerankings: a reranker's top_k out of the retrieved candidates (rag_core/retrieval/rerank.py). Two rerankers
over one retrieval share its partition: retrieval is not re-run."""

from __future__ import annotations

import polars as pl

from rag_assets.stage_asset import StageLogic, StageRun
from rag_core.metrics import percentile
from rag_core.retrieval.rerank import rerank
from resources.embedders import chunk_vectors


class Rerankings(StageLogic):
    description = "Per query: the final top_k chunks after reranking (none, mmr, llm, cross_encoder)."
    resources = ("embedder", "llm")

    def compute(self, run: StageRun) -> pl.DataFrame:
        c = run.config
        return rerank(
            c,
            run.read("retrievals"),
            run.read("qa_set"),
            run.llm,
            chunk_vectors=lambda: chunk_vectors(run.read("embeddings")),
            embed=run.resources.embedder.vectors_of(c.embedding.model),
        )

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        ms = frame["rerank_ms"].to_list()
        return {
            "dagster/row_count": frame.height,
            "method": run.config.rerank.method,
            "rerank_fallbacks": int(frame["rerank_fallback"].sum()),
            "rerank_p50_ms": round(percentile(ms, 50), 3),
            "rerank_p95_ms": round(percentile(ms, 95), 3),
            "rerank_cost_usd": float(frame["rerank_cost_usd"].sum()),
        }

"""Retrievals: the top fetch_k chunks of every question (rag_core/retrieval.py)."""

from __future__ import annotations

import polars as pl

from rag_assets.stage_asset import StageLogic, StageRun
from rag_core.metrics import percentile
from rag_core.retrieval import retrieve


class Retrievals(StageLogic):
    description = (
        "Per query: searched queries, ranked chunk ids, doc ids, scores and texts, and the search latency "
        "(ms of the store queries; embeddings come from the cache)."
    )
    resources = ("embedder", "vector_stores", "llm")

    def compute(self, run: StageRun) -> pl.DataFrame:
        c = run.config
        embedder = run.resources.embedder
        return retrieve(
            c,
            run.read("qa_set"),
            run.read("chunksets"),
            run.resources.vector_stores.get(c.index.store),
            run.read("vector_index")["collection"][0],
            lambda texts: embedder.embed(c.embedding.model, texts)[0],
            run.resources.llm,
        )

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        c, lat = run.config, frame["latency_ms"].to_list()
        return {
            "dagster/row_count": frame.height,
            "latency_p50_ms": round(percentile(lat, 50), 3),
            "latency_p95_ms": round(percentile(lat, 95), 3),
            "mean_hits": float(frame["chunk_ids"].list.len().mean()),
            "fetch_k": c.fetch_k,
            "store": c.index.store,
            "transform_fallbacks": int(frame["transform_fallback"].sum()),
            **{
                f"config/{k}": v
                for k, v in run.partition.own.items()
                if v is not None and not isinstance(v, dict)
            },
        }

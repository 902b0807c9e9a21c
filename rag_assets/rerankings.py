"""Rerankings: a reranker's top_k out of the retrieved candidates (rag_core/retrieval/rerank.py). Two rerankers
over one retrieval share its partition: retrieval is not re-run."""

from __future__ import annotations

import polars as pl

from rag_assets.devices import devices_part
from rag_assets.stage_asset import StageLogic, StageRun
from rag_core.components.rerankers import RERANKERS
from rag_core.metrics import percentile
from rag_core.retrieval.rerank import rerank
from resources.artifacts import Artifact
from resources.embedders import chunk_vectors


class Rerankings(StageLogic):
    description = "Per query: the final top_k chunks after reranking (none, mmr, llm, cross_encoder)."
    resources = ("embedder", "llm")

    def side_by_side(self, sweep, config) -> bool:
        # a reranker whose work is LLM calls (`llm`, a plug-in's that calls one) reads only its own config's
        # retrievals: it shares nothing with the other configs' but the client; a local model does share
        reranker = RERANKERS.get(config.rerank.method)
        return reranker.calls_llm and not reranker.local_model

    def compute(self, run: StageRun) -> Artifact:
        c = run.config
        device = None
        if c.rerank.method == "cross_encoder":  # where it runs: $RAG_DEVICE, as the embedder's
            device = run.resources.embedder.local_device()
            run.notes.update(cross_encoder_device=device.label, device_setting=device.why)
        frame = rerank(
            c,
            run.read("retrievals"),
            run.read("qa_set"),
            run.llm,
            chunk_vectors=lambda: chunk_vectors(run.read("embeddings")),
            embed=run.resources.embedder.vectors_of(c.embedding.model),
            device=device.name if device else "cpu",
        )
        return Artifact(run.ref, frame, devices_part({device.label: frame.height}) if device else {})

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        ms = frame["rerank_ms"].to_list()
        return {
            "dagster/row_count": frame.height,
            "method": run.config.rerank.method,
            "rerank_fallbacks": int(frame["rerank_fallback"].sum()),
            "rerank_p50_ms": round(percentile(ms, 50), 3),
            "rerank_p95_ms": round(percentile(ms, 95), 3),
            "rerank_cost_usd": float(frame["rerank_cost_usd"].sum()),
            **run.notes,
        }

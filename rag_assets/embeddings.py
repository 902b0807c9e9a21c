"""Embeddings of a chunkset by one model.

Vectors come from the embedding cache, keyed by (model, text hash): only texts never embedded before
reach the model, across configs and runs. The artifact holds chunk_id and an Arrow fixed-size float32 list.
"""

from __future__ import annotations

import dagster as dg
import polars as pl

from rag_assets.devices import devices_part
from rag_assets.stage_asset import Check, StageLogic, StageRun
from rag_core.common.local_models import is_local
from rag_core.common.progress import report
from rag_core.metrics.chunking import truncated_share
from resources.artifacts import Artifact
from resources.embedders import fixed_size_vectors


class Embeddings(StageLogic):
    description = "One L2-normalized float32 vector per chunk (index_text), from the embedding cache."
    resources = ("embedder",)
    checks = (Check("aligned_with_chunks", "One vector per chunk of the chunkset, in its order.", True),)

    def compute(self, run: StageRun) -> Artifact:
        model, embedder = run.config.embedding.model, run.resources.embedder
        if is_local(model):  # $RAG_DEVICE=cuda where there is none: said before a text is read
            device = embedder.local_device()
            run.notes.update(device_setting=device.why)
        chunks = run.read("chunksets")
        last = [0]

        def progress(done: int, total: int) -> None:
            report("texts embedded", done, total)
            if done - last[0] >= 256 or done == total:
                last[0] = done
                run.context.log.info(f"embedded {done}/{total} new texts with {model}")

        vectors, stats = embedder.embed(model, chunks["index_text"].to_list(), progress)
        run.notes.update(
            texts=stats.requested,
            unique_texts=stats.unique,
            embedding_calls=stats.embedded,  # texts sent to the model; the rest came from the cache
            cache_hits=stats.unique - stats.embedded,
            seconds=round(stats.seconds, 2),
            texts_per_second=round(stats.embedded / stats.seconds, 1) if stats.embedded else 0.0,
            # of the token slots computed now, the padding's (0.0: nothing embedded, or not our batches)
            padding_share=round(stats.padding_share or 0.0, 4),
            embedded_now_on=stats.device or "nothing embedded now (every text was in the cache)",
            embedded_on=dg.MetadataValue.json(stats.embedded_on),
        )
        frame = pl.DataFrame({"chunk_id": chunks["chunk_id"]}).with_columns(
            pl.Series("vector", fixed_size_vectors(vectors))
        )
        # where each distinct text's vector was computed: the config's MLflow run says it (evaluations)
        return Artifact(run.ref, frame, devices_part(stats.embedded_on))

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        model, embedder = run.config.embedding.model, run.resources.embedder
        limit = embedder.max_tokens(model)
        texts = run.read("chunksets")["index_text"].to_list()
        share = truncated_share(embedder.token_counts(model, texts), limit)
        if share:
            run.context.log.warning(
                f"{round(share * len(texts))} of {len(texts)} chunks ({share:.1%}) are longer than {model} reads "
                f"({limit} tokens): their ends are "
                "cut before embedding, so vector search cannot find what they say there; use smaller chunks"
            )
        return {
            "dagster/row_count": frame.height,
            "model": model,
            "dimensions": frame.schema["vector"].size,
            "max_tokens": limit if limit is not None else "unknown",
            "truncated_chunks": round(share * len(texts)),
            "truncated_share": share,
            "embedding_calls": 0,
            **run.notes,
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        chunks = run.read("chunksets")["chunk_id"]
        aligned = frame.height == chunks.len() and frame["chunk_id"].equals(chunks)
        return [
            dg.AssetCheckResult(
                check_name="aligned_with_chunks",
                passed=aligned,
                metadata={"vectors": frame.height, "chunks": chunks.len()},
            )
        ]

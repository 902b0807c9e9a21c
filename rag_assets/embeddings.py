"""Embeddings of a chunkset by one model (partitioned by chunking + embedding model).

Vectors come from the embedding cache, keyed by (model, text hash): only texts never embedded before
reach the model, across configs and runs. The artifact holds chunk_id and an Arrow fixed-size float32 list.
"""

import dagster as dg
import numpy as np
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.spec import RagConfig, Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import EmbeddingService, fixed_size_vectors, vectors_from_column


def chunk_vectors(artifacts: ArtifactStore, lineage: Lineage, c: RagConfig) -> dict[str, np.ndarray]:
    """chunk_id -> vector of a config's embeddings partition (for MMR and context diversity)."""
    emb = artifacts.read("embeddings", lineage.embedding_fp(c), f"embeddings {c.embedding_key}")
    return dict(zip(emb["chunk_id"].to_list(), vectors_from_column(emb["vector"]), strict=True))


def build(sweep: Sweep, parts: SweepPartitions) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.embeddings,
        deps=[dg.AssetDep("chunksets", partition_mapping=parts.chunk_to_embedding)],
        group_name="indexing",
        kinds={"parquet"},
        automation_condition=EAGER,
        description="One L2-normalized float32 vector per chunk (index_text), from the embedding cache.",
    )
    def embeddings(
        context: dg.AssetExecutionContext, artifacts: ArtifactStore, embedder: EmbeddingService
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep)
        c = sweep.first("embedding_key", context.partition_key)
        fp = lineage.embedding_fp(c)
        reused = artifacts.exists("embeddings", fp) and not forced(context)
        meta: dict = {}
        if not reused:
            chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
            last = [0]

            def progress(done: int, total: int) -> None:
                if done - last[0] >= 256 or done == total:
                    last[0] = done
                    context.log.info(f"embedded {done}/{total} new texts with {c.embedding.model}")

            vectors, stats = embedder.embed(c.embedding.model, chunks["index_text"].to_list(), progress)
            df = pl.DataFrame({"chunk_id": chunks["chunk_id"]}).with_columns(
                pl.Series("vector", fixed_size_vectors(vectors))
            )
            artifacts.write("embeddings", fp, df)
            meta = {
                "texts": stats.requested,
                "unique_texts": stats.unique,
                "embedding_calls": stats.embedded,  # texts sent to the model; the rest came from the cache
                "cache_hits": stats.unique - stats.embedded,
                "seconds": round(stats.seconds, 2),
                "texts_per_second": round(stats.embedded / stats.seconds, 1) if stats.embedded else 0.0,
                "dimensions": int(vectors.shape[1]),
            }
            context.log.info(f"{context.partition_key}: {stats}")
        else:
            meta = {"embedding_calls": 0}
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("embeddings", fp), reused),
                "model": c.embedding.model,
                **meta,
            },
            data_version=dg.DataVersion(fp),
        )

    return embeddings

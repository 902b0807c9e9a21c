"""Vector index of one chunkset + embedding model: a collection in the configured vector store."""

import dagster as dg
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import vectors_from_column
from resources.vector_stores import VectorStore


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.indexes,
        deps=["embeddings", dg.AssetDep("chunksets", partition_mapping=parts.chunk_to_index)],
        group_name="indexing",
        kinds={"lancedb", "weaviate"},
        automation_condition=EAGER,
        description="One collection per partition holding chunk text, doc id and the precomputed vectors.",
    )
    def vector_index(
        context: dg.AssetExecutionContext,
        artifacts: ArtifactStore,
        vector_store: dg.ResourceParam[VectorStore],
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("index_key", context.partition_key)
        fp = lineage.store_fp(c)
        collection = lineage.collection(c)
        chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
        info = vector_store.info(collection)
        reused = info["exists"] and info["count"] == chunks.height and not forced(context)
        if not reused:
            emb = artifacts.read("embeddings", lineage.index_fp(c), f"embeddings {context.partition_key}")
            if emb["chunk_id"].to_list() != chunks["chunk_id"].to_list():
                raise ValueError(f"embeddings {fp[:12]} do not line up with chunkset {c.chunk_key}")
            rows = chunks.select(
                "chunk_id", "doc_id", pl.col("index_text").alias("text"), "metadata"
            ).to_dicts()
            n = vector_store.upsert(collection, rows, vectors_from_column(emb["vector"]))
            info = vector_store.info(collection)
            if info["count"] != n:
                raise RuntimeError(f"{collection}: upserted {n} objects but the store holds {info['count']}")
        # A small marker artifact so cheap callers (the CLI) can tell the index exists for this content.
        artifacts.write("indexes", fp, pl.DataFrame({"collection": [collection], "count": [info["count"]]}))
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("indexes", fp), reused),
                "collection": collection,
                "backend": backend,
                "dagster/row_count": info["count"],
            },
            data_version=dg.DataVersion(fp),
        )

    return vector_index

"""Vector index of one chunkset + embedding model in one store: the config's `index.store`, else the
deployment's `vector_store` resource. Two stores over one embeddings partition reuse its vectors."""

import dagster as dg
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import vectors_from_column
from resources.vector_stores import VectorStore, VectorStoreCatalog, store_of


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.indexes,
        deps=[
            dg.AssetDep("embeddings", partition_mapping=parts.embedding_to_index),
            dg.AssetDep("chunksets", partition_mapping=parts.chunk_to_index),
        ],
        group_name="indexing",
        kinds={backend, *(c.index.store for c in sweep.configs if c.index.store)},
        automation_condition=EAGER,
        description="One collection per partition holding chunk text, doc id and the precomputed vectors.",
    )
    def vector_index(
        context: dg.AssetExecutionContext,
        artifacts: ArtifactStore,
        vector_store: dg.ResourceParam[VectorStore],
        vector_stores: VectorStoreCatalog,
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("index_key", context.partition_key)
        fp = lineage.store_fp(c)
        store = store_of(lineage.backend_of(c), vector_store, vector_stores)
        collection = lineage.collection(c)
        chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
        info = store.info(collection)
        reused = info["exists"] and info["count"] == chunks.height and not forced(context)
        if not reused:
            emb = artifacts.read("embeddings", lineage.embedding_fp(c), f"embeddings {c.embedding_key}")
            if emb["chunk_id"].to_list() != chunks["chunk_id"].to_list():
                raise ValueError(f"embeddings {fp[:12]} do not line up with chunkset {c.chunk_key}")
            rows = chunks.select(
                "chunk_id", "doc_id", pl.col("index_text").alias("text"), "metadata"
            ).to_dicts()
            n = store.upsert(collection, rows, vectors_from_column(emb["vector"]))
            info = store.info(collection)
            if info["count"] != n:
                raise RuntimeError(f"{collection}: upserted {n} objects but the store holds {info['count']}")
        # A small marker artifact so cheap callers (the CLI) can tell the index exists for this content.
        artifacts.write("indexes", fp, pl.DataFrame({"collection": [collection], "count": [info["count"]]}))
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("indexes", fp), reused),
                "collection": collection,
                "backend": store.backend,
                "dagster/row_count": info["count"],
            },
            data_version=dg.DataVersion(fp),
        )

    return vector_index

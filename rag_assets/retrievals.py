"""Retrievals: the top-k chunks of every question (partitioned by index + retrieval settings)."""

import time

import dagster as dg
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.metrics import percentile
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import EmbeddingService
from resources.vector_stores import VectorStore

RETRIEVAL_SCHEMA = {
    "query_id": pl.String,
    "chunk_ids": pl.List(pl.String),
    "doc_ids": pl.List(pl.String),
    "scores": pl.List(pl.Float64),
    "titles": pl.List(pl.String),
    "texts": pl.List(pl.String),
    "latency_ms": pl.Float64,
}


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.retrievals,
        deps=[dg.AssetDep("vector_index", partition_mapping=parts.index_to_retrieval), "qa_set"],
        group_name="evaluation",
        kinds={"parquet"},
        automation_condition=EAGER,
        description="Per query: ranked chunk ids, their doc ids, scores and texts, and the search latency "
        "(ms of the store query; query embeddings come from the cache and are excluded).",
    )
    def retrievals(
        context: dg.AssetExecutionContext,
        artifacts: ArtifactStore,
        embedder: EmbeddingService,
        vector_store: dg.ResourceParam[VectorStore],
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("retrieval_key", context.partition_key)
        r = c.retrieval
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
            vectors = None
            if r.mode != "bm25":
                vectors, stats = embedder.embed(c.embedding.model, questions)
                context.log.info(f"query embeddings: {stats}")
            collection = lineage.collection(c)
            rows = []
            for i, (qid, question) in enumerate(zip(qa["query_id"], questions, strict=True)):
                t0 = time.perf_counter()
                hits = vector_store.retrieve(
                    collection,
                    r.mode,
                    question,
                    None if vectors is None else vectors[i],
                    r.top_k,
                    r.hybrid_alpha,
                    r.fusion,
                )
                ms = (time.perf_counter() - t0) * 1000
                rows.append(
                    {
                        "query_id": qid,
                        "chunk_ids": [h.chunk_id for h in hits],
                        "doc_ids": [h.doc_id for h in hits],
                        "scores": [h.score for h in hits],
                        "titles": [by_id[h.chunk_id]["title"] for h in hits],
                        "texts": [by_id[h.chunk_id]["text"] for h in hits],
                        "latency_ms": ms,
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
                **{f"config/{k}": v for k, v in r.model_dump().items()},
            },
            data_version=dg.DataVersion(fp),
        )

    return retrievals

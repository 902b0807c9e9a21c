"""Chunksets: the corpus split by one chunking setting (partitioned by chunking params)."""

import dagster as dg

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.chunking import chunk_corpus, semantic_breakpoints, sentence_spans
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import EmbeddingService


def build(sweep: Sweep, parts: SweepPartitions) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.chunks,
        deps=["corpus"],
        group_name="indexing",
        kinds={"parquet"},
        automation_condition=EAGER,
        description="Chunks of every document (chunk_id, doc_id, text, character span, index_text).",
    )
    def chunksets(
        context: dg.AssetExecutionContext, artifacts: ArtifactStore, embedder: EmbeddingService
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep)
        cfg = sweep.first("chunk_key", context.partition_key).chunking
        fp = lineage.chunk_fp(sweep.first("chunk_key", context.partition_key))
        reused = artifacts.exists("chunksets", fp) and not forced(context)
        if reused:
            df = artifacts.read("chunksets", fp, "chunkset")
        else:
            docs = artifacts.read("corpus", lineage.corpus_fp, "corpus")
            tokenize, breakpoints = None, None
            if cfg.unit == "tokens":

                def tokenize(texts: list[str]):
                    return embedder.token_offsets(cfg.model, texts)

            if cfg.method == "semantic":
                # embed every sentence once (cached), then cut where adjacent sentences drift apart
                texts = docs["text"].to_list()
                spans = [sentence_spans(t) for t in texts]
                sentences = [[t[s.start : s.end] for s in sp] for t, sp in zip(texts, spans, strict=True)]
                unique = list(dict.fromkeys(s for doc in sentences for s in doc))
                vec = dict(zip(unique, embedder.embed(cfg.model, unique)[0], strict=True)) if unique else {}
                breakpoints = semantic_breakpoints(
                    spans, [[vec[s] for s in doc] for doc in sentences], cfg.semantic_percentile
                )
            df = chunk_corpus(
                docs,
                cfg.method,
                cfg.chunk_size,
                cfg.chunk_overlap,
                tokenize=tokenize,
                breakpoints=breakpoints,
            )
            artifacts.write("chunksets", fp, df)
        lengths = df["text"].str.len_chars()
        context.log.info(f"{context.partition_key}: {df.height} chunks (reused={reused})")
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("chunksets", fp), reused),
                "dagster/row_count": df.height,
                "chunks_per_doc": float(df.height / max(df["doc_id"].n_unique(), 1)),
                "chars_mean": float(lengths.mean()),
                "chars_min": int(lengths.min()),
                "chars_max": int(lengths.max()),
                "unique_texts": df["index_text"].n_unique(),
                **{f"config/{k}": v for k, v in cfg.model_dump().items()},
            },
            data_version=dg.DataVersion(fp),
        )

    return chunksets

"""A small model's bundle for tests that load a real model quickly: a hybrid-retrieval, extractive config over
a handful of documents chunked and embedded here (no sweep run); the index, retrieval and reader are real."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rag_core.chunking.chunkers import chunk_corpus
from rag_core.common.local_models import model_version
from rag_sweep.runner import load_data, load_plan
from resources.shipping.bundle import Bundle, manifest_of
from tests.conftest import EXAMPLE, write_sweep

DOCS = 4  # besides the gold documents of two questions


def small_bundle(tmp: Path, **sections) -> Bundle:
    """A hybrid-retrieval, extractive config over DOCS documents (files written under `tmp`); `sections`:
    sweep sections instead of the default ones (`generation={...}`)."""
    from resources.embedders import EmbeddingService

    qa = pl.read_parquet(EXAMPLE / "queries.parquet").head(2)
    corpus = pl.read_parquet(EXAMPLE / "corpus.parquet")
    gold = corpus["doc_id"].is_in(qa["relevant_doc_ids"].explode().to_list())
    corpus = pl.concat([corpus.filter(gold), corpus.filter(~gold).head(DOCS)])
    corpus.write_parquet(tmp / "corpus.parquet")
    qa.write_parquet(tmp / "queries.parquet")
    spec = write_sweep(
        tmp / "serve.yaml",
        {"corpus": tmp / "corpus.parquet", "qa": tmp / "queries.parquet"},
        name="serve",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        **{
            "retrieval": {"mode": "hybrid", "top_k": 2, "hybrid_alpha": 0.5, "fusion": "weighted"},
            **sections,
        },
    )
    plan = load_plan(spec, "lancedb", tmp)
    key = plan.config_keys[0]
    config = plan.config(key)
    c = config.chunking
    chunks = chunk_corpus(load_data(plan.sweep)[0], c.method, c.chunk_size, c.chunk_overlap)
    vectors, _ = EmbeddingService(cache_dir=str(tmp / "cache")).embed(
        config.embedding.model, chunks["index_text"].to_list()
    )
    identity = {
        "sweep": "serve",
        "config_key": key,
        "label": key,
        "evaluation_fingerprint": "e" * 64,
        "vector_index_fingerprint": "v" * 64,
        "store": "lancedb",
        "collection": "serve_test",
        "count": chunks.height,
        "embedder_version": model_version(config.embedding.model),
    }
    bundle = Bundle(
        key,
        key,
        {
            "chunks.parquet": chunks,
            "embeddings.parquet": pl.DataFrame({"chunk_id": chunks["chunk_id"], "vector": vectors.tolist()}),
        },
        manifest_of(identity, config),
        {**identity, "figures": {}},
    )
    return bundle

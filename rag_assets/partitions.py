"""Partitions, declared once per sweep: each stage is keyed by exactly the settings that determine it.

    chunksets                 <chunking>                       recursive-512-64
    embeddings                <chunking>__<embedder>           recursive-512-64__all-minilm-l6-v2
    vector_index              <embeddings>[__<store>]          ...__all-minilm-l6-v2__qdrant (no suffix when
                                                               the sweep leaves the store to the deployment)
    retrievals                <index>__<retrieval>             ...__hybrid-rrf-a0.5-k20
    rerankings                <retrieval>__<reranker>          ...__mmr-l0.5-c20-k5
    answers, evaluations      <reranking>__<generation>        ...__extractive

Dagster cannot map between differently keyed *dynamic* partitions (no custom PartitionMapping), so each
stage has a *static* partitions definition built from the sweep when the code location loads, and the
many-to-one links are StaticPartitionMappings: the UI shows every partition's real upstream partition.
Changing the sweep file changes the partitions on the next code-location reload.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import dagster as dg

from rag_core.spec import Sweep


def _mapping(sweep: Sweep, upstream: str, downstream: str) -> dg.StaticPartitionMapping:
    targets: dict[str, set[str]] = defaultdict(set)
    for c in sweep.configs:
        targets[getattr(c, upstream)].add(getattr(c, downstream))
    return dg.StaticPartitionMapping({k: v for k, v in targets.items()})


@dataclass(frozen=True)
class SweepPartitions:
    chunks: dg.StaticPartitionsDefinition
    embeddings: dg.StaticPartitionsDefinition
    indexes: dg.StaticPartitionsDefinition
    retrievals: dg.StaticPartitionsDefinition
    reranks: dg.StaticPartitionsDefinition
    configs: dg.StaticPartitionsDefinition
    chunk_to_embedding: dg.StaticPartitionMapping
    chunk_to_index: dg.StaticPartitionMapping
    embedding_to_index: dg.StaticPartitionMapping
    index_to_retrieval: dg.StaticPartitionMapping
    retrieval_to_rerank: dg.StaticPartitionMapping
    rerank_to_config: dg.StaticPartitionMapping

    @classmethod
    def of(cls, sweep: Sweep) -> SweepPartitions:
        return cls(
            chunks=dg.StaticPartitionsDefinition(sweep.chunk_keys),
            embeddings=dg.StaticPartitionsDefinition(sweep.embedding_keys),
            indexes=dg.StaticPartitionsDefinition(sweep.index_keys),
            retrievals=dg.StaticPartitionsDefinition(sweep.retrieval_keys),
            reranks=dg.StaticPartitionsDefinition(sweep.rerank_keys),
            configs=dg.StaticPartitionsDefinition(sweep.config_keys),
            chunk_to_embedding=_mapping(sweep, "chunk_key", "embedding_key"),
            chunk_to_index=_mapping(sweep, "chunk_key", "index_key"),
            embedding_to_index=_mapping(sweep, "embedding_key", "index_key"),
            index_to_retrieval=_mapping(sweep, "index_key", "retrieval_key"),
            retrieval_to_rerank=_mapping(sweep, "retrieval_key", "rerank_key"),
            rerank_to_config=_mapping(sweep, "rerank_key", "config_key"),
        )

"""Content fingerprints of every stage's artifact, chained from the inputs' content hashes.

A stage's fingerprint covers its own settings and its upstream fingerprint, so a changed corpus, QA
set or setting yields a new artifact path and stale artifacts are never read. Bump a *_VERSION when
the code of that stage changes its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from rag_core.fingerprint import file_hash, fingerprint
from rag_core.judge import JUDGE_PROMPT_VERSION
from rag_core.spec import RagConfig, Sweep

CHUNKER_VERSION = 2
RETRIEVER_VERSION = 3
RERANKER_VERSION = 2
GENERATOR_VERSION = 3
METRICS_VERSION = 5


@dataclass(frozen=True)
class Lineage:
    sweep: Sweep
    backend: str = "lancedb"  # the deployment's vector store, for configs that do not name one

    @cached_property
    def corpus_fp(self) -> str:
        return fingerprint("corpus", file_hash(self.sweep.corpus_path))

    @cached_property
    def qa_fp(self) -> str:
        return fingerprint("qa", file_hash(self.sweep.qa_path), self.sweep.max_queries, self.corpus_fp)

    def chunk_fp(self, c: RagConfig) -> str:
        return fingerprint("chunkset", self.corpus_fp, c.settings("chunk"), CHUNKER_VERSION)

    def embedding_fp(self, c: RagConfig) -> str:
        return fingerprint("index", self.chunk_fp(c), c.embedding.model_dump())

    def backend_of(self, c: RagConfig) -> str:
        """The vector store of a config: its `index.store`, else the deployment's."""
        return c.index.store or self.backend

    def store_fp(self, c: RagConfig) -> str:
        """The index as built in one vector-store backend (retrieval results depend on the store)."""
        return fingerprint("store", self.embedding_fp(c), self.backend_of(c))

    def retrieval_fp(self, c: RagConfig) -> str:
        return fingerprint(
            "retrieval", self.store_fp(c), c.settings("retrieval")["retrieval"], self.qa_fp, RETRIEVER_VERSION
        )

    def rerank_fp(self, c: RagConfig) -> str:
        return fingerprint("rerank", self.retrieval_fp(c), c.settings("rerank")["rerank"], RERANKER_VERSION)

    def answers_fp(self, c: RagConfig) -> str:
        return fingerprint("answers", self.rerank_fp(c), c.generation.model_dump(), GENERATOR_VERSION)

    def evaluation_fp(self, c: RagConfig) -> str:
        judge = (self.sweep.judge_model, JUDGE_PROMPT_VERSION) if self.sweep.judge_model else None
        return fingerprint("evaluation", self.answers_fp(c), METRICS_VERSION, judge)

    def collection(self, c: RagConfig) -> str:
        """Vector-store collection of an index partition: a valid Weaviate class name (letter first,
        [A-Za-z0-9_]) that stays readable and changes with the content."""
        readable = "".join(ch if ch.isalnum() else "_" for ch in c.index_key)[:60]
        return f"Rag_{readable}_{self.store_fp(c)[:10]}"

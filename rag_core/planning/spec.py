"""Sweep spec: one YAML file per sweep, validated on load, expanded into configs.

Every leaf of the stage sections may be a single value or a list; the spec expands into the cartesian
product of its stage settings (settings that a stage ignores, such as `hybrid_alpha` for `vector`
retrieval, do not multiply configs). Errors name the file and the dotted field.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from rag_core.common.fingerprint import fingerprint, short_hash, slug
from rag_core.data.qa.generation import QAGeneration
from rag_core.planning.ann import AnnIndex
from rag_core.planning.prompts import (
    ANSWER_PROMPT,
    COMPRESS_PROMPT,
    QUERY_PROMPTS,
    REFINE_PROMPT,
    RERANK_PROMPT,
    SUFFICIENCY_PROMPT,
    missing,
)

DEFAULT_PROMPT = ANSWER_PROMPT
DEFAULT_COMPRESS_PROMPT = COMPRESS_PROMPT

# Default weights: 0.3 on retrieval, 0.7 on generation (the `weights` setting: docs/reference/settings.md).
DEFAULT_WEIGHTS = {
    "recall_at_k": 0.15,
    "ndcg_at_k": 0.15,
    "exact_match": 0.2,
    "token_f1": 0.35,
    "faithfulness": 0.15,
}


# The text components of a pipeline that prompt optimization (`optimize:`, rag_core/optimization) can evolve,
# each with the config field that holds it (rag_core/planning/prompts.py has their built-in texts), and
# the first stage whose output it changes: nothing before that stage is recomputed for an optimized config.
PROMPT_COMPONENTS = {
    "rewrite_prompt": "retrieval.query_prompt",
    "rerank_prompt": "rerank.prompt",
    "answer_prompt": "generation.prompt_template",
    "compress_prompt": "generation.context_prompt",
    "sufficiency_prompt": "retrieval.sufficiency_prompt",
    "refine_prompt": "retrieval.refine_prompt",
}
COMPONENT_USE = {  # which configs read each component (component_used)
    "rewrite_prompt": "read only with retrieval.query_transform rewrite, multi_query or hyde",
    "rerank_prompt": "read only with rerank.method llm",
    "answer_prompt": "an extractive reader has no answer prompt",
    "compress_prompt": "read only with generation.context compress",
    "sufficiency_prompt": "read only with retrieval.max_hops > 1 and hop_policy llm",
    "refine_prompt": "read only with retrieval.max_hops > 1 and hop_policy llm",
}
COMPONENT_STAGES = {
    "rewrite_prompt": "retrievals",
    "rerank_prompt": "rerankings",
    "answer_prompt": "answers",
    "compress_prompt": "answers",
    "sufficiency_prompt": "retrievals",
    "refine_prompt": "retrievals",
}
OPTIMIZABLE_STAGES = tuple(dict.fromkeys(COMPONENT_STAGES.values()))  # in pipeline order


class SpecError(ValueError):
    """A sweep spec that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    # strict: `top_k: true` or `chunk_size: "512"` is an error naming the field, never coerced
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)


# ---- one concrete setting per stage -------------------------------------------------------------


class ChunkingConfig(_Strict):
    """Chunk sizes and overlaps are in characters of the document text, or in tokens of the embedder's
    tokenizer with `unit: tokens`. `model` (the tokenizer / the semantic chunker's embedder) is filled from
    the config's embedding model when needed, so such a chunkset is keyed by it too."""

    method: str
    """How documents are cut: `fixed`, `sentence`, `paragraph`, `recursive`, `markdown` (never crosses a
    Markdown/HTML heading, keeps a heading with its content, never splits code blocks or tables; the
    heading path goes into chunk metadata and index text), `semantic` (cuts where adjacent sentences'
    embeddings drift apart), or an installed plug-in's (`rag-sweep components`)."""
    chunk_size: int = Field(gt=0)
    """Maximum chunk length, in `unit`s."""
    chunk_overlap: int = Field(ge=0)
    """Units carried over from one chunk to the next, below `chunk_size` (`fixed`: exact; the others: the
    whole trailing units that fit)."""
    unit: Literal["chars", "tokens"] = "chars"
    """What sizes count: `chars`, or `tokens` of the embedder's own tokenizer (the chunkset key then names
    the embedder)."""
    semantic_percentile: float = Field(default=90.0, gt=0.0, lt=100.0)
    """`semantic` only: a break where the adjacent-sentence cosine distance exceeds this percentile of all
    such distances in the corpus."""
    model: str | None = None
    """The tokenizer (`unit: tokens`) or the semantic chunker's embedder; filled from the config's embedding
    model when needed."""

    @field_validator("method")
    @classmethod
    def _method_installed(cls, v: str) -> str:
        from rag_core.chunking.base import CHUNKERS

        CHUNKERS.get(v)  # UnknownComponent names the installed methods; PluginError the broken plug-in
        return v

    @property
    def semantic(self) -> bool:
        """The method cuts by sentence embeddings (it runs the embedder while chunking)."""
        from rag_core.chunking.base import CHUNKERS

        return CHUNKERS.get(self.method).semantic

    @property
    def needs_model(self) -> bool:
        return self.unit == "tokens" or self.semantic

    def effective(self) -> ChunkingConfig:
        fields = self.model_dump()
        if not self.semantic:
            fields["semantic_percentile"] = 90.0
        if not self.needs_model:
            fields["model"] = None
        return ChunkingConfig(**fields)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        return self

    @property
    def key(self) -> str:
        t = "t" if self.unit == "tokens" else ""
        key = f"{self.method}-{self.chunk_size}{t}-{self.chunk_overlap}{t}"
        if self.semantic:
            key += f"-p{self.semantic_percentile:g}"
        if self.needs_model and self.model:
            key += f"-{slug(self.model.split('/')[-1])}"
        return key


class EmbeddingConfig(_Strict):
    model: str = Field(min_length=1)
    """`all-MiniLM-L6-v2` (packaged, offline), an installed plug-in model's name, a local
    sentence-transformers folder, or any litellm embedding model (`openai/text-embedding-3-small`,
    `ollama/nomic-embed-text`)."""

    @property
    def key(self) -> str:
        return slug(self.model.split("/")[-1])


# The keyword (BM25) index's analyzer, the same on every store that offers it (a store says which it offers,
# rag_core/components/stores.py):
# - plain: lowercase, split into runs of letters and digits; no stemming, no stop words, no accent folding
# - english: plain + English stop words removed + Snowball English stemming (+ ASCII folding on LanceDB)
# - chinese, japanese, thai: the project segments the text into words (Chinese per character; Japanese with
#   SudachiPy, Thai with PyThaiNLP, as answer scoring does) before the store sees it, and the query likewise
#   (rag_core/retrieval/keywords.py). A config that searches keywords follows `data.language` (zh, ja, th)
#   unless it names its analyzer (`follow_language`); every other language keeps plain, English too.
BM25_ANALYZERS = ("plain", "english", "chinese", "japanese", "thai")


class IndexConfig(_Strict):
    """Where the index lives and how its keyword index analyzes text. `store` unset means the
    deployment's store ($RAG_VECTOR_STORE, LanceDB by default); naming stores makes them a sweep dimension
    over one set of embeddings."""

    store: str | None = None
    """The index's vector store: `lancedb`, `qdrant`, `chroma`, `milvus`, `weaviate` or an installed
    plug-in's (`rag-sweep components`). Unset: the deployment's store (`$RAG_VECTOR_STORE`, else LanceDB).
    Named: a sweep dimension; every store indexes the same embeddings partition (the corpus is embedded
    once) and the index partition key ends in `__<store>`."""
    bm25_analyzer: Literal[BM25_ANALYZERS] = "plain"
    """How the keyword (BM25) index analyzes text, the same on every store. `plain`: lowercased runs of
    letters and digits, no stemming, stop words or accent folding. `english`: plain + English stop words +
    Snowball stemming + ASCII folding (LanceDB only; another store with `english` is an error on load).
    `chinese`, `japanese`, `thai`: the project segments text and queries into words before the store sees
    them (Chinese per ideograph, Japanese with SudachiPy mode A, Thai with PyThaiNLP newmm). A keyword
    config follows `data.language` (zh, ja, th) unless it names its analyzer; an analyzer for another
    language than `data.language` is an error. The segmenter's version joins the index fingerprint. See the
    vector stores guide."""
    ann: AnnIndex = AnnIndex()
    """The vector search's structure (rag_core/planning/ann.py): `exact` (default: every chunk compared; on
    Chroma and Weaviate, whose only index is HNSW, their HNSW at its defaults), `ivf_pq` (LanceDB:
    `num_partitions`, `num_sub_vectors`; at search `nprobes` (20), `refine_factor`), `ivf_sq` (LanceDB,
    scalar-quantized: `num_partitions`; at search `nprobes` (20), `refine_factor` (10)), `ivf_rq` (LanceDB,
    RaBitQ-quantized: `num_partitions`, `num_bits` (4); at search `nprobes` (20), `refine_factor` (10)),
    `ivf_hnsw_sq` (LanceDB: `num_partitions`, `m` (16), `ef_construction` (128); at search `ef` (64),
    `nprobes` (20)), `hnsw` (Weaviate, Chroma, Milvus Lite: `m` (16), `ef_construction` (128), `ef` (64)), or
    a mapping `{type: ..., <settings>}`. Qdrant's local mode searches exactly only. A store without the type is refused when the
    sweep is planned. In the index's key (`__lancedb-ivf_pq-np20`) and fingerprint; `exact` keeps its keys
    and fingerprints. Each approximate config's `ann_recall_at_k` (against the store's exact search),
    `index_build_s` and `index_build_peak_mb` are on the board and in MLflow."""

    @field_validator("store")
    @classmethod
    def _known_store(cls, v: str | None) -> str | None:
        from rag_core.components.stores import STORES

        if v is not None:
            STORES.get(v)  # UnknownComponent names the installed stores; PluginError the broken plug-in
        return v

    @field_validator("ann", mode="before")
    @classmethod
    def _ann_by_name(cls, v: Any) -> Any:
        return AnnIndex(type=v) if isinstance(v, str) else AnnIndex(**v) if isinstance(v, dict) else v

    @model_serializer(mode="wrap")
    def _exact_as_before(self, handler) -> dict[str, Any]:
        # an exact index dumps as it did before `ann` existed: its fingerprints, keys and params unchanged
        out = handler(self)
        if not self.ann.approximate:
            out.pop("ann", None)
        return out

    def effective(self) -> IndexConfig:
        return self.model_copy(update={"ann": self.ann.effective()})

    @property
    def key(self) -> str:
        key = self.store if self.bm25_analyzer == "plain" else f"{self.store}-{self.bm25_analyzer}"
        return f"{key}-{self.ann.key}" if self.ann.approximate else key


class RetrievalConfig(_Strict):
    mode: str
    """`vector`, `bm25` (the store's full-text index, analyzed by `index.bm25_analyzer`), `hybrid`, or an
    installed plug-in's."""
    top_k: int = Field(gt=0, le=100)
    """Chunks retrieved (or documents, see `k_unit`); the k of every retrieval metric."""
    hybrid_alpha: float = Field(default=0.5, ge=0.0, le=1.0)
    """`hybrid`: 1 = pure vector, 0 = pure keyword (Weaviate's convention)."""
    fusion: Literal["rrf", "weighted"] = "rrf"
    """`hybrid`: reciprocal rank fusion (`rrf`, k0 = 60) or alpha-weighted min-max scores (`weighted`)."""
    # Query transformation through an LLM (see rag_assets/retrievals.py); falls back to the question.
    query_transform: Literal["none", "rewrite", "multi_query", "hyde"] = "none"
    """LLM query transformation before search: `rewrite` (one rewritten query), `multi_query` (`n_queries`
    variants searched and fused by RRF with the question) or `hyde` (a hypothetical answer whose embedding
    replaces the question's). An empty or failed reply falls back to the question (counted:
    `n_query_transform_fallbacks`)."""
    query_model: str | None = None
    """The litellm model of the query transformation; required with one."""
    n_queries: int = Field(default=3, ge=1, le=10)
    """`multi_query`: the number of variants."""
    # the transformation's prompt, with {query} (and, for multi_query, {n}); unset: its built-in prompt
    query_prompt: str | None = None
    """The query transformation's prompt, with `{query}` (and optionally `{n}`, multi_query's number of
    queries); unset: the transformation's built-in prompt. In the retrievals key as `-qp<hash>` when set."""
    # A metadata filter applied to every search, in the seeds' format (rag_core/data/filters.py).
    filter: dict[str, Any] | None = None
    """A metadata filter applied to every search: `{doc_id: d1}` (equality), `{year: {$gt: 2000}}`
    (`$gt/$gte/$lt/$lte` on numbers), `{year: {$gte: 2000, $lt: 2010}}`, `{lang: {$in: [en, de]}}`, `{$and:
    [...]}`; several fields are ANDed. Fields: `doc_id` and the corpus metadata's scalar keys; an unknown
    field or bad operator is an error naming it. A list of filters is a sweep dimension."""
    # What k counts: chunks (default), or documents (retrieve until k distinct documents, so chunkings are
    # compared at equal document depth).
    k_unit: Literal["chunks", "documents"] = "chunks"
    """What k counts: `chunks`, or `documents` (retrieve and rerank until k distinct documents are covered,
    so small and large chunkings are compared at equal document depth; the key ends in `-docs`)."""
    # Iterative retrieval (rag_core/retrieval/hops.py): up to max_hops searches per question, each adding up
    # to top_k chunks of documents not found before. hop_policy decides whether to go on and what to search
    # next: `names` (offline: the question with the new names the last hop's documents bring; stop when there
    # is none) or `llm` (hop_model judges sufficiency and writes the next query). max_hops 1 is single-shot
    # retrieval, with the keys and fingerprints it always had.
    max_hops: int = Field(default=1, ge=1, le=5)
    """Iterative retrieval: up to this many searches per question, each adding up to top_k chunks of
    documents not found before (the agentic retrieval guide); 1 is single-shot retrieval, with its keys and
    fingerprints; the key ends in `-hops<N>`."""
    hop_policy: Literal["names", "llm"] = "names"
    """What decides to search again and what: the offline `names` rule, or `llm` (`hop_model`)."""
    hop_model: str | None = None
    """`hop_policy: llm`: the litellm model that judges whether the passages suffice and writes the next
    query."""
    sufficiency_prompt: str | None = None
    """The hop model's sufficiency prompt, with `{query}` and `{passages}`; unset: the built-in one. A GEPA
    component."""
    refine_prompt: str | None = None
    """The hop model's next-query prompt, with `{query}` and `{passages}`; unset: the built-in one. A GEPA
    component."""

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, v: str) -> str:
        from rag_core.components.retrieval_modes import RETRIEVAL_MODES

        RETRIEVAL_MODES.get(v)  # UnknownComponent names the installed modes; PluginError the broken plug-in
        return v

    @property
    def reads_vector(self) -> bool:
        """Whether the mode searches by the question's vector (its question is embedded)."""
        from rag_core.components.retrieval_modes import retrieval_mode

        return retrieval_mode(self.mode).reads_vector

    @property
    def reads_keywords(self) -> bool:
        from rag_core.components.retrieval_modes import retrieval_mode

        return retrieval_mode(self.mode).reads_keywords

    @field_validator("filter")
    @classmethod
    def _filter_valid(cls, v: dict | None) -> dict | None:
        from rag_core.data.filters import parse_filter

        parse_filter(v)  # raises FilterError (a ValueError) naming the field and operator
        return v or None

    @field_validator("query_prompt")
    @classmethod
    def _query_placeholders(cls, v: str | None) -> str | None:
        if v is not None and (lacks := missing("query_prompt", v)):
            raise ValueError(f"query_prompt must contain {lacks[0]}")
        return v

    @field_validator("sufficiency_prompt", "refine_prompt")
    @classmethod
    def _hop_placeholders(cls, v: str | None, info) -> str | None:
        if v is not None and (lacks := missing(info.field_name, v)):
            raise ValueError(f"{info.field_name} must contain {lacks[0]}")
        return v

    @model_validator(mode="after")
    def _model_for_transform(self) -> RetrievalConfig:
        if self.query_transform != "none" and not self.query_model:
            raise ValueError(f"query_transform {self.query_transform!r} needs query_model (a litellm model)")
        if self.max_hops > 1 and self.hop_policy == "llm" and not self.hop_model:
            raise ValueError("hop_policy 'llm' needs hop_model (a litellm model)")
        return self

    @property
    def iterates(self) -> bool:
        return self.max_hops > 1

    @property
    def query_template(self) -> str:
        """The query transformation's prompt: the config's, else the built-in one of its transformation."""
        return self.query_prompt or QUERY_PROMPTS[self.query_transform]

    @property
    def key(self) -> str:
        """Mode and query settings; the fetch depth is added by RagConfig (it depends on the reranker)."""
        base = f"hybrid-{self.fusion}-a{self.hybrid_alpha:g}" if self.mode == "hybrid" else self.mode
        if self.query_transform == "rewrite":
            base += f"-rw-{slug(self.query_model)}"
        elif self.query_transform == "multi_query":
            base += f"-mq{self.n_queries}-{slug(self.query_model)}"
        elif self.query_transform == "hyde":
            base += f"-hyde-{slug(self.query_model)}"
        if self.query_prompt is not None:
            base += f"-qp{short_hash(self.query_prompt, 6)}"
        if self.filter:
            base += f"-f{short_hash(fingerprint(self.filter), 6)}"
        if self.k_unit == "documents":
            base += "-docs"
        if self.iterates:  # single-shot retrieval keeps the key it always had
            base += f"-hops{self.max_hops}"
            if self.hop_policy == "llm":
                base += f"-llm-{slug(self.hop_model)}"
            for name in ("sufficiency_prompt", "refine_prompt"):
                if (text := getattr(self, name)) is not None:
                    base += f"-{name[0]}p{short_hash(text, 6)}"
        return base

    def effective(self) -> RetrievalConfig:
        """Settings that do not affect this mode are reset, so they neither split partitions nor configs."""
        fields = self.model_dump()
        if self.mode != "hybrid":
            fields.update(hybrid_alpha=0.5, fusion="rrf")
        if self.query_transform == "none":
            fields.update(query_model=None)
        if self.query_transform == "none" or fields["query_prompt"] == QUERY_PROMPTS[self.query_transform]:
            fields.update(query_prompt=None)  # unused, or the built-in one: one key for one prompt
        if self.query_transform != "multi_query":
            fields.update(n_queries=3)
        if not self.iterates or self.hop_policy != "llm":
            fields.update(hop_model=None, sufficiency_prompt=None, refine_prompt=None)
        if not self.iterates:
            fields.update(hop_policy="names")
        for name, built_in in (("sufficiency_prompt", SUFFICIENCY_PROMPT), ("refine_prompt", REFINE_PROMPT)):
            if fields[name] == built_in:
                fields[name] = None
        return RetrievalConfig(**fields)


class RerankConfig(_Strict):
    """Rerank `candidates` retrieved chunks down to the retrieval's top_k."""

    method: str = "none"
    """Rerank `candidates` retrieved chunks down to `top_k`: `none`, `mmr` (Maximal Marginal Relevance on
    the embeddings), `llm` (an LLM ordering, parsed robustly; unlisted candidates kept after the listed
    ones; unparsable: retrieval order, counted in `n_rerank_fallbacks`), `cross_encoder` (a
    sentence-transformers CrossEncoder you supply; the torch extra), or an installed plug-in's (`model` is
    passed to it)."""
    candidates: int = Field(default=20, gt=0, le=200)
    """Chunks the retrieval fetches for the reranker (at least `top_k`)."""
    mmr_lambda: float = Field(default=0.5, ge=0.0, le=1.0)
    """`mmr`: 1 = relevance only."""
    model: str | None = None
    """`llm`: a litellm model; `cross_encoder`: a CrossEncoder folder."""
    # the LLM reranker's prompt, with {query} and {passages}; unset: the built-in one
    prompt: str | None = None
    """The LLM reranker's prompt, with `{query}` and `{passages}` (the numbered candidates); unset: the
    built-in one. In the rerankings key as `-rp<hash>` when set."""

    @field_validator("prompt")
    @classmethod
    def _rerank_placeholders(cls, v: str | None) -> str | None:
        if v is not None and (lacks := missing("prompt", v)):
            raise ValueError(f"prompt must contain {lacks[0]}")
        return v

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        from rag_core.components.rerankers import RERANKERS

        RERANKERS.get(v)  # UnknownComponent names the installed rerankers; PluginError the broken plug-in
        taken = {r.key: n for n, r in RERANKERS.builtins().items() if r.key != n}  # cross_encoder's "ce"
        if v in taken:
            raise ValueError(f"plug-in reranker {v!r} has the key of the built-in {taken[v]!r}: rename it")
        return v

    @property
    def reranker(self):
        from rag_core.components.rerankers import reranker

        return reranker(self.method)

    @model_validator(mode="after")
    def _model_when_needed(self) -> RerankConfig:
        if self.reranker.model == "required" and not self.model:
            raise ValueError(f"rerank method {self.method!r} needs model")
        return self

    @property
    def template(self) -> str:
        """The LLM reranker's prompt: the config's, else the built-in one."""
        return self.prompt or RERANK_PROMPT

    def effective(self) -> RerankConfig:
        if self.method == "none":
            return RerankConfig()
        fields = self.model_dump()
        if self.method != "mmr":
            fields.update(mmr_lambda=0.5)
        if self.method != "llm" or fields["prompt"] == RERANK_PROMPT:
            fields.update(prompt=None)  # unused, or the built-in one: one key for one prompt
        if self.reranker.model == "none":
            fields.update(model=None)
        return RerankConfig(**fields)

    @property
    def key(self) -> str:
        if self.method == "none":
            return "none"
        if self.method == "mmr":
            return f"mmr-l{self.mmr_lambda:g}-c{self.candidates}"
        model = f"-{slug(self.model.rstrip('/').split('/')[-1])}" if self.model else ""
        key = f"{self.reranker.key}{model}-c{self.candidates}"
        return key + (f"-rp{short_hash(self.prompt, 6)}" if self.prompt is not None else "")


class GenerationConfig(_Strict):
    model: str = Field(min_length=1)
    """`extractive` (offline), an installed plug-in reader's name (`rag-sweep components`), or any litellm
    model (`gpt-4o-mini`, `ollama/llama3`, `openai/<model>` with `$RAG_LLM_API_BASE`)."""
    prompt_template: str = DEFAULT_PROMPT
    """The answer prompt, with `{query}` and `{context}`; context blocks are numbered `[n] title: text`."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """The generator's sampling temperature."""
    max_tokens: int = Field(default=128, gt=0)
    """The most tokens an answer may have."""
    # Context synthesis: `concat` numbered blocks, or `compress` each block with context_model to what
    # answers the question; context_max_tokens caps the context (tokens of the generation model, words
    # for the extractive reader).
    context: Literal["concat", "compress"] = "concat"
    """`concat`: numbered `[n]` blocks; `compress`: each block compressed by `context_model` to the
    sentences that answer (`NONE` drops it; a failed call keeps the block, counted in
    `n_context_compression_fallbacks`)."""
    context_model: str | None = None
    """The litellm model that compresses the context; required with `compress`."""
    # the compression prompt, with {query} and {passage}; unset: DEFAULT_COMPRESS_PROMPT
    context_prompt: str | None = None
    """The compression prompt, with `{query}` and `{passage}`; unset: the built-in one, which keeps the
    sentences that help and answers `NONE` when none does. In the answers key as `-cp<hash>` when set."""
    context_max_tokens: int | None = Field(default=None, gt=0)
    """The context's token budget (tokens of the generation model; words for `extractive`): blocks in rank
    order, the crossing one cut at a word boundary."""
    # Parent/child: retrieve small chunks, give the generator their parent section (markdown heading
    # section, else the whole document) instead; parents shared by several chunks appear once.
    context_expand: Literal["none", "parent"] = "none"
    """`parent`: retrieve small chunks, give the generator each chunk's parent (its markdown section, else
    its whole document), each parent once."""
    # how many times each question is answered: set from the sweep's `evaluation.samples` for a generator
    # that draws at random (temperature > 0); 1 otherwise
    samples: int = Field(default=1, ge=1, le=50)
    """Filled in by the sweep from `evaluation.samples` for a generator with temperature > 0; 1 otherwise."""

    @field_validator("prompt_template")
    @classmethod
    def _has_placeholders(cls, v: str) -> str:
        if lacks := missing("prompt_template", v):
            raise ValueError(f"prompt_template must contain {lacks[0]}")
        return v

    @field_validator("context_prompt")
    @classmethod
    def _compress_placeholders(cls, v: str | None) -> str | None:
        if v is not None and (lacks := missing("context_prompt", v)):
            raise ValueError(f"context_prompt must contain {lacks[0]}")
        return v

    @model_validator(mode="after")
    def _model_for_compression(self) -> GenerationConfig:
        if self.context == "compress" and not self.context_model:
            raise ValueError("context 'compress' needs context_model (a litellm model)")
        return self

    @property
    def is_reader(self) -> bool:
        """Whether `model` names a reader (rag_core/components/readers.py: the built-in `extractive` or an
        installed plug-in's), not a litellm model: no prompt, temperature, token limit or LLM call."""
        from rag_core.components.readers import is_reader

        return is_reader(self.model)

    def effective(self) -> GenerationConfig:
        fields = self.model_dump()
        if self.context == "concat" or fields["context_prompt"] == DEFAULT_COMPRESS_PROMPT:
            fields.update(context_prompt=None)  # unused, or the built-in one: one key for one prompt
        if self.context == "concat":
            fields.update(context_model=None)
        if self.is_reader:  # the extractive reader has no prompt, temperature or token limit
            fields.update(prompt_template=DEFAULT_PROMPT, temperature=0.0, max_tokens=128)
        if self.is_reader or fields["temperature"] == 0:  # deterministic: one answer says it all
            fields.update(samples=1)
        return GenerationConfig(**fields)

    @property
    def random(self) -> bool:
        """Whether the generator draws at random (an LLM at temperature > 0)."""
        return not self.is_reader and self.temperature > 0

    @property
    def key(self) -> str:
        key = (
            slug(self.model)
            if self.is_reader
            else (
                f"{slug(self.model)}-t{self.temperature:g}-m{self.max_tokens}-p{short_hash(self.prompt_template, 6)}"
            )
        )
        if self.context == "compress":
            key += f"-cmp-{slug(self.context_model)}"
            if self.context_prompt is not None:
                key += f"-cp{short_hash(self.context_prompt, 6)}"
        if self.context_max_tokens:
            key += f"-b{self.context_max_tokens}"
        if self.context_expand == "parent":
            key += "-parent"
        return key


class RagConfig(_Strict):
    """One point of the sweep: a setting for every stage."""

    chunking: ChunkingConfig
    embedding: EmbeddingConfig
    index: IndexConfig = IndexConfig()
    retrieval: RetrievalConfig
    rerank: RerankConfig = Field(
        default_factory=RerankConfig
    )  # built when a config is (its check reads the registry)
    generation: GenerationConfig

    @property
    def fetch_k(self) -> int:
        """How many chunks retrieval fetches: the reranker's candidates, or top_k without a reranker."""
        if self.rerank.method == "none":
            return self.retrieval.top_k
        return max(self.retrieval.top_k, self.rerank.candidates)

    def text(self, component: str) -> str:
        """The text of a prompt component (PROMPT_COMPONENTS) as this config has it (unset: the built-in one)."""
        if not component_used(self, component):
            raise ValueError(f"this config does not use {component} ({PROMPT_COMPONENTS[component]})")
        if component == "rewrite_prompt":
            return self.retrieval.query_template
        if component == "rerank_prompt":
            return self.rerank.template
        if component == "compress_prompt":
            return self.generation.context_prompt or COMPRESS_PROMPT
        if component == "sufficiency_prompt":
            return self.retrieval.sufficiency_prompt or SUFFICIENCY_PROMPT
        if component == "refine_prompt":
            return self.retrieval.refine_prompt or REFINE_PROMPT
        return self.generation.prompt_template

    def with_texts(self, texts: dict[str, str]) -> RagConfig:
        """The config with these texts in place of its own components' (an optimized prompt)."""
        c = self
        for component, text in texts.items():
            stage, name = PROMPT_COMPONENTS[component].split(".")
            section = getattr(c, stage).model_copy(update={name: text})
            c = c.model_copy(update={stage: section.effective()})  # the built-in text is stored as unset
        return c

    def flat_params(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for stage in ("chunking", "embedding", "index", "retrieval", "rerank", "generation"):
            for name, value in getattr(self, stage).model_dump().items():
                # mappings (a retrieval filter) as canonical JSON: one type per column and MLflow param
                out[f"{stage}.{name}"] = (
                    json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
                )
        return out


# ---- the file as written: every leaf may be a list --------------------------------------------


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list) else [v]


class DataSpec(_Strict):
    corpus: str
    """The corpus: Parquet or JSONL with `doc_id`, `text` (`title`, `metadata` optional), a folder of
    `.txt`/`.md` files, or a BEIR dataset's folder; relative to the sweep file."""
    qa: str
    """The QA set: Parquet or JSONL with `query_id`, `question`, `answers`, `relevant_doc_ids`, or a BEIR,
    Ragas or MLflow evaluation dataset; relative to the sweep file."""
    max_queries: int | None = Field(default=None, gt=0)
    """Use only the first N questions."""
    # the QA set's language (en, zh, de-CH): answers are normalized as MLQA's script does for it
    # (rag_core/metrics/languages.py); `auto`: each question's is detected; unset: SQuAD's English
    # normalization. A `language` column per question overrides it.
    language: str | None = None
    """The QA set's language, a tag (`en`, `zh`, `de-CH`) or `auto`: its answers are normalized as MLQA's
    evaluation does for it (Japanese and Thai cut into words by a segmenter, Korean per character; see the
    metrics page, Other languages); a `language` column per question wins. `auto`: each question without
    one gets the language detected from its gold documents' text, else its answers', else the question's
    (py3langid, offline, deterministic; below 0.3 confidence a question is scored without a language).
    Unset: SQuAD v1.1's English normalization."""

    @field_validator("language")
    @classmethod
    def _language_tag(cls, v: str | None) -> str | None:
        from rag_core.data.datasets import language_code

        return None if v is None else "auto" if v.lower() == "auto" else language_code(v)


class EvaluationSpec(_Strict):
    judge_model: str | None = None
    """A litellm model that adds `faithfulness_judge`: it grades each answer's support in its context
    (versioned prompt `faithfulness-v1`, parsed numeric verdict; failures counted in `n_judge_failures`)."""
    # people's labels of answers (question, answer, context, supported; rag_core/metrics/judge_agreement.py):
    # the judge is measured against them with each leaderboard, and a judge whose Cohen's kappa is below
    # min_kappa (or undefined) is reported but not weighted into the overall score
    judge_labels: str | None = None
    """People's labels of answers (`question`, `answer`, `context`, `supported`; needs `judge_model`): each
    leaderboard measures the judge against them, and a judge whose Cohen's kappa is below `min_kappa` (or
    undefined) is reported but not weighted."""
    # a file holding the judge's prompt ({question}, {answer}, {context}), e.g. the aligned prompt
    # `rag-sweep calibrate-judge --align --aligned-out` writes; None: the built-in one (rag_core/metrics/judge.py)
    judge_prompt: str | None = None
    """A file holding the judge's prompt instead of `faithfulness-v1` (needs `judge_model`), e.g. the
    aligned one `calibrate-judge --align --aligned-out` writes; its content is in the evaluations'
    fingerprint."""
    min_kappa: float = Field(default=0.6, ge=-1.0, le=1.0)
    """The kappa on `judge_labels` a judge needs for `faithfulness_judge` to be weighted into the overall
    score."""
    judge_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """A judge score at or above it counts as "supported"."""
    # answers per question of a generator with temperature > 0: a question's scores are their mean
    samples: int = Field(default=1, ge=1, le=50)
    """Answers per question of a generator with temperature > 0 (each its own call-cache entry): a
    question's metrics are the mean of its samples, and the evaluation splits the score's variance between
    questions and within them."""


def _metric_values(v: dict[str, float], what: str) -> dict[str, float]:
    """A mapping of metric -> number (weights, floors): installed weightable metrics and finite numbers."""
    from rag_core.metrics.registry import METRICS, weightable_metrics

    allowed = weightable_metrics()
    unknown = sorted(set(v) - set(METRICS.names()))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose from {allowed}")
    other = sorted(set(v) - set(allowed))
    if other:
        raise ValueError(
            f"{what}: metric(s) {other} are reported only (not a score in [0, 1], higher better)"
        )
    bad = sorted(k for k, x in v.items() if not math.isfinite(x))
    if bad:
        raise ValueError(f"{what} must be finite numbers (not nan or inf): {bad}")
    return v


class DecisionSpec(_Strict):
    """What the team can ship: limits a recommended config must meet, and which of the top tier to prefer."""

    max_p95_latency_ms: float | None = Field(default=None, gt=0)
    """The recommended config's p95 of retrieval + generation time per query may not exceed it."""
    max_cost_per_1k_queries: float | None = Field(default=None, ge=0)
    """The recommended config's cost per 1,000 queries in USD (litellm's prices; 0 for local models) may
    not exceed it."""
    min: dict[str, float] = Field(default_factory=dict)
    """Metric floors the recommended config must meet, e.g. `{recall_at_k: 0.8}`."""
    prefer: Literal["cheapest", "fastest", "best"] = "cheapest"
    """Which config of the best qualifying tier to recommend: `cheapest`, `fastest` or `best` (then the
    other of cheapest/fastest)."""
    alpha: float = Field(default=0.05, gt=0, lt=1)
    """Family-wise error rate of the tier tests (Holm)."""
    # the share of the QA set set aside before anything is chosen, on which the finalists are confirmed
    # (rag_core/decision/holdout.py); 0 turns it off. The split is seeded: the same on every run.
    holdout: float = Field(default=0.3, ge=0, lt=1)
    """The share of questions set aside before anything is chosen, on which the finalists are confirmed; 0
    turns it off."""
    holdout_seed: int = 0
    """The seed of the holdout split (the same split on every run)."""

    @field_validator("min")
    @classmethod
    def _known_metrics(cls, v: dict[str, float]) -> dict[str, float]:
        return _metric_values(v, "metric floors")


class GateSpec(_Strict):
    """`rag-sweep gate` (rag_core/decision/gate.py): a candidate passes when a paired one-sided test shows
    it not worse than the baseline by `margin` or more in overall score (and each metric of
    `metric_margins` by its own); with `equivalence`, when it shows the difference within ±margin."""

    margin: float = Field(default=0.02, gt=0, lt=1)
    """`rag-sweep gate`: how far below the baseline's overall score a candidate may be and still pass."""
    metric_margins: dict[str, float] = Field(default_factory=dict)
    """Metrics tested against margins of their own too, e.g. `{recall_at_k: 0.02}`."""
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    """Family-wise error rate (Holm over the candidates)."""
    power: float = Field(default=0.8, gt=0, lt=1)
    """The power of the test whose size an inconclusive verdict reports."""
    equivalence: bool = False
    """Two one-sided tests: pass only when shown within ±margin."""

    @field_validator("metric_margins")
    @classmethod
    def _known_metrics(cls, v: dict[str, float]) -> dict[str, float]:
        _metric_values(v, "metric margins")
        if bad := sorted(k for k, x in v.items() if not 0 < x < 1):
            raise ValueError(f"metric margins must be between 0 and 1: {bad}")
        return v


class SearchBudget(_Strict):
    """Where an adaptive search stops (it keeps what it found so far). max_configs also caps grid/random."""

    max_configs: int | None = Field(default=None, gt=0)
    """grid: the first N configs; random: N sampled with `search.seed`; bayesian: N configs evaluated by
    `rag-sweep run`; halving: N sampled configs to start with."""
    max_index_builds: int | None = Field(default=None, gt=0)
    """cost_aware: corpora embedded (index builds) the search may pay for; never passed."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """bayesian, halving, cost_aware: stop once the search's LLM calls cost this much (litellm's prices)."""
    max_llm_calls: int | None = Field(default=None, gt=0)
    """bayesian, halving, cost_aware: stop once the search has paid for this many LLM calls (answers from
    the call cache are free)."""

    def in_cost_units(self):
        """The caps a strategy that weighs costs keeps to (rag_core/search/cost.py)."""
        from rag_core.search.cost import CostBudget

        return CostBudget(
            index_builds=self.max_index_builds, llm_calls=self.max_llm_calls, usd=self.max_cost_usd
        )


class SearchSpec(_Strict):
    """grid/random: the configs are chosen on load (the first `budget.max_configs`, or a seeded sample).
    bayesian: the plan holds every config; `rag-sweep run` evaluates `max_configs` of them, one at a time,
    chosen by Optuna's TPE from the results so far, preferring (among `pool` open suggestions) the one
    that reuses an existing index (rag_core/search). halving: every config answers `start_questions`
    questions; a paired test drops those worse than the leader, the rest answer `growth` times more.
    cost_aware: like bayesian, one config at a time, the one with the most expected improvement per unit of
    the cost it adds (index builds, LLM calls, USD, given what is built), never past budget.max_index_builds,
    max_llm_calls or max_cost_usd (rag_core/search/cost_aware.py)."""

    strategy: str = "grid"
    """How configs are chosen: `grid`, `random`, `bayesian` (Optuna's TPE), `halving` (successive halving
    over questions), `cost_aware` (expected improvement per unit of new cost), or an installed plug-in's."""
    budget: SearchBudget = Field(default_factory=SearchBudget)
    """Where a search stops (it keeps what it found so far)."""
    seed: int = 0
    """The seed of random sampling and of the TPE sampler."""
    pool: int = Field(default=4, ge=1, le=32)
    """bayesian: open TPE suggestions to choose the cheapest from (1: plain TPE)."""
    # bayesian: what TPE optimizes; several make it multi-objective (lower latency and cost are better)
    objectives: list[Literal["overall_score", "p95_latency_ms", "cost_per_1k_queries"]] = Field(
        default_factory=lambda: ["overall_score"], min_length=1
    )
    """bayesian: what TPE optimizes; several make it multi-objective (latency and cost minimized)."""
    start_questions: int = Field(default=10, ge=2)
    """halving: the first rung's questions."""
    growth: float = Field(default=2.0, gt=1)
    """halving: the factor each rung's questions grow by."""

    @field_validator("strategy")
    @classmethod
    def _strategy_installed(cls, v: str) -> str:
        from rag_core.search.strategies import STRATEGIES

        STRATEGIES.get(v)  # UnknownComponent names the installed strategies
        return v

    @model_validator(mode="after")
    def _budget_in_builds_kept(self) -> SearchSpec:
        import inspect

        from rag_core.search.strategies import STRATEGIES

        factory = STRATEGIES.get(self.strategy).factory
        if self.budget.max_index_builds is not None and (
            factory is None or "budget" not in inspect.signature(factory).parameters
        ):
            raise ValueError(
                f"budget.max_index_builds: search.strategy {self.strategy!r} cannot keep to a budget in index "
                "builds (cost_aware does)"
            )
        return self

    @property
    def how(self) -> str:
        """upfront (grid, random: chosen on load), sequential (bayesian, a plug-in's) or halving."""
        from rag_core.search.strategies import STRATEGIES

        return STRATEGIES.get(self.strategy).how

    @property
    def adaptive(self) -> bool:
        """Whether `rag-sweep run` chooses what to evaluate as it goes (the plan holds the whole space)."""
        return self.how != "upfront"

    @property
    def sequential(self) -> bool:
        """One config at a time, each chosen from the results so far (bayesian, a plug-in's strategy)."""
        return self.how == "sequential"


def component_used(c: RagConfig, component: str) -> bool:
    """Whether config `c` reads the text component (an extractive reader has no answer prompt)."""
    if component == "rewrite_prompt":
        return c.retrieval.query_transform != "none"
    if component == "rerank_prompt":
        return c.rerank.method == "llm"
    if component == "answer_prompt":
        return not c.generation.is_reader
    if component == "compress_prompt":
        return c.generation.context == "compress"
    if component in ("sufficiency_prompt", "refine_prompt"):
        return c.retrieval.iterates and c.retrieval.hop_policy == "llm"
    return False


MIN_OPTIMIZE_QUESTIONS = 2  # selection questions a prompt optimization needs: a train and a validation one


def split_sizes(questions: int, val_share: float) -> tuple[int, int]:
    """(train, validation) sizes of GEPA's split of `questions` selection questions: at least one question
    on each side (rag_core/optimization/evolve.py `train_val_split`)."""
    val = min(max(round(val_share * questions), 1), questions - 1)
    return questions - val, val


class OptimizeBudget(_Strict):
    """Where a prompt optimization stops, keeping the best prompts found so far. GEPA checks both between
    its iterations: the calls are kept within max_metric_calls (room for one iteration is kept), while the
    spend may pass max_cost_usd by one iteration's calls."""

    max_metric_calls: int = Field(default=300, gt=0)
    """Questions answered and scored, the seed's included."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """The provider's price of the calls the optimization paid for (may be passed by one iteration's
    calls)."""


class OptimizeSpec(_Strict):
    """Prompt optimization (GEPA, reflective prompt evolution): the `components` of each config in
    `configs` evolve on the selection split's questions (train and validation, never the holdout); the best
    prompts become a new config, evaluated like every other."""

    components: list[str] = Field(default_factory=lambda: ["answer_prompt"], min_length=1)
    """The text components GEPA evolves: `answer_prompt`, `compress_prompt`, `rerank_prompt`,
    `rewrite_prompt`, `sufficiency_prompt`, `refine_prompt`; a component no config uses is an error."""
    reflection_model: str = Field(min_length=1)
    """A litellm model that reads failed answers and proposes new prompts."""
    # which configs start an optimization: the recommendation among the sweep's own configs, its top tier,
    # or config keys / labels
    configs: Literal["recommended", "top_tier"] | list[str] = "recommended"
    """The configs an optimization starts from, among the sweep's own: `recommended`, `top_tier`, or a list
    of config keys or labels."""
    budget: OptimizeBudget = Field(default_factory=OptimizeBudget)
    """Where an optimization stops, keeping the best prompts found so far."""
    val_share: float = Field(default=0.5, gt=0, lt=1)
    """The share of the selection questions GEPA validates on."""
    minibatch: int = Field(default=3, ge=1, le=50)
    """Questions a proposal is tried on before validation."""
    seed: int = 0
    """The seed of GEPA's split and sampling."""

    @field_validator("components")
    @classmethod
    def _known_components(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in PROMPT_COMPONENTS]
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; choose from {sorted(PROMPT_COMPONENTS)}")
        if len(set(v)) != len(v):
            raise ValueError("a component is listed twice")
        return v

    @field_validator("configs")
    @classmethod
    def _some_configs(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("an empty list optimizes nothing: name config keys, 'recommended' or 'top_tier'")
        return v

    def split_sizes(self, questions: int) -> tuple[int, int]:
        return split_sizes(questions, self.val_share)

    def min_metric_calls(self, questions: int) -> int:
        """The smallest budget.max_metric_calls an optimization on `questions` selection questions runs
        with: GEPA scores the seed on the validation questions, then checks its budget between iterations,
        so room for one iteration is kept: two minibatches and, when its proposal is accepted, the
        validation questions again."""
        train, val = self.split_sizes(questions)
        return 2 * val + 2 * min(self.minibatch, train)

    @property
    def first_stage(self) -> str:
        """The earliest stage an optimized component changes: an optimization reruns the config's stages from
        there on each question it scores, and an optimized config shares every partition before it."""
        return min((COMPONENT_STAGES[c] for c in self.components), key=OPTIMIZABLE_STAGES.index)

    @property
    def rerun_stages(self) -> tuple[str, ...]:
        """The stages an optimization runs again on each question it scores: the first one on."""
        return OPTIMIZABLE_STAGES[OPTIMIZABLE_STAGES.index(self.first_stage) :]


class SweepFile(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    """The sweep's name: its MLflow experiment, registered model and leaderboard file."""
    description: str = ""
    """Free text."""
    data: DataSpec
    """The corpus and the QA set."""
    chunking: dict[str, Any] | list[dict[str, Any]]
    """How documents are cut into chunks (the settings below); each field may be one value or a list."""
    embedding: dict[str, Any] | list[dict[str, Any]] = Field(
        default_factory=lambda: {"model": "all-MiniLM-L6-v2"}
    )
    """The embedding model; each field may be one value or a list."""
    index: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=dict)
    """Where the index lives and how it analyzes keywords; each field may be one value or a list."""
    retrieval: dict[str, Any] | list[dict[str, Any]]
    """How chunks are retrieved; each field may be one value or a list."""
    rerank: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=lambda: {"method": "none"})
    """How retrieved chunks are reranked; each field may be one value or a list."""
    generation: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=lambda: {"model": "extractive"})
    """How answers are written; each field may be one value or a list."""
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """metric -> weight: the overall score is the weighted mean of these metrics (any weightable metric,
    the metrics reference, or an installed plug-in's); default 0.3 retrieval (recall@k 0.15, nDCG@k 0.15)
    and 0.7 generation (exact match 0.2, token F1 0.35, faithfulness 0.15)."""
    search: SearchSpec = Field(default_factory=SearchSpec)
    """How the configs to evaluate are chosen."""
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    """The LLM judge and its calibration."""
    decision: DecisionSpec = Field(default_factory=DecisionSpec)
    """What the team can ship: limits, preference, the tiers' error rate and the holdout."""
    # the QA set written from the corpus by an LLM into data.qa when that file does not exist yet
    qa_generation: QAGeneration | None = None
    """The QA set written from the corpus by an LLM into `data.qa` when that file does not exist yet."""
    optimize: OptimizeSpec | None = None
    """Prompt optimization (GEPA) of the recommended or top-tier configs."""
    gate: GateSpec = Field(default_factory=GateSpec)
    """The test `rag-sweep gate` and the champion's `not_worse_than_champion` check run."""

    @field_validator("weights")
    @classmethod
    def _weights_valid(cls, v: dict[str, float]) -> dict[str, float]:
        _metric_values(v, "weights")
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("weights must be non-negative and sum to more than 0")
        return v


class Sweep(BaseModel):
    """A loaded sweep: resolved input paths, weights and the expanded configs."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    path: Path
    corpus_path: Path
    qa_path: Path
    max_queries: int | None
    weights: dict[str, float]
    configs: tuple[RagConfig, ...]
    language: str | None = None
    detect_language: bool = False  # data.language: auto (each question's language detected in the QA set)
    judge_model: str | None = None
    evaluation: EvaluationSpec = EvaluationSpec()
    judge_labels: Path | None = None  # resolved; its content's hash is judge_labels_fp
    judge_labels_fp: str | None = None
    judge_prompt: str | None = None  # evaluation.judge_prompt's content, checked on load; None: the built-in
    decision: DecisionSpec = DecisionSpec()
    search: SearchSpec = SearchSpec()
    qa_generation: QAGeneration | None = None
    optimize: OptimizeSpec | None = None
    gate: GateSpec = GateSpec()

    def fingerprint(self) -> str:
        return fingerprint([c.model_dump() for c in self.configs], self.weights)

    @property
    def judge(self):
        """The judge (rag_core/metrics/judge.py JudgeSetting: its model and prompt), None without one."""
        from rag_core.metrics.judge import JUDGE_PROMPT, JudgeSetting

        return JudgeSetting(self.judge_model, self.judge_prompt or JUDGE_PROMPT) if self.judge_model else None


def _expand(section: dict[str, Any] | list, model: type[BaseModel], where: str) -> list:
    """A mapping expands into the product of its list-valued fields; a list of mappings into the union
    of their expansions (to pair settings instead of crossing them)."""
    if isinstance(section, list):
        if not section:
            raise SpecError(f"field '{where}': an empty list selects no setting (give at least one)")
        out = []
        for i, item in enumerate(section):
            out += [x for x in _expand(item, model, f"{where}[{i}]") if x not in out]
        return out
    if not isinstance(section, dict):
        raise SpecError(f"field '{where}': expected a mapping of settings (or a list of them)")
    names = list(section)
    empty = [n for n in names if section[n] == []]
    if empty:
        raise SpecError(f"field '{where}.{empty[0]}': an empty list selects no setting (give at least one)")
    out = []
    for combo in itertools.product(*(_as_list(section[n]) for n in names)):
        try:
            obj = model(**dict(zip(names, combo, strict=True)))
        except ValidationError as e:
            raise SpecError(_format_error(e, where)) from None
        obj = obj.effective() if hasattr(obj, "effective") else obj
        if obj not in out:
            out.append(obj)
    return out


def _format_error(e: ValidationError, where: str) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not isinstance(p, int))
        field = f"{where}.{loc}" if loc else where
        parts.append(f"field '{field}': {err['msg']}")
    return "; ".join(parts)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error naming its line (the default
    silently keeps the last value)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def load_sweep(path: str | Path) -> Sweep:
    """Load and validate a sweep YAML file; raise SpecError naming the file and the field."""
    path = Path(path).resolve()
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except FileNotFoundError:
        raise SpecError(f"{path}: sweep spec not found") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a sweep spec (a .yaml file)") from None
    except (PermissionError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot be read as a sweep spec: {e}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the sweep spec must be a mapping")
    return sweep_from_dict(raw, path)


def _refuse_nul(value: Any, path: Path, where: str = "") -> None:
    """A NUL byte in any text of the spec (YAML's "\\0"): no path, prompt or model name holds one, and the
    file system's refusal would be a traceback; said in one line naming the field."""
    if isinstance(value, str) and "\x00" in value:
        raise SpecError(f"{path}: field '{where or 'sweep'}': holds a NUL byte ({value!r})")
    if isinstance(value, dict):
        for k, v in value.items():
            _refuse_nul(v, path, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for v in value:
            _refuse_nul(v, path, where)


def sweep_from_dict(raw: dict[str, Any], path: Path) -> Sweep:
    _refuse_nul(raw, path)
    if "optimize" in raw and raw["optimize"] in (None, {}):  # YAML's `optimize:` alone is null
        raise SpecError(
            f"{path}: field 'optimize': the section is empty; it needs reflection_model (a litellm model "
            "that reads failed answers and proposes prompts; components, configs and budget have defaults), "
            "or leave the section out to optimize nothing"
        )
    try:
        spec = SweepFile(**raw)
    except ValidationError as e:
        raise SpecError(f"{path}: {_format_error(e, 'sweep').replace('sweep.', '')}") from None
    try:
        chunkings = _expand(spec.chunking, ChunkingConfig, "chunking")
        embeddings = _expand(spec.embedding, EmbeddingConfig, "embedding")
        indexes = _expand(spec.index, IndexConfig, "index")
        for i in indexes:
            _check_analyzer_language(i, spec.data.language)
        retrievals = _expand(spec.retrieval, RetrievalConfig, "retrieval")
        reranks = _expand(spec.rerank, RerankConfig, "rerank")
        generations = _expand(spec.generation, GenerationConfig, "generation")
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
    if any(g.samples != 1 for g in generations):
        raise SpecError(f"{path}: field 'generation.samples': set evaluation.samples instead")
    generations = [  # a random generator answers each question evaluation.samples times
        g.model_copy(update={"samples": spec.evaluation.samples}) if g.random else g for g in generations
    ]
    configs = [
        RagConfig(
            chunking=c.model_copy(update={"model": c.model or e.model}) if c.needs_model else c,
            embedding=e,
            index=_unused_ann_left_out(follow_language(i, r, spec.data.language), r),
            retrieval=r,
            rerank=rr,
            generation=g,
        )
        for c, e, i, r, rr, g in itertools.product(
            chunkings, embeddings, indexes, retrievals, reranks, generations
        )
    ]
    firsts: dict[str, RagConfig] = {}  # an ann that a config does not search made two of one: kept once
    configs = [
        firsts.setdefault(c.model_dump_json(), c) for c in configs if c.model_dump_json() not in firsts
    ]
    _check_consistency(spec, configs, path)
    configs = _search(configs, spec.search)
    base = path.parent
    labels, labels_fp = _judge_labels(spec, path)
    return Sweep(
        name=spec.name,
        path=path,
        corpus_path=(base / spec.data.corpus).resolve(),
        qa_path=(base / spec.data.qa).resolve(),
        max_queries=spec.data.max_queries,
        language=None if spec.data.language == "auto" else spec.data.language,
        detect_language=spec.data.language == "auto",
        weights=spec.weights,
        configs=tuple(configs),
        judge_model=spec.evaluation.judge_model,
        evaluation=spec.evaluation,
        judge_labels=labels,
        judge_labels_fp=labels_fp,
        judge_prompt=_judge_prompt(spec, path),
        decision=spec.decision,
        search=spec.search,
        qa_generation=spec.qa_generation,
        optimize=spec.optimize,
        gate=spec.gate,
    )


def _unused_ann_left_out(index: IndexConfig, retrieval: RetrievalConfig) -> IndexConfig:
    """A config whose retrieval reads no vector (`bm25`) searches no approximate index: its `index.ann` is
    exact, so it is neither built for it nor in its key (a grid of modes x ann types gives it once)."""
    from rag_core.components.retrieval_modes import retrieval_mode

    if not index.ann.approximate or retrieval_mode(retrieval.mode).reads_vector:
        return index
    return index.model_copy(update={"ann": AnnIndex()})


def follow_language(index: IndexConfig, retrieval: RetrievalConfig, language: str | None) -> IndexConfig:
    """The index of a config: one that searches keywords and names no analyzer gets the analyzer of the QA
    set's language where it has one (zh chinese, ja japanese, th thai); every other keeps its own (plain
    unless named), so a config that searches by vector alone keeps its index and fingerprints."""
    from rag_core.retrieval.keywords import analyzer_for

    analyzer = analyzer_for(language)
    if analyzer is None or "bm25_analyzer" in index.model_fields_set or not retrieval.reads_keywords:
        return index
    return index.model_copy(update={"bm25_analyzer": analyzer})


def _check_analyzer_language(index: IndexConfig, language: str | None) -> None:
    """An analyzer named for a language is the QA set's language when data.language names one: japanese over
    a Thai QA set, or english (stemming, no segmentation) over a Chinese, Japanese or Thai one, is an error.
    plain goes with every language; with no language (or `auto`) any analyzer may be named."""
    from rag_core.retrieval.keywords import SEGMENTING, analyzer_for

    analyzer = index.bm25_analyzer
    if language in (None, "auto") or analyzer == "plain":
        return
    own = analyzer_for(language)
    if analyzer in SEGMENTING and SEGMENTING[analyzer] != language:
        problem = f"{analyzer!r} segments {SEGMENTING[analyzer]} text but data.language is {language}"
    elif analyzer == "english" and own is not None:
        problem = f"'english' stems English words and cannot segment {language} text (data.language)"
    else:
        return
    advice = (
        f"leave it unset (a config that searches keywords then gets {own!r}) or name plain"
        if own
        else f"name plain ({language} has no segmenting analyzer)"
    )
    raise SpecError(f"field 'index.bm25_analyzer': {problem}; {advice}")


def _judge_prompt(spec: SweepFile, path: Path) -> str | None:
    """evaluation.judge_prompt's content (relative to the sweep file), checked on load: a template with the
    fields {question}, {answer} and {context}."""
    from rag_core.metrics.judge import template_problem

    ev = spec.evaluation
    if ev.judge_prompt is None:
        return None
    where = f"{path}: field 'evaluation.judge_prompt'"
    if not ev.judge_model:
        raise SpecError(f"{where}: a prompt for a judge, but no judge runs; set evaluation.judge_model")
    file = (path.parent / ev.judge_prompt).resolve()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{where}: {file}: cannot be read ({type(e).__name__})") from None
    if problem := template_problem(text):
        raise SpecError(f"{where}: {file}: {problem}")
    return text


def _judge_labels(spec: SweepFile, path: Path) -> tuple[Path | None, str | None]:
    """The judge's labels file, read and checked on load (an error names its row and field before any
    work), and the hash of its content (the leaderboard's fingerprint holds it: edited labels, a new verdict)."""
    import hashlib

    from rag_core.metrics.judge_agreement import LabelsError, read_labels

    ev = spec.evaluation
    if ev.judge_labels is None:
        return None, None
    if not ev.judge_model:
        raise SpecError(
            f"{path}: field 'evaluation.judge_labels': labels for a judge, but no judge runs; set "
            "evaluation.judge_model"
        )
    labels = (path.parent / ev.judge_labels).resolve()
    try:
        read_labels(labels)
    except LabelsError as e:
        raise SpecError(f"{path}: field 'evaluation.judge_labels': {e}") from None
    return labels, hashlib.sha256(labels.read_bytes()).hexdigest()


def _check_consistency(spec: SweepFile, configs: list[RagConfig], path: Path) -> None:
    """Settings that are valid alone but not together."""
    if spec.weights.get("faithfulness_judge", 0) > 0 and not spec.evaluation.judge_model:
        raise SpecError(
            f"{path}: field 'weights.faithfulness_judge': weighted, but no judge runs; set "
            "evaluation.judge_model (a litellm model) or drop the weight"
        )
    for c in configs:
        if c.rerank.method != "none" and c.rerank.candidates < c.retrieval.top_k:
            raise SpecError(
                f"{path}: field 'rerank.candidates': {c.rerank.candidates} candidates cannot fill top_k "
                f"{c.retrieval.top_k} (retrieval.top_k); use candidates >= top_k"
            )
    if spec.optimize is not None:
        if spec.search.adaptive:
            raise SpecError(
                f"{path}: field 'optimize': not with search.strategy {spec.search.strategy!r} yet (the configs "
                "an optimization adds would change the space the search replays); use grid or random"
            )
        _check_optimize(spec.optimize, configs, path)


def _check_optimize(opt: OptimizeSpec, configs: list[RagConfig], path: Path) -> None:
    """Every component to optimize is read by some config (named configs: by each, checked in the plan,
    where config keys are known); the budget holds one iteration on the fewest selection questions an
    optimization runs on (on the QA set's own number: `check_optimize_budget`, once it is read)."""
    need = opt.min_metric_calls(MIN_OPTIMIZE_QUESTIONS)
    if opt.budget.max_metric_calls < need:
        raise SpecError(
            f"{path}: field 'optimize.budget.max_metric_calls': {opt.budget.max_metric_calls} cannot hold "
            f"the seed's validation and one iteration (two minibatches and the validation again) even on "
            f"the fewest selection questions, {MIN_OPTIMIZE_QUESTIONS}: give at least {need} (more with more "
            "questions)"
        )
    for component in opt.components:
        if not any(component_used(c, component) for c in configs):
            raise SpecError(
                f"{path}: field 'optimize.components': no config of this sweep uses {component} "
                f"({PROMPT_COMPONENTS[component]}: {COMPONENT_USE[component]})"
            )


def _search(configs: list[RagConfig], search: SearchSpec) -> list[RagConfig]:
    n = search.budget.max_configs
    if search.adaptive or n is None or n >= len(configs):  # adaptive: the run picks what to evaluate
        return configs
    from rag_core.search.strategies import STRATEGIES

    return [configs[i] for i in STRATEGIES.get(search.strategy).choose(len(configs), n, search.seed)]


def check_optimize_budget(sweep: Sweep, selection_questions: int, source: str = "the QA set") -> None:
    """A prompt optimization's budget against the selection questions it will run on, known once the QA
    set is read: refused before any step runs, not after the sweep (`source`: where the questions come
    from, for the message)."""
    opt = sweep.optimize
    if opt is None:
        return
    n = selection_questions
    held = " (the holdout aside)" if sweep.decision.holdout > 0 else ""
    if n < MIN_OPTIMIZE_QUESTIONS:
        raise SpecError(
            f"{sweep.path}: field 'optimize': prompt optimization needs at least {MIN_OPTIMIZE_QUESTIONS} "
            f"selection questions (a train and a validation one); {source} gives {n}{held}"
        )
    need = opt.min_metric_calls(n)
    if opt.budget.max_metric_calls < need:
        train, val = opt.split_sizes(n)
        raise SpecError(
            f"{sweep.path}: field 'optimize.budget.max_metric_calls': {opt.budget.max_metric_calls} cannot "
            f"hold the seed's validation and one iteration on the {n} selection questions {source} gives"
            f"{held}: the seed scores the {val} validation questions, an iteration two minibatches of "
            f"{min(opt.minibatch, train)} and the validation again; give at least {need}"
        )

"""One config's settings, stage by stage: what a sweep file's stage sections (`chunking`, `embedding`, `index`,
`retrieval`, `rerank`, `generation`) expand into, each a concrete value (rag_core/planning/spec.py expands the
file), and the prompt components an optimization can evolve. Errors name the dotted field."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

from rag_core.common.fingerprint import fingerprint, short_hash, slug
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


class Strict(BaseModel):
    """Every settings model's base: unknown keys, wrong types and changes after loading are errors."""

    # strict: `top_k: true` or `chunk_size: "512"` is an error naming the field, never coerced
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)


# ---- one concrete setting per stage -------------------------------------------------------------


class ChunkingConfig(Strict):
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


class EmbeddingConfig(Strict):
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


class IndexConfig(Strict):
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


class RetrievalConfig(Strict):
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


class RerankConfig(Strict):
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


class GenerationConfig(Strict):
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


class RagConfig(Strict):
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

"""Sweep spec: one YAML file per sweep, validated on load, expanded into configs.

Every leaf of the stage sections may be a single value or a list; the spec expands into the cartesian
product of its stage settings (settings that a stage ignores, such as `hybrid_alpha` for `vector`
retrieval, do not multiply configs). Errors name the file and the dotted field.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rag_core.fingerprint import fingerprint, short_hash, slug

DEFAULT_PROMPT = (
    "Answer the question using only the context. Reply with a short answer (a few words), no explanation.\n\n"
    "Context:\n{context}\n\nQuestion: {query}\nAnswer:"
)

# Default weights: 0.3 on retrieval, 0.7 on generation (see docs in README "Score weights").
DEFAULT_WEIGHTS = {
    "recall_at_k": 0.15,
    "ndcg_at_k": 0.15,
    "exact_match": 0.2,
    "token_f1": 0.35,
    "faithfulness": 0.15,
}


class SpecError(ValueError):
    """A sweep spec that cannot be used; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---- one concrete setting per stage -------------------------------------------------------------


class ChunkingConfig(_Strict):
    """Chunk sizes and overlaps are in characters of the document text."""

    method: Literal["fixed", "sentence", "paragraph", "recursive"]
    chunk_size: int = Field(gt=0)
    chunk_overlap: int = Field(ge=0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be smaller than chunk_size ({self.chunk_size})"
            )
        return self

    @property
    def key(self) -> str:
        return f"{self.method}-{self.chunk_size}-{self.chunk_overlap}"


class EmbeddingConfig(_Strict):
    model: str = Field(min_length=1)

    @property
    def key(self) -> str:
        return slug(self.model.split("/")[-1])


class RetrievalConfig(_Strict):
    mode: Literal["vector", "bm25", "hybrid"]
    top_k: int = Field(gt=0, le=100)
    hybrid_alpha: float = Field(default=0.5, ge=0.0, le=1.0)
    fusion: Literal["rrf", "weighted"] = "rrf"

    @property
    def key(self) -> str:
        if self.mode == "hybrid":
            return f"hybrid-{self.fusion}-a{self.hybrid_alpha:g}-k{self.top_k}"
        return f"{self.mode}-k{self.top_k}"

    def effective(self) -> RetrievalConfig:
        """Settings that do not affect this mode are reset, so they neither split partitions nor configs."""
        if self.mode == "hybrid":
            return self
        return RetrievalConfig(mode=self.mode, top_k=self.top_k)


class GenerationConfig(_Strict):
    model: str = Field(min_length=1)
    prompt_template: str = DEFAULT_PROMPT
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=128, gt=0)

    @field_validator("prompt_template")
    @classmethod
    def _has_placeholders(cls, v: str) -> str:
        for name in ("{query}", "{context}"):
            if name not in v:
                raise ValueError(f"prompt_template must contain {name}")
        return v

    @property
    def is_extractive(self) -> bool:
        return self.model == "extractive"

    def effective(self) -> GenerationConfig:
        if self.is_extractive:  # the extractive reader has no prompt, temperature or token limit
            return GenerationConfig(model="extractive")
        return self

    @property
    def key(self) -> str:
        if self.is_extractive:
            return "extractive"
        return (
            f"{slug(self.model)}-t{self.temperature:g}-m{self.max_tokens}"
            f"-p{short_hash(self.prompt_template, 6)}"
        )


class RagConfig(_Strict):
    """One point of the sweep: a setting for every stage."""

    chunking: ChunkingConfig
    embedding: EmbeddingConfig
    retrieval: RetrievalConfig
    generation: GenerationConfig

    # Partition keys: each stage is keyed by exactly the settings that determine it.
    @property
    def chunk_key(self) -> str:
        return self.chunking.key

    @property
    def index_key(self) -> str:
        return f"{self.chunk_key}__{self.embedding.key}"

    @property
    def retrieval_key(self) -> str:
        return f"{self.index_key}__{self.retrieval.key}"

    @property
    def config_key(self) -> str:
        return f"{self.retrieval_key}__{self.generation.key}"

    def flat_params(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for stage in ("chunking", "embedding", "retrieval", "generation"):
            for name, value in getattr(self, stage).model_dump().items():
                out[f"{stage}.{name}"] = value
        return out


# ---- the file as written: every leaf may be a list --------------------------------------------


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list) else [v]


class DataSpec(_Strict):
    corpus: str
    qa: str
    max_queries: int | None = Field(default=None, gt=0)


class EvaluationSpec(_Strict):
    judge_model: str | None = None  # a litellm model: adds faithfulness_judge (see rag_core/judge.py)


class SearchSpec(_Strict):
    strategy: Literal["grid", "random"] = "grid"
    max_trials: int | None = Field(default=None, gt=0)
    seed: int = 0


class SweepFile(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    data: DataSpec
    chunking: dict[str, Any] | list[dict[str, Any]]
    embedding: dict[str, Any] | list[dict[str, Any]] = Field(
        default_factory=lambda: {"model": "all-MiniLM-L6-v2"}
    )
    retrieval: dict[str, Any] | list[dict[str, Any]]
    generation: dict[str, Any] | list[dict[str, Any]] = Field(default_factory=lambda: {"model": "extractive"})
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    search: SearchSpec = Field(default_factory=SearchSpec)
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)

    @field_validator("weights")
    @classmethod
    def _weights_valid(cls, v: dict[str, float]) -> dict[str, float]:
        from rag_core.metrics import SCORABLE_METRICS

        unknown = sorted(set(v) - set(SCORABLE_METRICS))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(SCORABLE_METRICS)}")
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
    judge_model: str | None = None

    @property
    def chunk_keys(self) -> list[str]:
        return _unique(c.chunk_key for c in self.configs)

    @property
    def index_keys(self) -> list[str]:
        return _unique(c.index_key for c in self.configs)

    @property
    def retrieval_keys(self) -> list[str]:
        return _unique(c.retrieval_key for c in self.configs)

    @property
    def config_keys(self) -> list[str]:
        return _unique(c.config_key for c in self.configs)

    def first(self, attr: str, key: str) -> RagConfig:
        """The first config whose partition key `attr` equals `key` (its prefix settings are shared)."""
        for c in self.configs:
            if getattr(c, attr) == key:
                return c
        raise KeyError(f"no config of sweep {self.name!r} has {attr} {key!r}")

    def fingerprint(self) -> str:
        return fingerprint([c.model_dump() for c in self.configs], self.weights)


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))


def _expand(section: dict[str, Any] | list, model: type[BaseModel], where: str) -> list:
    """A mapping expands into the product of its list-valued fields; a list of mappings into the union
    of their expansions (to pair settings instead of crossing them)."""
    if isinstance(section, list):
        out = []
        for i, item in enumerate(section):
            out += [x for x in _expand(item, model, f"{where}[{i}]") if x not in out]
        return out
    if not isinstance(section, dict):
        raise SpecError(f"field '{where}': expected a mapping of settings (or a list of them)")
    names = list(section)
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


def load_sweep(path: str | Path) -> Sweep:
    """Load and validate a sweep YAML file; raise SpecError naming the file and the field."""
    path = Path(path).resolve()
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: sweep spec not found") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: the sweep spec must be a mapping")
    return sweep_from_dict(raw, path)


def sweep_from_dict(raw: dict[str, Any], path: Path) -> Sweep:
    try:
        spec = SweepFile(**raw)
    except ValidationError as e:
        raise SpecError(f"{path}: {_format_error(e, 'sweep').replace('sweep.', '')}") from None
    try:
        chunkings = _expand(spec.chunking, ChunkingConfig, "chunking")
        embeddings = _expand(spec.embedding, EmbeddingConfig, "embedding")
        retrievals = _expand(spec.retrieval, RetrievalConfig, "retrieval")
        generations = _expand(spec.generation, GenerationConfig, "generation")
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
    configs = [
        RagConfig(chunking=c, embedding=e, retrieval=r, generation=g)
        for c, e, r, g in itertools.product(chunkings, embeddings, retrievals, generations)
    ]
    configs = _search(configs, spec.search)
    _check_keys_unique(configs, path)
    base = path.parent
    return Sweep(
        name=spec.name,
        path=path,
        corpus_path=(base / spec.data.corpus).resolve(),
        qa_path=(base / spec.data.qa).resolve(),
        max_queries=spec.data.max_queries,
        weights=spec.weights,
        configs=tuple(configs),
        judge_model=spec.evaluation.judge_model,
    )


def _check_keys_unique(configs: list[RagConfig], path: Path) -> None:
    """Two different settings must never share a partition key (e.g. models `a/x` and `b/x`)."""
    for attr, stages in (
        ("chunk_key", ("chunking",)),
        ("index_key", ("chunking", "embedding")),
        ("retrieval_key", ("chunking", "embedding", "retrieval")),
        ("config_key", ("chunking", "embedding", "retrieval", "generation")),
    ):
        seen: dict[str, tuple] = {}
        for c in configs:
            settings = tuple(getattr(c, s) for s in stages)
            if seen.setdefault(getattr(c, attr), settings) != settings:
                raise SpecError(
                    f"{path}: two different settings map to the partition key {getattr(c, attr)!r}; "
                    "rename a model so their last path components differ"
                )


def _search(configs: list[RagConfig], search: SearchSpec) -> list[RagConfig]:
    if search.max_trials is None or search.max_trials >= len(configs):
        return configs
    if search.strategy == "grid":
        return configs[: search.max_trials]
    picked = sorted(random.Random(search.seed).sample(range(len(configs)), search.max_trials))
    return [configs[i] for i in picked]

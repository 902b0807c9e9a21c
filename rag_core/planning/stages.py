"""The stage registry: the one table of the sweep's stages.

Each stage's name is its Dagster asset name, its artifact folder and its partition dimension. A
partitioned stage is keyed by its upstream stage's key plus its own settings (`key`), so two configs that
share a prefix share that stage's partition and its work. `reads` lists every artifact the stage reads;
each is a declared dependency of its asset. `version` is the stage's code version: bump it when the
stage's code changes its output for the same inputs (it is part of every artifact fingerprint and the
asset's `code_version`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rag_core.chunking.base import CHUNKERS
from rag_core.common.fingerprint import fingerprint
from rag_core.common.local_models import model_version
from rag_core.components.embedders import EMBEDDERS, is_plugin_embedder
from rag_core.components.readers import READERS
from rag_core.components.rerankers import RERANKERS
from rag_core.components.retrieval_modes import RETRIEVAL_MODES
from rag_core.components.stores import STORES
from rag_core.metrics.judge import JudgeSetting
from rag_core.metrics.languages import segmenter
from rag_core.metrics.registry import METRICS
from rag_core.planning.spec import RagConfig
from rag_core.retrieval.keywords import keyword_rule


@dataclass(frozen=True)
class Stage:
    name: str
    upstream: str | None  # the stage whose key this stage's key extends; None: keyed on its own
    reads: tuple[str, ...]  # every artifact the stage reads (its upstream first)
    version: int
    key: Callable[[RagConfig], str] | None = None  # None: an unpartitioned stage
    settings: Callable[[RagConfig, Any], Any] = lambda c, judge: None  # what the stage adds
    # the column that counts failed LLM calls in its artifact: one that holds any is never reused, so a
    # rerun asks the failed calls again (the answers that came back come from the call cache)
    failures: str | None = None
    # the artifact is a marker of state held elsewhere (a vector store's collection): it is complete
    # only while the store still holds that state (asked of the store, never read off the marker)
    external: bool = False
    # the local models whose weights decide the stage's output: their versions join its own settings
    models: Callable[[RagConfig], tuple[str | None, ...]] = lambda c: ()
    # whether a config's partition calls an LLM (judge: the sweep's judge, JudgeSetting): the LLM endpoint the
    # deployment sets then joins its fingerprint (another server under the same model name answers otherwise)
    calls_llm: Callable[[RagConfig, Any], bool] = lambda c, judge: False
    # the stage scores answers by the QA set's language (data.language): a named one joins its fingerprint,
    # with its word segmenter's version where it has one (rag_core/metrics/languages.py: segmenter)
    reads_language: bool = False

    @property
    def partitioned(self) -> bool:
        return self.key is not None

    def own(
        self,
        c: RagConfig,
        judge: Any,
        version: Callable[[str | None], str | None] = model_version,
        llm_api_base: str | None = None,
        language: str | None = None,
    ) -> Any:
        """What the stage adds to a config's fingerprint: its settings, the version of every local model it
        runs (a folder replaced under the same path is another model), the language it scores answers in
        (with the version of that language's word segmenter, where it has one), and the LLM endpoint it
        calls when the deployment sets one."""
        settings = self.settings(c, judge)
        versions = {m: v for m in self.models(c) if (v := version(m))}
        settings = {**settings, "model_versions": versions} if versions else settings
        if language and self.reads_language:
            settings = {"settings": settings, "language": language}
            if rule := segmenter(language):  # ja, th, ko: the word segmenter too (none: as before)
                settings["segmenter"] = rule
        if llm_api_base and self.calls_llm(c, judge):
            return {"settings": settings, "llm_api_base": llm_api_base}
        return settings


def _pinned(settings: dict, plugin: str | None, embedder_plugin: str | None = None) -> dict:
    """A stage's settings with the package and version of each plug-in component it runs: upgrading one
    recomputes what it made. A built-in adds nothing, so fingerprints without plug-ins are as before."""
    pins = {"plugin": plugin, "embedder_plugin": embedder_plugin}
    return {**settings, **{k: v for k, v in pins.items() if v}}


def _chunking_settings(c: RagConfig, judge) -> dict:
    # the method, and a plug-in embedding model the chunker reads (semantic breakpoints, token sizes)
    method = CHUNKERS.origin(c.chunking.method).pin
    return _pinned(c.chunking.model_dump(), method, _embedder_pin(c.chunking.model))


def _embedder_pin(model: str | None) -> str | None:
    return EMBEDDERS.origin(model).pin if model and is_plugin_embedder(model) else None


def _embedding_settings(c: RagConfig, judge) -> dict:
    return _pinned(c.embedding.model_dump(), _embedder_pin(c.embedding.model))


def _index_settings(c: RagConfig, judge) -> dict:
    settings = c.index.model_dump()
    if rule := keyword_rule(c.index.bm25_analyzer):  # chinese, japanese, thai: the segmenter's version too
        settings["segmenter"] = rule  # (plain and english: as before)
    return _pinned(settings, STORES.origin(c.index.store).pin if c.index.store else None)


def _retrieval_key(c: RagConfig) -> str:
    return f"{c.retrieval.key}-k{c.fetch_k}"


HOP_FIELDS = ("max_hops", "hop_policy", "hop_model", "sufficiency_prompt", "refine_prompt")


def _retrieval_settings(c: RagConfig, judge) -> dict:
    # an unset query prompt (the built-in one) keeps the fingerprints retrievals had before it was a setting;
    # single-shot retrieval (max_hops 1) likewise, before hops were a setting
    unset = {"query_prompt"} if c.retrieval.query_prompt is None else set()
    if not c.retrieval.iterates:
        unset |= set(HOP_FIELDS)
    else:
        unset |= {f for f in ("sufficiency_prompt", "refine_prompt") if getattr(c.retrieval, f) is None}
    settings = {**c.retrieval.model_dump(exclude={"top_k", *unset}), "fetch_k": c.fetch_k}
    if c.index.store == "weaviate" and c.retrieval.reads_keywords:
        # keyword results on a BlockMax WAND collection rank every chunk since (resources/vector_stores/
        # weaviate_store.py): retrievals made before, which depended on the server's flush, are made again
        settings["weaviate_keyword_scan"] = 1
    return _pinned(settings, RETRIEVAL_MODES.origin(c.retrieval.mode).pin)


def _rerank_settings(c: RagConfig, judge) -> dict:
    unset = {"prompt"} if c.rerank.prompt is None else set()  # as the query prompt's
    settings = {**c.rerank.model_dump(exclude=unset), "top_k": c.retrieval.top_k}
    return _pinned(settings, RERANKERS.origin(c.rerank.method).pin)


def _answer_settings(c: RagConfig, judge) -> dict:
    # one sample keeps the fingerprints answers had before samples existed
    # (an unset compression prompt likewise, as before it was a setting)
    settings = c.generation.model_dump(
        exclude={
            *(["samples"] if c.generation.samples == 1 else []),
            *(["context_prompt"] if c.generation.context_prompt is None else []),
        }
        or None
    )
    return _pinned(settings, READERS.origin(c.generation.model).pin if c.generation.is_reader else None)


def _evaluation_settings(c: RagConfig, judge: JudgeSetting | None) -> Any:
    # the built-in prompt: its version, as before prompts could be given; another: its content's hash
    settings = (judge.model, judge.prompt_version) if judge else None
    # installed plug-in metrics are computed too: their packages' versions (none installed: as before)
    pins = {m: METRICS.origin(m).pin for m in METRICS.plugin_names()}
    return {"judge": settings, "plugin_metrics": pins} if pins else settings


STAGES: tuple[Stage, ...] = (
    Stage("corpus", None, (), 1),
    Stage("qa_set", None, ("corpus",), 2),  # 2: a duplicate question (normalized, same gold) counted once
    Stage(
        "chunksets",
        None,
        ("corpus",),
        2,
        key=lambda c: c.chunking.key,
        settings=_chunking_settings,
        models=lambda c: (c.chunking.model,),  # the tokenizer or the semantic chunker's embedder
    ),
    Stage(
        "embeddings",
        "chunksets",
        ("chunksets",),
        1,
        key=lambda c: c.embedding.key,
        settings=_embedding_settings,
        models=lambda c: (c.embedding.model,),
    ),
    Stage(
        "vector_index",
        "embeddings",
        ("embeddings", "chunksets"),
        2,  # 2: the BM25 analyzer (plain by default on every store; the language's where it segments one)
        key=lambda c: c.index.key,
        settings=_index_settings,
        external=True,
    ),
    Stage(
        "retrievals",
        "vector_index",
        ("vector_index", "chunksets", "qa_set"),
        # 4: the tie rule (score, doc id, chunk id); 5: ann_recall_at_k of the chunks the config returned
        5,
        key=_retrieval_key,
        settings=_retrieval_settings,
        calls_llm=lambda c, j: (
            c.retrieval.query_transform != "none"
            or (c.retrieval.iterates and c.retrieval.hop_policy == "llm")
        ),
    ),
    Stage(
        "rerankings",
        "retrievals",
        ("retrievals", "embeddings", "qa_set"),
        3,  # 3: an LLM's ranking read from passage numbers only, not a list's markers or prose numbers
        key=lambda c: f"{c.rerank.key}-k{c.retrieval.top_k}",
        settings=_rerank_settings,
        models=lambda c: (c.rerank.model,) if c.rerank.reranker.local_model else (),
        calls_llm=lambda c, j: c.rerank.reranker.calls_llm,
    ),
    Stage(
        "answers",
        "rerankings",
        ("rerankings", "chunksets", "corpus", "qa_set"),
        # 5: an empty completion is a failed call (retried, counted), not an empty answer; 6: `sample`;
        # 7: the extractive reader's words keep their combining marks (a Hindi or Thai word is not cut);
        # 8: a compression not in the passage's own words (the built-in prompt) is a counted fallback
        8,
        key=lambda c: c.generation.key,
        # one sample keeps the fingerprints answers had before samples existed
        # (an unset compression prompt likewise, as before it was a setting)
        settings=_answer_settings,
        failures="error",
        calls_llm=lambda c, j: not c.generation.is_reader or c.generation.context == "compress",
    ),
    Stage(
        "evaluations",
        "answers",
        ("answers", "rerankings", "chunksets", "embeddings", "qa_set"),
        # 8: a metric no query defines is null, not 0.0; 9: a question's language normalizes its answers;
        # 10: Japanese and Thai answers segmented into words, Korean into characters (a language column's too);
        # 11: a metric's interval needs enough questions that define it (not rows); 12: chunk cohesion and
        # separation on the chunkset's first 100 chunks (300 before)
        12,
        key=lambda c: "",  # one evaluation per answers partition: the same key
        settings=_evaluation_settings,
        failures="n_generation_errors",
        calls_llm=lambda c, j: j is not None,
        reads_language=True,
    ),
    # 3: latency within 2x counts as equally fast; 4: metrics no config defines are left out of the score;
    # 5: a short label per config (rag_core/planning/labels.py); 6: latency preferred only beyond the p95s'
    # intervals, the floor under Holm, configs compared on shared questions, judge failures not at random;
    # 7: a judge's failures set a config aside only where its metric is weighted; 8: speed between tied
    # configs first by the work a question costs, counted (rag_core/decision/work.py)
    Stage("leaderboard", None, ("evaluations", "qa_set"), 8, failures="n_generation_errors"),
    # the finalists on the holdout split (rag_core/decision/holdout.py); only in sweeps with decision.holdout > 0
    # 2: a judge's failures fail the confirmation only where its metric is weighted
    Stage("confirmation", None, ("leaderboard", "evaluations", "qa_set"), 2),
)

BY_NAME = {s.name: s for s in STAGES}
PARTITIONED = tuple(s for s in STAGES if s.partitioned)
CONFIG_STAGE = "evaluations"  # one partition per config


def stage(name: str) -> Stage:
    return BY_NAME[name]


def partition_key(name: str, c: RagConfig) -> str:
    """A config's key at a stage: its upstream stage's key, then this stage's own settings."""
    s = BY_NAME[name]
    own = s.key(c)
    if s.upstream is None:
        return own
    up = partition_key(s.upstream, c)
    return f"{up}__{own}" if own else up


def artifact_fingerprint(name: str, own: Any, inputs: dict[str, str]) -> str:
    """The content fingerprint of a stage's artifact: the stage, its code version, its own settings (or,
    for an input snapshot, the file's content hash) and the fingerprints of every artifact it read."""
    return fingerprint(name, BY_NAME[name].version, own, dict(sorted(inputs.items())))

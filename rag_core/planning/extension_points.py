"""The extension points a team can add a component to, each with its registry: what `rag-sweep components`
lists and what README's "Add a component" describes. A point's plug-ins register under its entry-point
group (the registry's `group`)."""

from __future__ import annotations

from dataclasses import dataclass

from rag_core.chunking.base import CHUNKERS
from rag_core.common.registry import PluginError, Registry, first_line
from rag_core.components.embedders import EMBEDDERS, is_plugin_embedder
from rag_core.components.readers import READERS
from rag_core.components.rerankers import RERANKERS
from rag_core.components.retrieval_modes import RETRIEVAL_MODES
from rag_core.components.stores import STORES
from rag_core.metrics.registry import METRICS
from rag_core.planning.spec import RagConfig
from rag_core.search.strategies import STRATEGIES


@dataclass(frozen=True)
class ExtensionPoint:
    name: str
    registry: Registry
    field: str  # where a sweep file names a component
    component: str  # what a plug-in's entry point names


EXTENSION_POINTS = (
    ExtensionPoint(
        "chunking methods",
        CHUNKERS,
        "chunking.method",
        "a split(text, chunk_size, chunk_overlap, measure) function, or a rag_core.chunking.base.Chunker",
    ),
    ExtensionPoint(
        "embedding models",
        EMBEDDERS,
        "embedding.model (besides the packaged model, a local folder or a litellm model)",
        "an encode(texts) -> vectors function, or a rag_core.components.embedders.Embedder",
    ),
    ExtensionPoint(
        "vector stores",
        STORES,
        "index.store, $RAG_VECTOR_STORE",
        "a resources.vector_stores.base.VectorStore subclass (a Dagster ConfigurableResource): backend, "
        "analyzers, files, open()",
    ),
    ExtensionPoint(
        "retrieval modes",
        RETRIEVAL_MODES,
        "retrieval.mode",
        "a search(searcher, query, vector, k) -> [Hit] function over the store's own searches, or a "
        "rag_core.components.retrieval_modes.RetrievalMode",
    ),
    ExtensionPoint(
        "rerankers",
        RERANKERS,
        "rerank.method",
        "an order(query, texts, k, model) function returning candidate indices best first, or a "
        "rag_core.components.rerankers.Reranker",
    ),
    ExtensionPoint(
        "answer generators",
        READERS,
        "generation.model (any other name is a litellm model)",
        "an answer(question, texts, titles) -> str function, or a rag_core.components.readers.Reader",
    ),
    ExtensionPoint(
        "metrics",
        METRICS,
        "weights, decision.min, gate.metric_margins",
        "a score(question) function, or a rag_core.metrics.registry.Metric",
    ),
    ExtensionPoint(
        "search strategies",
        STRATEGIES,
        "search.strategy",
        "a rag_core.search.strategies.Strategy subclass: propose() a candidate, observe() its objectives",
    ),
)


@dataclass(frozen=True)
class Row:
    point: str
    name: str
    origin: str
    description: str


def components(points: tuple[ExtensionPoint, ...] = EXTENSION_POINTS) -> list[Row]:
    """Every installed component: built-ins and plug-ins alike. A plug-in that fails to load is a row
    saying so (the listing is where a team looks for it), not an error."""
    rows = []
    for point in points:
        for name in point.registry.names():
            try:
                component = point.registry.get(name)
                description = getattr(component, "description", None)
                if not isinstance(description, str):  # a class (a vector store): its docstring's first line
                    description = first_line(component.__doc__)
                origin = str(point.registry.origin(name))
            except PluginError as e:
                description, origin = f"FAILS TO LOAD: {e}", "plug-in"
            rows.append(Row(point.name, name, origin, description))
    return rows


def plugins_line(points: tuple[ExtensionPoint, ...] = EXTENSION_POINTS) -> str | None:
    """'plug-ins: lines (chunking method, example-plugins 0.1.0); ...', or None when none is installed."""
    parts = [
        f"{name} ({point.registry.kind}, {point.registry.origin(name)})"
        for point in points
        for name in point.registry.plugin_names()
    ]
    return f"plug-ins: {'; '.join(parts)}" if parts else None


def config_plugins(c: RagConfig) -> list[str]:
    """The plug-ins (`package==version`) a config's components come from: what a shipped model of the
    config installs with it (the served pipeline embeds, searches, reranks and answers with them)."""

    def embedder(model: str | None) -> str | None:
        return EMBEDDERS.origin(model).pin if model and is_plugin_embedder(model) else None

    pins = {
        CHUNKERS.origin(c.chunking.method).pin,
        embedder(c.chunking.model),
        embedder(c.embedding.model),
        STORES.origin(c.index.store).pin if c.index.store else None,
        RETRIEVAL_MODES.origin(c.retrieval.mode).pin,
        RERANKERS.origin(c.rerank.method).pin,
        READERS.origin(c.generation.model).pin if c.generation.is_reader else None,
    }
    return sorted(p for p in pins if p)

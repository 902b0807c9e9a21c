"""The extension points a team can add a component to, each with its registry: what `rag-sweep components`
lists and what docs/guides/plugins.md describes. A point's plug-ins register under its entry-point
group (the registry's `group`)."""

from __future__ import annotations

from dataclasses import dataclass

from rag_core.chunking.base import CHUNKERS
from rag_core.common.registry import PluginError, Registry, first_line
from rag_core.components.embedders import EMBEDDERS
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


# where a config names a component that a plug-in may give -> the registry of those components
PLUGIN_FIELDS = {
    "chunking.method": CHUNKERS,
    "chunking.model": EMBEDDERS,
    "embedding.model": EMBEDDERS,
    "index.store": STORES,
    "retrieval.mode": RETRIEVAL_MODES,
    "rerank.method": RERANKERS,
    "generation.model": READERS,
}


def config_plugin_names(c: RagConfig) -> dict[str, dict[str, str]]:
    """field -> {name: `package==version`} of each component config `c` takes from a plug-in: what a sweep
    records when it runs and a shipped model's manifest lists, so that the name is not later taken for
    something else (a litellm model) once the plug-in is gone."""
    out: dict[str, dict[str, str]] = {}
    for field, registry in PLUGIN_FIELDS.items():
        section, attribute = field.split(".")
        name = getattr(getattr(c, section), attribute)
        if name and name in registry.plugin_names():
            out.setdefault(field, {})[name] = registry.origin(name).pin
    return out


def config_plugins(c: RagConfig) -> list[str]:
    """The plug-ins (`package==version`) a config's components come from: what a shipped model of the
    config installs with it (the served pipeline embeds, searches, reranks and answers with them)."""
    return sorted({pin for named in config_plugin_names(c).values() for pin in named.values()})


def _install(pin: str) -> str:
    return f"pip install '{pin}'"


def not_installed(names: dict[str, dict[str, str]], used: dict[str, set[str]] | None = None) -> list[str]:
    """One line for each plug-in component of `names` (`config_plugin_names`' form) that no installed
    plug-in gives now, naming the package to install; `used`: only the names of these fields (what a
    sweep's configs name now)."""
    lines = []
    for field, named in sorted(names.items()):
        registry = PLUGIN_FIELDS.get(field)
        for name, pin in sorted(named.items()):
            if used is not None and name not in used.get(field, set()):
                continue
            if registry is not None and name not in registry.plugin_names():
                package = pin.replace("==", " ")
                lines.append(
                    f"{field} {name!r} is the {registry.kind} of plug-in package {package}, which is not "
                    f"installed: {_install(pin)}"
                )
    return lines


def packages_not_installed(pins: list[str]) -> list[str]:
    """One line for each `package==version` not installed, or installed at another version."""
    from importlib.metadata import PackageNotFoundError, version

    lines = []
    for pin in pins:
        package, _, wanted = pin.partition("==")
        try:
            found = version(package)
        except PackageNotFoundError:
            lines.append(f"plug-in package {package} {wanted} is not installed: {_install(pin)}")
            continue
        if wanted and found != wanted:
            lines.append(f"plug-in package {package} is {found} here, not {wanted}: {_install(pin)}")
    return lines


def used_names(configs) -> dict[str, set[str]]:
    """field -> the names configs give it (PLUGIN_FIELDS' fields)."""
    used: dict[str, set[str]] = {}
    for c in configs:
        for field in PLUGIN_FIELDS:
            section, attribute = field.split(".")
            if name := getattr(getattr(c, section), attribute):
                used.setdefault(field, set()).add(name)
    return used

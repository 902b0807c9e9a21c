"""The vector stores a sweep can index into, by name (`index.store`, $RAG_VECTOR_STORE).

Planning reads two facts of a store without opening it (or importing its client, or Dagster): the BM25
analyzers it applies (`analyzers`, of rag_core/planning/spec.py's BM25_ANALYZERS) and where it keeps its data
(`files`, one of FILES). The built-ins' facts are registered here, each naming its class in
resources/vector_stores/, imported when a store is opened. A plug-in registers its class (a
`resources.vector_stores.base.VectorStore` subclass, a Dagster ConfigurableResource saying its `backend`,
`analyzers` and `files`) under the entry-point group `rag_sweep.vector_stores`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from rag_core.common.extras import component_extra, require
from rag_core.common.registry import Registry, first_line
from rag_core.retrieval import keywords

# where a store keeps its data:
# - anywhere: under the data dir, on a local disk or on object storage (it writes through fsspec-like URIs)
# - local: under the data dir on a local disk only (a data dir on object storage refuses it)
# - server: on its own server (a shipped model searches the collection there instead of rebuilding it)
FILES = ("anywhere", "local", "server")
NEEDS = ("backend", "analyzers", "files", "open")


@dataclass(frozen=True)
class Store:
    name: str
    description: str
    analyzers: tuple[str, ...]
    files: str  # one of FILES
    implementation: str | type  # "module:Class" (a built-in, imported when opened), or a plug-in's class
    # the approximate indexes it builds (rag_core/planning/ann.py ANN_TYPES); every store searches `exact`
    ann_types: tuple[str, ...] = ()

    def load(self) -> type:
        """The store's class (resources.vector_stores.base.VectorStore); a built-in whose extra is missing:
        MissingExtra naming it."""
        if isinstance(self.implementation, str):
            if extra := component_extra("vector stores", self.name):
                require(extra, f"the {self.name} vector store")
            module, _, name = self.implementation.partition(":")
            return getattr(importlib.import_module(module), name)
        return self.implementation


def _adapt(name: str, obj: object) -> Store:
    missing = [a for a in NEEDS if not hasattr(obj, a)]
    if missing:
        raise TypeError(
            f"it has no {', '.join(missing)}: a vector store is a resources.vector_stores.base.VectorStore "
            "subclass with a backend name, its analyzers, where it keeps its files and open()"
        )
    # a hook left undefined (misspelt, or never written) is refused here, when the plug-in is read, rather
    # than when a sweep first opens the store (resources/vector_stores/hooks.py states every hook)
    undefined = sorted(getattr(obj, "__abstractmethods__", ()))
    if undefined:
        raise TypeError(f"it does not define {', '.join(undefined)} (rag_sweep.plugins.StoreHooks)")
    if obj.backend != name:
        raise TypeError(f"its backend is {obj.backend!r} but its entry point is named {name!r}")
    if obj.files not in FILES:
        raise TypeError(f"files={obj.files!r}; expected one of {', '.join(FILES)}")
    description = first_line(obj.__doc__) or f"{name} (no description)"
    ann = tuple(getattr(obj, "ann_types", ()))  # optional: a plug-in without it searches exactly
    return Store(name, description, tuple(obj.analyzers), obj.files, obj, ann)


STORES = Registry(
    "vector store", "rag_sweep.vector_stores", modules=("rag_core.components.stores",), adapt=_adapt
)


def _builtin(
    name: str, cls: str, description: str, files: str = "local", analyzers=("plain",), ann_types=()
) -> None:
    implementation = f"resources.vector_stores.{name}_store:{cls}"
    STORES.register(name, Store(name, description, analyzers, files, implementation, ann_types))


# the analyzers that segment a language (the project cuts the words; every built-in indexes them split at
# spaces: resources/vector_stores/base.py)
SEGMENTING = tuple(keywords.SEGMENTING)  # chinese, japanese, thai

# tantivy's full-text index: simple tokenizer, plus a stemmer, stop words and ASCII folding for english
_builtin(
    "lancedb",
    "LanceDBStore",
    "LanceDB, embedded: its files under the data dir, local or on object storage; tantivy full-text",
    files="anywhere",
    analyzers=("plain", "english", *SEGMENTING),
    ann_types=("ivf_pq", "ivf_sq", "ivf_rq", "ivf_hnsw_sq"),
)
_builtin(
    "qdrant",
    "QdrantStore",
    "Qdrant's local mode, embedded; BM25 term weights computed here (no stemmer)",
    analyzers=("plain", *SEGMENTING),
)
_builtin(
    "chroma",
    "ChromaStore",
    "Chroma, embedded; an in-process BM25 (no stemmer)",
    analyzers=("plain", *SEGMENTING),
    ann_types=("hnsw",),  # its `exact` is Chroma's own HNSW at its defaults, as always
)
_builtin(
    "milvus",
    "MilvusLiteStore",
    "Milvus Lite, embedded; Milvus's own BM25 (standard tokenizer, lowercase; Milvus Lite has no stemmer)",
    analyzers=("plain", *SEGMENTING),
    ann_types=("hnsw",),  # through faiss-cpu
)
_builtin(
    "weaviate",
    "WeaviateStore",
    "Weaviate, a server (WEAVIATE_URL, WEAVIATE_GRPC_PORT, WEAVIATE_API_KEY); word tokenization, no stemmer",
    files="server",
    analyzers=("plain", *SEGMENTING),
    ann_types=("hnsw",),  # its `exact` is Weaviate's own HNSW at its defaults, as always
)


def store_analyzers(store: str) -> tuple[str, ...]:
    """The BM25 analyzers `store` can apply."""
    return tuple(STORES.get(store).analyzers)


def store_ann_types(store: str) -> tuple[str, ...]:
    """The index types `store` builds: `exact` and its approximate ones (Qdrant's local mode searches exactly)."""
    return ("exact", *STORES.get(store).ann_types)


def keeps_files(store: str) -> str:
    """Where `store` keeps its data: one of FILES."""
    return STORES.get(store).files

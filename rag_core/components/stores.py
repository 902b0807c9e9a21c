"""The vector stores a sweep can index into, by name (`index.store`, $RAG_VECTOR_STORE).

A store is a class (a `resources.vector_stores.base.VectorStore`) registered where it is defined; a plug-in
store registers under the entry-point group `rag_sweep.vector_stores`. Planning reads two facts of a store
without opening it: the BM25 analyzers it offers (`analyzers`, of rag_core/planning/spec.py's
BM25_ANALYZERS) and where it keeps its data (`files`, one of FILES). The built-in stores' modules are named
here and imported on first use, like a plug-in's, so planning stays free of their clients.
"""

from __future__ import annotations

from rag_core.common.registry import Registry

# where a store keeps its data:
# - anywhere: under the data dir, on a local disk or on object storage (it writes through fsspec-like URIs)
# - local: under the data dir on a local disk only (a data dir on object storage refuses it)
# - server: on its own server (a shipped model searches the collection there instead of rebuilding it)
FILES = ("anywhere", "local", "server")
NEEDS = ("backend", "analyzers", "files", "open")


def _adapt(name: str, obj: object):
    missing = [a for a in NEEDS if not hasattr(obj, a)]
    if missing:
        raise TypeError(
            f"it has no {', '.join(missing)}: a vector store is a resources.vector_stores.base.VectorStore "
            "subclass with a backend name, its analyzers, where it keeps its files and open()"
        )
    if obj.backend != name:
        raise TypeError(f"its backend is {obj.backend!r} but its entry point is named {name!r}")
    if obj.files not in FILES:
        raise TypeError(f"files={obj.files!r}; expected one of {', '.join(FILES)}")
    return obj


BUILTIN_MODULES = tuple(
    f"resources.vector_stores.{m}_store" for m in ("lancedb", "qdrant", "chroma", "milvus", "weaviate")
)
STORES = Registry(
    "vector store",
    "rag_sweep.vector_stores",
    modules=BUILTIN_MODULES,
    adapt=_adapt,
    order=lambda cls: BUILTIN_MODULES.index(cls.__module__),  # lancedb, the default, first
)


def store_analyzers(store: str) -> tuple[str, ...]:
    """The BM25 analyzers `store` can apply."""
    return tuple(STORES.get(store).analyzers)


def keeps_files(store: str) -> str:
    """Where `store` keeps its data: one of FILES."""
    return STORES.get(store).files

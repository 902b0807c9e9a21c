"""The hooks a vector store plug-in fills in, stated as one typed contract.

A store built on `EmbeddedStore` writes, counts, drops and searches one build; the aliases, atomic
publishing, filters and the public queries (`upsert`, `retrieve`, `info` ...) are the product's and call
these hooks. Their names begin with an underscore because a sweep never calls them, but they are the plug-in
API all the same (exported as `rag_sweep.plugins.StoreHooks`): their names and signatures are kept, and
`tests/test_plugins.py` holds `EmbeddedStore`'s own hooks to this Protocol, so neither can drift.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from rag_core.retrieval.retrieve import Hit
    from resources.vector_stores.base import Conditions

# the hooks a plug-in may leave out: EmbeddedStore or VectorStore has a default for each
OPTIONAL = ("_build_present", "_exact_vector_search")


class StoreHooks(Protocol):
    """What an `EmbeddedStore` subclass defines: every hook but those in `OPTIONAL` is required, and a
    plug-in store that leaves one out is refused when it is loaded, naming it."""

    @property
    def _root(self) -> str:
        """The folder holding the builds and the `_aliases` directory (an embedded store's `path`)."""
        ...

    def _build(
        self,
        physical: str,
        rows: list[dict],
        vectors: np.ndarray,
        fields: dict[str, str],
        values: list[dict],
        analyzer: str,
        ann=None,
    ) -> None:
        """Write a new build named `physical`: every row with its vector, the filterable `fields` (typed
        `values`), a keyword index with the BM25 `analyzer` and the approximate index `ann` (None: exact;
        a store with no `ann_types` may leave the parameter out)."""
        ...

    def _count(self, physical: str) -> int:
        """The rows a build holds (checked against the rows written before the build is published)."""
        ...

    def _build_present(self, physical: str) -> bool | None:
        """Whether a build's files are there, told without opening the store; None: only opening tells."""
        ...

    def _drop(self, physical: str) -> None:
        """Remove a build (and close what holds it open); a missing one is not an error."""
        ...

    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        """Top-k by cosine similarity (score = cosine, higher is better), under the parsed filter `where`;
        read the current build with `self._read(collection, run)`."""
        ...

    def _exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions
    ) -> list[Hit]:
        """Top-k by cosine comparing every row: an approximate index's reference (default: `_vector_search`,
        right for a store whose only search is exact)."""
        ...

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        """Top-k by BM25 over the indexed text (the query comes segmented as the build's texts were); only
        documents sharing a term with the query."""
        ...


def required_hooks() -> list[str]:
    """The hooks a plug-in must define, in the Protocol's order."""
    return [name for name in hook_names() if name not in OPTIONAL]


def hook_names() -> list[str]:
    """Every hook of the Protocol, in its order."""
    return [
        name
        for name, value in vars(StoreHooks).items()
        if not name.startswith("__") and (inspect.isfunction(value) or isinstance(value, property))
    ]

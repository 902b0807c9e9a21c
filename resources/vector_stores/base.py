"""The vector-store interface every backend implements.

Shaped after Weaviate's v4 client: a collection per index partition, objects carrying precomputed
vectors, `near_vector`, `bm25` and `hybrid(alpha)` queries. Rows are dicts with `chunk_id`, `doc_id`,
`text` (the indexed text) and `metadata` (a JSON string). Every query takes an optional `where` filter in
the seeds' format (rag_core/data/filters.py): it is validated here, against the collection's filterable
fields, and each backend translates the parsed conditions into its own filter language.

The keyword analyzers that segment a language (chinese, japanese, thai: rag_core/retrieval/keywords.py) are
applied here, not by a store: `keyword_rows` adds each row's segmented text (`keywords`), which the store
indexes for BM25 in a field of its own split only at spaces (its `text` stays the chunk's own, what hits
return), and the public keyword and hybrid searches segment the query the same way before a backend sees it
(`_segmentation` says which analyzer a collection was built with).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rag_core.components.retrieval_modes import RETRIEVAL_MODES, retrieval_mode
from rag_core.components.stores import store_analyzers
from rag_core.data.filters import Condition, check_fields, parse_filter
from rag_core.retrieval.fusion import fuse
from rag_core.retrieval.keywords import FIELD, keyword_text, segments
from rag_core.retrieval.retrieve import TIE_MARGIN, Hit, ranked

if TYPE_CHECKING:
    from rag_core.planning.ann import AnnIndex
    from resources.vector_stores import VectorStores

Conditions = tuple[Condition, ...]


class VectorStore(abc.ABC):
    """One collection per index partition. Implementations are Dagster ConfigurableResources, registered
    in rag_core.components.stores.STORES where they are defined (a plug-in: under the entry-point group
    `rag_sweep.vector_stores`)."""

    # a short name; part of the fingerprint of every artifact built on the store. A plug-in also says the BM25
    # analyzers it applies (`analyzers`, of spec.BM25_ANALYZERS) and where it keeps its data (`files`, one of
    # rag_core.components.stores.FILES); the built-ins' are registered in rag_core/components/stores.py
    backend: ClassVar[str]

    @classmethod
    def open(cls, root: Path, stores: VectorStores) -> VectorStore:
        """The store of a deployment: `root` is the data dir (an embedded store keeps its data in
        `root / backend`); `stores` holds the deployment's settings of the server stores."""
        return cls(path=str(root / cls.backend))

    # ---- what a backend implements ------------------------------------------------------------

    @abc.abstractmethod
    def upsert(
        self,
        collection: str,
        rows: list[dict],
        vectors: np.ndarray,
        analyzer: str = "plain",
        ann: AnnIndex | None = None,
    ) -> int:
        """Build the collection from rows and vectors (replacing any previous build, which readers keep
        seeing until the new one is complete), its keyword index with the BM25 `analyzer` (plain, english,
        or a segmenting one over the rows' `keywords`: keyword_rows; see rag_core/planning/spec.py) and its
        vector index `ann` (None or exact: as always; an approximate one of the store's `ann_types`, whose
        search settings its vector searches then use); return the count. A plug-in that builds no
        approximate index may leave `ann` out: it is passed only when approximate."""

    def _check_analyzer(self, analyzer: str) -> None:
        offered = store_analyzers(self.backend)
        if analyzer not in offered:
            raise ValueError(
                f"{self.backend} cannot apply the BM25 analyzer {analyzer!r}; it offers {', '.join(offered)}"
            )

    def _check_ann(self, ann: AnnIndex | None) -> None:
        from rag_core.components.stores import store_ann_types

        if ann is not None and ann.type not in store_ann_types(self.backend):
            offered = ", ".join(store_ann_types(self.backend))
            raise ValueError(f"{self.backend} has no {ann.type!r} index; it builds {offered}")

    def trained_ann(self, ann: AnnIndex, rows: int) -> dict:
        """The settings an approximate index over `rows` rows is actually built with: the asked ones, unless
        the store changes them (LanceDB trains fewer IVF partitions than asked on few rows). What the board,
        the label and the report state is checked against this."""
        return ann.settings()

    def _segmentation(self, collection: str) -> str | None:
        """The segmenting analyzer (chinese, japanese, thai) the collection's keyword index was built with,
        or None (plain, english). A store that offers none of them keeps this default."""
        return None

    def _keyword_query(self, collection: str, query: str) -> str:
        """The query as the collection's keyword index reads it: segmented as its texts were."""
        analyzer = self._segmentation(collection)
        return keyword_text(query, analyzer) if analyzer else query

    @abc.abstractmethod
    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        """Top-k by cosine similarity (score = cosine, higher is better)."""

    def _exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions
    ) -> list[Hit]:
        """Top-k by cosine similarity comparing every row, whatever index the collection was built with: the
        reference an approximate index's recall is measured against. A store whose only search is exact
        keeps this default."""
        return self._vector_search(collection, vector, k, where)

    @abc.abstractmethod
    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        """Top-k by BM25 over the indexed text; only documents sharing a term with the query."""

    def _hybrid_search(
        self,
        collection: str,
        query: str,
        vector: np.ndarray,
        k: int,
        alpha: float,
        fusion: str,
        where: Conditions,
    ) -> list[Hit]:
        """Fuse vector and keyword rankings (alpha = 1 is pure vector). Backends with native hybrid
        search override this; the default fuses candidate lists of 4k from each side."""
        pool = max(4 * k, 20)
        vec = self._vector_search(collection, vector, pool, where)
        kw = self._keyword_search(collection, query, pool, where)
        by_id = {h.chunk_id: h for h in kw + vec}
        fused = fuse(
            fusion, [(h.chunk_id, h.score) for h in vec], [(h.chunk_id, h.score) for h in kw], alpha, k
        )
        return [Hit(cid, by_id[cid].doc_id, by_id[cid].text, score) for cid, score in fused]

    @abc.abstractmethod
    def filter_fields(self, collection: str) -> dict[str, str]:
        """Filterable fields of the collection: name -> 'str' | 'int' | 'float' | 'bool'."""

    @abc.abstractmethod
    def delete(self, collection: str) -> None:
        """Drop the collection; a missing one is not an error."""

    @abc.abstractmethod
    def info(self, collection: str) -> dict:
        """{'exists': bool, 'count': int, 'backend': str, ...} for metadata and checks."""

    # ---- the public queries ---------------------------------------------------------------------

    def _conditions(self, collection: str, where: dict | None) -> Conditions:
        conditions = parse_filter(where)
        if conditions:
            check_fields(conditions, self.filter_fields(collection))
        return conditions

    def vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: dict | None = None
    ) -> list[Hit]:
        return self._vector_search(collection, vector, k, self._conditions(collection, where))

    def exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: dict | None = None
    ) -> list[Hit]:
        """vector_search comparing every row (an approximate index's reference: ann_recall_at_k)."""
        return self._exact_vector_search(collection, vector, k, self._conditions(collection, where))

    def keyword_search(self, collection: str, query: str, k: int, where: dict | None = None) -> list[Hit]:
        conditions = self._conditions(collection, where)
        return self._keyword_search(collection, self._keyword_query(collection, query), k, conditions)

    def hybrid_search(
        self,
        collection: str,
        query: str,
        vector: np.ndarray,
        k: int,
        alpha: float,
        fusion: str,
        where: dict | None = None,
    ) -> list[Hit]:
        conditions = self._conditions(collection, where)
        query = self._keyword_query(collection, query)
        return self._hybrid_search(collection, query, vector, k, alpha, fusion, conditions)

    def retrieve(
        self,
        collection: str,
        mode: str,
        query: str,
        vector: np.ndarray | None,
        k: int,
        alpha: float,
        fusion: str,
        where: dict | None = None,
    ) -> list[Hit]:
        """The top k of one retrieval mode (vector, bm25 or hybrid) in the tie rule's order (score, then doc
        id, then chunk id): TIE_MARGIN more candidates are fetched, so which of several tied candidates make
        the k-th place does not depend on the store or on k."""
        depth = k + TIE_MARGIN
        plugin = retrieval_mode(mode).search  # None for a built-in (UnknownComponent for an unknown mode)
        if plugin is not None:
            hits = plugin_hits(mode, plugin(Searcher(self, collection, where), query, vector, depth))
        elif mode == "vector":
            hits = self.vector_search(collection, vector, depth, where)
        elif mode == "bm25":
            hits = self.keyword_search(collection, query, depth, where)
        else:  # hybrid
            hits = self.hybrid_search(collection, query, vector, depth, alpha, fusion, where)
        return ranked(hits, k)


def brute_force(rows: list[dict], matrix: np.ndarray, vector: np.ndarray, k: int) -> list[Hit]:
    """The top k of `rows` (chunk_id, doc_id, text) by the cosine of their vectors (`matrix`) with `vector`:
    an exact search over vectors a store hands back, for a store whose own search is approximate."""
    if not rows:
        return []
    m = np.asarray(matrix, np.float32)
    q = np.asarray(vector, np.float32)
    norms = np.linalg.norm(m, axis=1) * max(float(np.linalg.norm(q)), 1e-12)
    scores = (m @ q) / np.maximum(norms, 1e-12)
    top = np.argsort(-scores, kind="stable")[:k]
    return [Hit(rows[i]["chunk_id"], rows[i]["doc_id"], rows[i]["text"], float(scores[i])) for i in top]


def keyword_rows(rows: list[dict], analyzer: str) -> list[dict]:
    """The rows to index: with a segmenting `analyzer`, each also holds its text segmented (`keywords`, words
    joined by spaces), which the store indexes for BM25 instead of `text`; with plain or english, as given."""
    if not segments(analyzer):
        return rows
    return [{**r, FIELD: keyword_text(r["text"], analyzer)} for r in rows]


def reserved_fields(analyzer: str) -> frozenset[str]:
    """Metadata names a build with `analyzer` keeps for itself (not filterable): `keywords` when it segments."""
    return frozenset({FIELD}) if segments(analyzer) else frozenset()


@dataclass(frozen=True)
class Searcher:
    """What a plug-in retrieval mode searches with: one collection of a store, under the config's filter."""

    store: VectorStore
    collection: str
    where: dict | None

    def vector(self, vector: np.ndarray, k: int) -> list[Hit]:
        return self.store.vector_search(self.collection, vector, k, self.where)

    def keyword(self, query: str, k: int) -> list[Hit]:
        return self.store.keyword_search(self.collection, query, k, self.where)

    def hybrid(
        self, query: str, vector: np.ndarray, k: int, alpha: float = 0.5, fusion: str = "rrf"
    ) -> list[Hit]:
        return self.store.hybrid_search(self.collection, query, vector, k, alpha, fusion, self.where)


def plugin_hits(mode: str, hits) -> list[Hit]:
    """A plug-in mode's hits, checked: a list of Hit with finite scores, else an error naming it."""
    if not isinstance(hits, list) or not all(isinstance(h, Hit) and math.isfinite(h.score) for h in hits):
        raise ValueError(
            f"retrieval mode {mode!r} ({RETRIEVAL_MODES.origin(mode)}) returned {hits!r:.200}: expected a list "
            "of rag_core.retrieval.retrieve.Hit with finite scores"
        )
    return hits

"""Weaviate (v4 client) implementation of the vector-store interface.

- One collection per index partition, no server-side vectorizer: vectors are precomputed and imported.
- Properties: chunk_id, doc_id, text (BM25-indexed), metadata (JSON string, not indexed for search). A
  segmenting analyzer's collection (chinese, japanese, thai) BM25-indexes `keywords` instead, the text as the
  project segmented it, with whitespace tokenization (the server's gse and kagome tokenizers need server
  flags, and would cut otherwise); its description names the analyzer, which segments the queries too.
- Queries: near_vector (cosine), bm25, native hybrid with alpha and fusion (rrf -> rankedFusion,
  weighted -> relativeScoreFusion); filters (rag_core/data/filters.py) become Weaviate `Filter`s on doc_id and
  the filterable metadata fields, which are typed properties (text, int, number, boolean).
- Rebuilds are invisible to readers: each build is a new physical collection and the partition's name is an
  alias moved to it once the import is complete (Weaviate >= 1.32); the old collection is dropped after.
- A partial batch import is an error listing the failed objects; a dead server fails fast naming the URL.
- BlockMax WAND, the keyword index of new collections since Weaviate 1.30 (unless the server runs with
  USE_INVERTED_SEARCHABLE=false), drops documents from a limited BM25 or hybrid query while their terms are
  in the memtable (weaviate#11780) or in a segment flushed since (weaviate#12022), until a compaction: right
  after a build, the top 3 of 0 questions in 60 equalled BM25's on a HotpotQA slice (58 in 60 once the
  memtable was flushed, a minute later). A query whose limit covers every object prunes nothing, so on such
  a collection of up to FULL_SCAN_MAX objects keyword and hybrid queries ask for every object and keep the
  top k; a larger one warns once that its keyword results may miss recent chunks.
"""

from __future__ import annotations

import threading
import time
import uuid
import warnings
from contextlib import contextmanager
from typing import ClassVar
from urllib.parse import urlparse

import dagster as dg
import numpy as np

from rag_core.data.filters import filterable_attributes, matches
from rag_core.retrieval.keywords import FIELD, segments
from resources.vector_stores.base import (
    Conditions,
    Hit,
    VectorStore,
    brute_force,
    keyword_rows,
    reserved_fields,
)


class WeaviateImportError(RuntimeError):
    pass


class WeaviateKeywordWarning(UserWarning):
    """A BlockMax WAND collection too large to query whole: its keyword results may miss recent chunks."""


FULL_SCAN_MAX = 20_000  # objects a BlockMax WAND collection's keyword and hybrid queries ask for at most
SCAN_PROPERTIES = ["chunk_id", "doc_id"]  # what a whole-collection scan returns of each object
SCAN_TTL_S = 30.0  # how long a collection's scan limit is kept (a rebuild elsewhere moves its alias)
# (url, collection) -> (the limit that makes a keyword query prune nothing or 0, the segmenting analyzer of
# its keyword index or None, when they were read)
_SCANS: dict[tuple[str, str], tuple[int, str | None, float]] = {}
ANALYZER_NOTE = "bm25_analyzer="  # the `keywords` property's description: this, then the analyzer
_SCANS_LOCK = threading.Lock()
_WARNED: set[tuple[str, str]] = set()


def _keywords(description: str | None) -> str | None:
    """The analyzer a property's description names when it is a segmented `keywords` property, else None."""
    if description and description.startswith(ANALYZER_NOTE):
        return description.removeprefix(ANALYZER_NOTE)
    return None


class WeaviateStore(dg.ConfigurableResource, VectorStore):
    """Weaviate, a server (WEAVIATE_URL, WEAVIATE_GRPC_PORT, WEAVIATE_API_KEY); word tokenization, no stemmer"""

    backend: ClassVar[str] = "weaviate"
    url: str = "http://127.0.0.1:8080"
    grpc_port: int = 50051
    api_key: str | None = None
    init_timeout_s: float = 5.0
    query_timeout_s: float = 30.0
    insert_timeout_s: float = 120.0
    batch_size: int = 200

    @classmethod
    def open(cls, root, stores) -> WeaviateStore:
        # outside a Dagster run (the runner's checks) an EnvVar is still the variable's name
        url = stores.weaviate_url
        return cls(
            url=url.get_value() if isinstance(url, dg.EnvVar) else url,
            grpc_port=stores.weaviate_grpc_port,
            api_key=stores.weaviate_api_key,
        )

    @classmethod
    def from_env(cls) -> WeaviateStore:
        from resources.environment import text, weaviate_settings

        url, grpc_port, _ = weaviate_settings()
        return cls(url=url, grpc_port=grpc_port, api_key=text("WEAVIATE_API_KEY"))

    @contextmanager
    def _client(self):
        import weaviate
        from weaviate.classes.init import AdditionalConfig, Auth, Timeout

        u = urlparse(self.url)
        secure = u.scheme == "https"
        try:
            client = weaviate.connect_to_custom(
                http_host=u.hostname,
                http_port=u.port or (443 if secure else 80),
                http_secure=secure,
                grpc_host=u.hostname,
                grpc_port=self.grpc_port,
                grpc_secure=secure,
                auth_credentials=Auth.api_key(self.api_key) if self.api_key else None,
                additional_config=AdditionalConfig(
                    timeout=Timeout(
                        init=self.init_timeout_s, query=self.query_timeout_s, insert=self.insert_timeout_s
                    )
                ),
            )
        except Exception as e:
            raise ConnectionError(
                f"cannot reach Weaviate at {self.url} (gRPC port {self.grpc_port}): {type(e).__name__}: {e}"
            ) from e
        try:
            yield client
        finally:
            client.close()

    # ---- writes -----------------------------------------------------------------------------------

    def upsert(
        self, collection: str, rows: list[dict], vectors: np.ndarray, analyzer: str = "plain", ann=None
    ) -> int:
        from weaviate.classes.config import (
            Configure,
            DataType,
            Property,
            StopwordsPreset,
            Tokenization,
            VectorDistances,
        )

        self._check_analyzer(analyzer)
        ann = ann if ann is not None and ann.approximate else None
        self._check_ann(ann)
        graph = {}  # exact: Weaviate's HNSW at its own defaults, as always
        if ann is not None:
            s = ann.settings()
            graph = {"max_connections": s["m"], "ef_construction": s["ef_construction"], "ef": s["ef"]}

        physical = f"{collection}_b{uuid.uuid4().hex[:8]}"
        fields, values = filterable_attributes(rows, reserved_fields(analyzer))
        rows = keyword_rows(rows, analyzer)
        segmented = segments(analyzer)
        keywords = (
            [  # the project's words, lowercased: split at whitespace only
                Property(
                    name=FIELD,
                    data_type=DataType.TEXT,
                    tokenization=Tokenization.WHITESPACE,
                    description=f"{ANALYZER_NOTE}{analyzer}",
                )
            ]
            if segmented
            else []
        )
        kinds = {"str": DataType.TEXT, "int": DataType.INT, "float": DataType.NUMBER, "bool": DataType.BOOL}
        extra = [
            Property(
                name=name,
                data_type=kinds[kind],
                tokenization=Tokenization.FIELD if kind == "str" else None,
                index_searchable=False,
            )
            for name, kind in fields.items()
            if name != "doc_id"
        ]
        with self._client() as client:
            coll = client.collections.create(
                physical,
                vector_config=Configure.Vectors.self_provided(
                    vector_index_config=Configure.VectorIndex.hnsw(
                        distance_metric=VectorDistances.COSINE, **graph
                    )
                ),
                # the `plain` analyzer: word tokenization (lowercased runs of letters and digits), no
                # stop words (Weaviate's default preset drops English ones)
                inverted_index_config=Configure.inverted_index(stopwords_preset=StopwordsPreset.NONE),
                properties=[
                    Property(
                        name="chunk_id",
                        data_type=DataType.TEXT,
                        tokenization=Tokenization.FIELD,
                        index_searchable=False,
                    ),
                    Property(
                        name="doc_id",
                        data_type=DataType.TEXT,
                        tokenization=Tokenization.FIELD,
                        index_searchable=False,
                    ),
                    Property(
                        name="text",
                        data_type=DataType.TEXT,
                        tokenization=Tokenization.WORD,
                        **({"index_searchable": False} if segmented else {}),
                    ),
                    *keywords,
                    Property(
                        name="metadata",
                        data_type=DataType.TEXT,
                        index_searchable=False,
                        index_filterable=False,
                    ),
                    *extra,
                ],
            )
            try:
                with coll.batch.fixed_size(batch_size=self.batch_size, concurrent_requests=2) as batch:
                    for row, vec, attrs in zip(rows, vectors, values, strict=True):
                        batch.add_object(
                            properties={
                                **attrs,
                                "chunk_id": row["chunk_id"],
                                "doc_id": row["doc_id"],
                                "text": row["text"],
                                "metadata": row.get("metadata", "{}"),
                                **({FIELD: row[FIELD]} if segmented else {}),
                            },
                            vector=np.asarray(vec, dtype=np.float32).tolist(),
                            uuid=uuid.uuid5(uuid.NAMESPACE_URL, row["chunk_id"]),
                        )
                failed = coll.batch.failed_objects
                if failed:
                    sample = "; ".join(
                        f"{f.object_.properties.get('chunk_id')}: {f.message}" for f in failed[:5]
                    )
                    raise WeaviateImportError(
                        f"{collection}: {len(failed)} of {len(rows)} objects failed to import: {sample}"
                    )
                count = coll.aggregate.over_all(total_count=True).total_count
                if count != len(rows):
                    raise WeaviateImportError(f"{collection}: imported {count} of {len(rows)} objects")
            except BaseException:
                client.collections.delete(physical)
                raise
            previous = client.alias.get(alias_name=collection)
            if previous is None:
                client.alias.create(alias_name=collection, target_collection=physical)
            else:
                client.alias.update(alias_name=collection, new_target_collection=physical)
                client.collections.delete(previous.collection)
        with _SCANS_LOCK:  # another build: its count and keyword index are read again
            _SCANS.pop((self.url, collection), None)
        return len(rows)

    def delete(self, collection: str) -> None:
        with _SCANS_LOCK:
            _SCANS.pop((self.url, collection), None)
        with self._client() as client:
            alias = client.alias.get(alias_name=collection)
            if alias is not None:
                client.alias.delete(alias_name=collection)
                client.collections.delete(alias.collection)
            elif client.collections.exists(collection):
                client.collections.delete(collection)

    # ---- reads ------------------------------------------------------------------------------------

    @staticmethod
    def _filters(where: Conditions):
        if not where:
            return None
        from weaviate.classes.query import Filter

        method = {
            "$gt": "greater_than",
            "$gte": "greater_or_equal",
            "$lt": "less_than",
            "$lte": "less_or_equal",
        }
        parts = []
        for c in where:
            prop = Filter.by_property(c.field)
            if c.op == "$eq":
                parts.append(prop.equal(c.value))
            elif c.op == "$in":  # any_of equalities: contains_any is meant for array properties
                parts.append(Filter.any_of([Filter.by_property(c.field).equal(v) for v in c.value]))
            else:
                parts.append(getattr(prop, method[c.op])(c.value))
        return parts[0] if len(parts) == 1 else Filter.all_of(parts)

    def filter_fields(self, collection: str) -> dict[str, str]:
        kinds = {"text": "str", "int": "int", "number": "float", "boolean": "bool"}
        with self._client() as client:
            props = client.collections.get(collection).config.get().properties
        fields = {p.name: kinds.get(str(p.data_type.value)) for p in props if not _keywords(p.description)}
        return {k: v for k, v in fields.items() if v and k not in ("chunk_id", "text", "metadata")}

    @staticmethod
    def _hits(objects, score) -> list[Hit]:
        return [
            Hit(o.properties["chunk_id"], o.properties["doc_id"], o.properties["text"], score(o.metadata))
            for o in objects
        ]

    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        from weaviate.classes.query import MetadataQuery

        with self._client() as client:
            res = client.collections.get(collection).query.near_vector(
                near_vector=np.asarray(vector, dtype=np.float32).tolist(),
                limit=k,
                filters=self._filters(where),
                return_metadata=MetadataQuery(distance=True),
            )
        return self._hits(res.objects, lambda m: 1.0 - float(m.distance))

    def _exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions
    ) -> list[Hit]:
        # Weaviate's search is its HNSW graph: every object's vector is read back and compared here
        with self._client() as client:
            objects = [
                o
                for o in client.collections.get(collection).iterator(include_vector=True)
                if matches(where, o.properties)
            ]
        rows = [{k: o.properties[k] for k in ("chunk_id", "doc_id", "text")} for o in objects]
        matrix = np.asarray([o.vector["default"] for o in objects], np.float32).reshape(len(objects), -1)
        return brute_force(rows, matrix, vector, k)

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        from weaviate.classes.query import MetadataQuery

        with self._client() as client:
            scan, analyzer = self._keyword_facts(client, collection)
            coll = client.collections.get(collection)
            res = coll.query.bm25(
                query=query,
                query_properties=[FIELD if analyzer else "text"],
                limit=max(k, scan),
                filters=self._filters(where),
                return_metadata=MetadataQuery(score=True),
                return_properties=SCAN_PROPERTIES if scan > k else None,
            )
            return self._top(coll, res.objects, k, scan > k)

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
        from weaviate.classes.query import HybridFusion, MetadataQuery

        fusion_type = {"rrf": HybridFusion.RANKED, "weighted": HybridFusion.RELATIVE_SCORE}[fusion]
        with self._client() as client:
            scan, analyzer = self._keyword_facts(client, collection)
            coll = client.collections.get(collection)
            res = coll.query.hybrid(
                query=query,
                vector=np.asarray(vector, dtype=np.float32).tolist(),
                alpha=alpha,
                fusion_type=fusion_type,
                query_properties=[FIELD if analyzer else "text"],
                limit=max(k, scan),
                filters=self._filters(where),
                return_metadata=MetadataQuery(score=True),
                return_properties=SCAN_PROPERTIES if scan > k else None,
            )
            return self._top(coll, res.objects, k, scan > k)

    def _top(self, coll, objects, k: int, scanned: bool) -> list[Hit]:
        """The first k objects of a ranked reply as hits; a whole-collection scan asked for ids only, so the
        texts of those k are fetched now (one request, not every object's text)."""
        top = objects[:k]
        if scanned and top:
            texts = {
                o.uuid: o.properties["text"]
                for o in coll.query.fetch_objects_by_ids([o.uuid for o in top], limit=len(top)).objects
            }
            for o in top:
                o.properties["text"] = texts[o.uuid]
        return self._hits(top, lambda m: float(m.score))

    def _schema(self, physical: str) -> dict:
        """The collection's schema over REST: it says whether its keyword index is BlockMax WAND
        (`usingBlockMaxWAND`), which the client's typed configuration does not carry."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        reply = httpx.get(
            f"{self.url.rstrip('/')}/v1/schema/{physical}", headers=headers, timeout=self.query_timeout_s
        )
        reply.raise_for_status()
        return reply.json()

    def _segmentation(self, collection: str) -> str | None:
        with _SCANS_LOCK:
            known = _SCANS.get((self.url, collection))
        if known is not None and time.monotonic() - known[2] < SCAN_TTL_S:
            return known[1]
        with self._client() as client:
            return self._keyword_facts(client, collection)[1]

    def _keyword_facts(self, client, collection: str) -> tuple[int, str | None]:
        """(the object count of a BlockMax WAND collection of up to FULL_SCAN_MAX objects, else 0: a keyword
        query asking for that many prunes nothing, module doc; the segmenting analyzer of its keyword index,
        else None), read once per SCAN_TTL_S."""
        key = (self.url, collection)
        with _SCANS_LOCK:
            known = _SCANS.get(key)
        if known is not None and time.monotonic() - known[2] < SCAN_TTL_S:
            return known[0], known[1]
        alias = client.alias.get(alias_name=collection)
        physical = alias.collection if alias else collection
        schema = self._schema(physical)
        props = [p for p in schema.get("properties", []) if p.get("name") == FIELD]
        analyzer = _keywords(props[0].get("description")) if props else None
        limit = 0
        if schema.get("invertedIndexConfig", {}).get("usingBlockMaxWAND", False):
            count = client.collections.get(physical).aggregate.over_all(total_count=True).total_count
            if count <= FULL_SCAN_MAX:
                limit = count
            elif key not in _WARNED:
                _WARNED.add(key)
                warnings.warn(
                    f"Weaviate collection {collection} ({count} objects) uses BlockMax WAND, which drops "
                    "recently indexed chunks from keyword and hybrid results until the server compacts "
                    "(weaviate#11780): start Weaviate with USE_INVERTED_SEARCHABLE=false for exact results",
                    WeaviateKeywordWarning,
                    stacklevel=3,
                )
        with _SCANS_LOCK:
            _SCANS[key] = (limit, analyzer, time.monotonic())
        return limit, analyzer

    def info(self, collection: str) -> dict:
        with self._client() as client:
            alias = client.alias.get(alias_name=collection)
            physical = (
                alias.collection if alias else (collection if client.collections.exists(collection) else None)
            )
            if physical is None:
                return {"exists": False, "count": 0, "backend": "weaviate", "url": self.url}
            count = client.collections.get(physical).aggregate.over_all(total_count=True).total_count
            meta = client.get_meta()
        return {
            "exists": True,
            "count": count,
            "backend": "weaviate",
            "url": self.url,
            "collection": physical,
            "server_version": meta.get("version"),
        }

"""Embedded default store: LanceDB (Arrow-native, no server), one table per index partition.

Keyword search is LanceDB's native full-text index, which ranks by BM25: over `text` (plain, english), or, for
a segmenting analyzer (chinese, japanese, thai), over a `keywords` column of the text as the project segmented
it, split at spaces only (`whitespace`, nothing else). LanceDB OSS cannot rename a
table, so a collection is an alias (embedded.AliasDirectory) to the latest complete build. Filterable
metadata fields become typed columns; filters become SQL `WHERE` clauses applied before the search.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import ClassVar

import dagster as dg
import numpy as np
import pyarrow as pa

from rag_core.retrieval.keywords import FIELD, segments
from resources.storage import lance_storage_options
from resources.vector_stores.base import Conditions, Hit
from resources.vector_stores.embedded import EmbeddedStore

ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
SQL_OPS = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _fts_query(query: str) -> str:
    # The FTS parser treats punctuation as syntax; keep words only.
    return " ".join(re.findall(r"\w+", query))


def _literal(v) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def sql_where(where: Conditions) -> str | None:
    parts = []
    for c in where:
        col = f"`{c.field}`"
        if c.op == "$in":
            parts.append(f"{col} IN ({', '.join(_literal(v) for v in c.value)})")
        else:
            parts.append(f"{col} {SQL_OPS[c.op]} {_literal(c.value)}")
    return " AND ".join(parts) or None


def _vector_index(ann):
    """LanceDB's index config of an approximate index (rag_core/planning/ann.py), by cosine distance; unset
    sizes are LanceDB's own choice from the row count."""
    import lancedb

    s = ann.settings()
    if ann.type == "ivf_pq":
        return lancedb.index.IvfPq(
            distance_type="cosine",
            num_partitions=s.get("num_partitions"),
            num_sub_vectors=s.get("num_sub_vectors"),
        )
    if ann.type == "ivf_sq":  # one byte a dimension: no codebooks to train
        return lancedb.index.IvfSq(distance_type="cosine", num_partitions=s.get("num_partitions"))
    if ann.type == "ivf_rq":  # RaBitQ: num_bits a dimension of a randomly rotated vector
        return lancedb.index.IvfRq(
            distance_type="cosine", num_partitions=s.get("num_partitions"), num_bits=s["num_bits"]
        )
    return lancedb.index.IvfHnswSq(  # IVF partitions, each an HNSW graph of scalar-quantized vectors
        distance_type="cosine",
        num_partitions=s.get("num_partitions"),
        m=s["m"],
        ef_construction=s["ef_construction"],
    )


# Searches go through LanceDB's public async API on an event loop of the searching thread. Its sync API sends
# every query to a background loop thread and waits for the answer there: ~3 ms of CPU a search, as much as a
# search of a small index itself (1,384 searches in the example). A build (physical table) never changes once
# published, so one open handle serves every query of the process.
_OPEN: dict[tuple[str, str], object] = {}
_THREAD = threading.local()


class _ThreadLoop:
    """The searching thread's event loop, closed with the thread; one of a parent process (a fork) is left
    alone, its files shared with the parent."""

    def __init__(self):
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()

    def __del__(self):
        if self.pid == os.getpid():
            self.loop.close()


def _run(make: Callable[[], Coroutine]):
    """`make()`'s coroutine run to its end on this thread's loop; on a thread of its own where this thread
    runs a loop already (a notebook's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        holder = getattr(_THREAD, "loop", None)
        if holder is None or holder.pid != os.getpid():
            holder = _THREAD.loop = _ThreadLoop()
        return holder.loop.run_until_complete(make())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_run, make).result()


class LanceDBStore(dg.ConfigurableResource, EmbeddedStore):
    """LanceDB, embedded: its files under the data dir, local or on object storage; tantivy full-text"""

    backend: ClassVar[str] = "lancedb"
    uri: str

    @classmethod
    def open(cls, root, stores) -> LanceDBStore:
        return cls(uri=str(root / cls.backend))

    def _db(self):
        import lancedb

        return lancedb.connect(self.uri, storage_options=lance_storage_options(self.uri))

    @property
    def _root(self) -> str:
        return self.uri

    def _build(
        self,
        physical: str,
        rows: list[dict],
        vectors,
        fields: dict,
        values: list[dict],
        analyzer: str,
        ann=None,
    ) -> None:
        import lancedb

        dim = vectors.shape[1]
        columns = {
            "chunk_id": pa.array([r["chunk_id"] for r in rows], pa.string()),
            "doc_id": pa.array([r["doc_id"] for r in rows], pa.string()),
            "text": pa.array([r["text"] for r in rows], pa.string()),
            "metadata": pa.array([r.get("metadata", "{}") for r in rows], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(np.ascontiguousarray(vectors, np.float32).reshape(-1)), dim
            ),
        }
        for name, kind in fields.items():
            if name != "doc_id":
                columns[name] = pa.array([v.get(name) for v in values], ARROW_TYPES[kind])
        segmented = segments(analyzer)
        if segmented:
            columns[FIELD] = pa.array([r[FIELD] for r in rows], pa.string())
        tbl = self._db().create_table(physical, pa.table(columns))
        if ann is not None:
            tbl.create_index("vector", config=_vector_index(ann))
        if segmented:  # words the project cut, lowercased: split at spaces, kept whole however long
            fts = lancedb.index.FTS(
                base_tokenizer="whitespace",
                max_token_length=None,
                lower_case=False,
                stem=False,
                remove_stop_words=False,
                ascii_folding=False,
            )
            tbl.create_index(FIELD, config=fts)
            return
        english = analyzer == "english"
        fts = lancedb.index.FTS(
            base_tokenizer="simple",  # runs of letters and digits, as every store's `plain`
            lower_case=True,
            stem=english,
            remove_stop_words=english,
            ascii_folding=english,
            language="English",
        )
        tbl.create_index("text", config=fts)

    def _table(self, physical: str):
        """The build's table, opened once (LanceDB's AsyncTable)."""
        key = (self.uri, physical)
        if key not in _OPEN:
            import lancedb

            async def open_table():
                db = await lancedb.connect_async(self.uri, storage_options=lance_storage_options(self.uri))
                return await db.open_table(physical)

            _OPEN[key] = _run(open_table)
        return _OPEN[key]

    def _read_table(self, collection: str, query) -> list[dict]:
        """The rows `query(table)` (an async query of the collection's current build) finds."""
        return self._read(collection, lambda physical: _run(lambda: query(self._table(physical)).to_list()))

    def _count(self, physical: str) -> int:
        return self._db().open_table(physical).count_rows()

    def _build_present(self, physical: str) -> bool | None:
        # LanceDB keeps a table as `<uri>/<name>.lance/` with its versions' manifests in `_versions/`: looking
        # at the folder spares an unchanged rerun importing lancedb (~2 s) only to count rows
        if "://" in self.uri:
            return None  # object storage: ask LanceDB
        return (Path(self.uri) / f"{physical}.lance" / "_versions").is_dir()

    # LanceDB's IVF-PQ trains its partitions on at least this many rows each (its IVF sample rate), so on few
    # rows it trains fewer partitions than asked ("training 7 of the 32 requested IVF partitions" in its log)
    PQ_ROWS_PER_PARTITION: ClassVar[int] = 256

    def trained_ann(self, ann, rows: int) -> dict:
        settings = ann.settings()
        asked = settings.get("num_partitions")
        if ann.type == "ivf_pq" and asked and asked > max(1, rows // self.PQ_ROWS_PER_PARTITION):
            settings["num_partitions"] = max(1, rows // self.PQ_ROWS_PER_PARTITION)
        return settings

    def _build_folder(self, physical: str) -> Path | None:
        return None if "://" in self.uri else Path(self.uri) / f"{physical}.lance"

    def _drop(self, physical: str) -> None:
        _OPEN.pop((self.uri, physical), None)
        if physical in self._db().table_names():  # a build that failed before its table existed
            self._db().drop_table(physical)

    def _vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions, exact: bool = False
    ) -> list[Hit]:
        ann = {} if exact else self._ann(collection)

        def run(table):
            q = (
                table.query()
                .nearest_to(np.asarray(vector, np.float32))
                .column("vector")
                .distance_type("cosine")
            )
            if exact:
                q = q.bypass_vector_index()
            if "nprobes" in ann:
                q = q.nprobes(ann["nprobes"])
            if "ef" in ann:  # a graph search keeps at least k candidates (as Chroma's and Milvus's do)
                q = q.ef(max(ann["ef"], k))
            if "refine_factor" in ann:
                q = q.refine_factor(ann["refine_factor"])
            if where:  # applied before the search (an async query's default)
                q = q.where(sql_where(where))
            return q.limit(k).select(["chunk_id", "doc_id", "text", "_distance"])

        res = self._read_table(collection, run)
        return [Hit(r["chunk_id"], r["doc_id"], r["text"], 1.0 - float(r["_distance"])) for r in res]

    def _exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions
    ) -> list[Hit]:
        return self._vector_search(collection, vector, k, where, exact=True)

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        # a segmented query is words of letters, digits and marks already: no syntax, nothing to drop
        segmented = self._segmentation(collection) is not None
        q_text = query.strip() if segmented else _fts_query(query)
        if not q_text:
            return []

        def run(table):
            q = table.query().nearest_to_text(q_text, columns=FIELD if segmented else None)
            if where:
                q = q.where(sql_where(where))
            return q.limit(k).select(["chunk_id", "doc_id", "text", "_score"])

        res = self._read_table(collection, run)
        return [Hit(r["chunk_id"], r["doc_id"], r["text"], float(r["_score"])) for r in res]

"""Embedded default store: LanceDB (Arrow-native, no server), one table per index partition.

Keyword search is LanceDB's native full-text index, which ranks by BM25. LanceDB OSS cannot rename a
table, so a collection is an alias: each build writes a new physical table, and an alias file (replaced
atomically) points readers at the finished one; the previous table is dropped afterwards. Readers never
see a half-built index.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import ClassVar

import dagster as dg
import numpy as np
import pyarrow as pa

from resources.vector_stores.base import Hit, VectorStore


def _fts_query(query: str) -> str:
    # The FTS parser treats punctuation as syntax; keep words only.
    return " ".join(re.findall(r"\w+", query))


class LanceDBStore(dg.ConfigurableResource, VectorStore):
    backend: ClassVar[str] = "lancedb"
    uri: str

    def _db(self):
        import lancedb

        return lancedb.connect(self.uri)

    def upsert(self, collection: str, rows: list[dict], vectors: np.ndarray) -> int:
        db = self._db()
        dim = vectors.shape[1]
        table = pa.table(
            {
                "chunk_id": pa.array([r["chunk_id"] for r in rows], pa.string()),
                "doc_id": pa.array([r["doc_id"] for r in rows], pa.string()),
                "text": pa.array([r["text"] for r in rows], pa.string()),
                "metadata": pa.array([r.get("metadata", "{}") for r in rows], pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.ascontiguousarray(vectors, np.float32).reshape(-1)), dim
                ),
            }
        )
        physical = f"{collection}__{uuid.uuid4().hex[:8]}"
        tbl = db.create_table(physical, table)
        import lancedb

        tbl.create_index("text", config=lancedb.index.FTS())
        previous = self._resolve(collection)
        self._point_alias(collection, physical)
        if previous:
            db.drop_table(previous)
        return table.num_rows

    def _alias_path(self, collection: str) -> Path:
        return Path(self.uri) / "_aliases" / f"{collection}.json"

    def _resolve(self, collection: str) -> str | None:
        path = self._alias_path(collection)
        return json.loads(path.read_text())["table"] if path.exists() else None

    def _point_alias(self, collection: str, physical: str) -> None:
        path = self._alias_path(collection)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{uuid.uuid4().hex[:6]}.tmp")
        tmp.write_text(json.dumps({"table": physical}))
        os.replace(tmp, path)

    def _open(self, collection: str):
        physical = self._resolve(collection)
        if physical is None:
            raise LookupError(f"LanceDB collection {collection!r} does not exist under {self.uri}")
        return self._db().open_table(physical)

    def vector_search(self, collection: str, vector: np.ndarray, k: int) -> list[Hit]:
        res = (
            self._open(collection)
            .search(np.asarray(vector, np.float32), vector_column_name="vector")
            .distance_type("cosine")
            .limit(k)
            .select(["chunk_id", "doc_id", "text", "_distance"])
            .to_list()
        )
        return [Hit(r["chunk_id"], r["doc_id"], r["text"], 1.0 - float(r["_distance"])) for r in res]

    def keyword_search(self, collection: str, query: str, k: int) -> list[Hit]:
        q = _fts_query(query)
        if not q:
            return []
        res = (
            self._open(collection)
            .search(q, query_type="fts")
            .limit(k)
            .select(["chunk_id", "doc_id", "text", "_score"])
            .to_list()
        )
        return [Hit(r["chunk_id"], r["doc_id"], r["text"], float(r["_score"])) for r in res]

    def delete(self, collection: str) -> None:
        physical = self._resolve(collection)
        self._alias_path(collection).unlink(missing_ok=True)
        if physical:
            self._db().drop_table(physical)

    def info(self, collection: str) -> dict:
        physical = self._resolve(collection)
        if physical is None:
            return {"exists": False, "count": 0, "backend": "lancedb"}
        count = self._db().open_table(physical).count_rows()
        return {"exists": True, "count": count, "backend": "lancedb", "table": physical}

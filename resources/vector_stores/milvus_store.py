"""Milvus Lite (the milvus-lite wheel behind `pymilvus.MilvusClient("<file>.db")`), no server.

- Each build is its own folder holding one Milvus Lite file (a file admits one client, i.e. one
  process); the collection name is an alias (embedded.AliasDirectory) moved to the finished build.
- Schema: chunk_id (primary key), doc_id, text (analyzed), metadata (JSON string), a dense vector (FLAT
  index, cosine: exact search) and a sparse vector filled by Milvus's own BM25 function over `text`. A
  segmenting analyzer's build (chinese, japanese, thai) analyzes a `keywords` field instead (`text` is then
  not analyzed): Milvus Lite has no whitespace tokenizer (standard and jieba only), and the standard one's
  Unicode word rules cut ideographs, kana and Thai letters one by one, so the field holds each of the
  project's words as one token of ASCII letters and digits (`_word_tokens`): the same words, the same counts,
  the same BM25 as the other stores.
- Filterable metadata fields are dynamic fields; filters become Milvus boolean expressions
  (`year >= 2000 and doc_id in ["a", "b"]`). Strong consistency: a search sees every insert.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import ClassVar

import numpy as np

from rag_core.retrieval.keywords import FIELD, segments
from resources.vector_stores.base import Conditions, Hit, brute_force
from resources.vector_stores.embedded import ClientCache, SingleClientStore

NAME = "chunks"
FILE = "milvus.db"
MAX_VARCHAR = 65535
EXPR_OPS = {"$eq": "==", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
OUTPUT = ["chunk_id", "doc_id", "text"]


def _locked(e: Exception) -> bool:
    return "Open local milvus failed" in str(e)


CLIENTS = ClientCache("Milvus Lite", _locked)


# The `plain` analyzer of the BM25 field: the standard tokenizer (Unicode word rules, UAX #29: `snake_case`
# stays one word) and lowercase. Milvus Lite offers no stemmer (tokenizers standard and jieba only; stop and
# stemmer filters had no effect when tried), so `english` is not offered.
ANALYZERS = {"plain": {"tokenizer": "standard", "filter": ["lowercase"]}}


_WHOLE = re.compile(r"[a-z0-9]+|[^\W\d_]")  # ASCII letters and digits, or one letter: one token as it is


def _token(word: str) -> str:
    if _WHOLE.fullmatch(word):
        return word
    return "w" + hashlib.blake2b(word.encode(), digest_size=8).hexdigest()


def _word_tokens(keywords: str) -> str:
    """Segmented text (words joined by spaces) as tokens the standard tokenizer keeps whole: a word of ASCII
    letters and digits, or of one letter (a Chinese character), as it is; any other as `w` and 16 hex digits
    of its BLAKE2b hash (64 bits: no two words of a corpus share one in practice). Per-character Chinese
    stays as long as its text, under the field's 65,535 bytes."""
    return " ".join(map(_token, keywords.split()))


class _LiteClient:
    """A MilvusClient on a connection of its own, whose `close` also stops the file's in-process Milvus
    Lite server, which releases the file for other processes. (A shared pymilvus connection outlives
    `close`, and after 30 s idle its health check fails against Milvus Lite and the reopen with it.)"""

    def __init__(self, db: str):
        from pymilvus import MilvusClient

        self.db = db
        self.client = MilvusClient(db, dedicated=True)
        if self.client.has_collection(NAME):  # a restarted server starts with collections released
            self.client.load_collection(NAME)

    def __getattr__(self, name: str):
        return getattr(self.client, name)

    def close(self) -> None:
        from milvus_lite.server_manager import server_manager_instance

        self.client.close()
        server_manager_instance.release_server(self.db)


def _open(folder: str) -> _LiteClient:
    Path(folder).mkdir(parents=True, exist_ok=True)
    return _LiteClient(str(Path(folder) / FILE))


def _literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v)  # numbers as is, strings double-quoted with escapes


def milvus_expr(where: Conditions) -> str:
    parts = []  # dynamic fields are referenced by their bare names, like schema fields
    for c in where:
        if c.op == "$in":
            parts.append(f"{c.field} in [{', '.join(_literal(v) for v in c.value)}]")
        else:
            parts.append(f"{c.field} {EXPR_OPS[c.op]} {_literal(c.value)}")
    return " and ".join(parts)


class MilvusLiteStore(SingleClientStore):
    """Milvus Lite, embedded; Milvus's own BM25 (standard tokenizer, lowercase; Milvus Lite has no stemmer)"""

    backend: ClassVar[str] = "milvus"
    CLIENTS: ClassVar[ClientCache] = CLIENTS
    open_client: ClassVar = staticmethod(_open)
    batch_size: int = 500

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
        from pymilvus import DataType, Function, FunctionType, MilvusClient

        client = self._client(physical)
        segmented = segments(analyzer)
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        schema.add_field("chunk_id", DataType.VARCHAR, max_length=MAX_VARCHAR, is_primary=True)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=MAX_VARCHAR)
        if segmented:
            schema.add_field("text", DataType.VARCHAR, max_length=MAX_VARCHAR)
            schema.add_field(
                FIELD,
                DataType.VARCHAR,
                max_length=MAX_VARCHAR,
                enable_analyzer=True,
                analyzer_params=ANALYZERS["plain"],  # one token per word (_word_tokens)
            )
        else:
            schema.add_field(
                "text",
                DataType.VARCHAR,
                max_length=MAX_VARCHAR,
                enable_analyzer=True,
                analyzer_params=ANALYZERS[analyzer],
            )
        schema.add_field("metadata", DataType.VARCHAR, max_length=MAX_VARCHAR)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=int(vectors.shape[1]))
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name="bm25",
                function_type=FunctionType.BM25,
                input_field_names=[FIELD if segmented else "text"],
                output_field_names=["sparse"],
            )
        )
        index = client.prepare_index_params()
        if ann is None:
            index.add_index("dense", index_type="FLAT", metric_type="COSINE")
        else:  # Milvus Lite's HNSW (faiss-cpu); `ef` is a search setting
            s = ann.settings()
            graph = {"M": s["m"], "efConstruction": s["ef_construction"]}
            index.add_index("dense", index_type="HNSW", metric_type="COSINE", params=graph)
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        client.create_collection(NAME, schema=schema, index_params=index, consistency_level="Strong")
        records = [
            {
                **{k: v for k, v in attrs.items() if k != "doc_id"},
                "chunk_id": r["chunk_id"],
                "doc_id": r["doc_id"],
                "text": r["text"],
                "metadata": r.get("metadata", "{}"),
                "dense": np.asarray(vec, np.float32).tolist(),
                **({FIELD: _word_tokens(r[FIELD])} if segmented else {}),
            }
            for r, vec, attrs in zip(rows, vectors, values, strict=True)
        ]
        for i in range(0, len(records), self.batch_size):
            client.insert(NAME, records[i : i + self.batch_size])

    def _count(self, physical: str) -> int:
        rows = self._client(physical).query(NAME, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    def _search(
        self, collection: str, data, field: str, k: int, where: Conditions, score, params: dict | None = None
    ) -> list[Hit]:
        def run(physical):
            res = self._client(physical).search(
                NAME,
                data=[data],
                anns_field=field,
                limit=k,
                filter=milvus_expr(where),
                output_fields=OUTPUT,
                **({"search_params": {"params": params}} if params else {}),
            )
            return [
                Hit(r["entity"]["chunk_id"], r["entity"]["doc_id"], r["entity"]["text"], score(r["distance"]))
                for r in res[0]
            ]

        return self._read(collection, run)

    def _vector_search(self, collection: str, vector: np.ndarray, k: int, where: Conditions) -> list[Hit]:
        # the COSINE metric reports the similarity itself
        vec = np.asarray(vector, np.float32).tolist()
        ef = self._ann(collection).get("ef")
        return self._search(collection, vec, "dense", k, where, float, {"ef": max(ef, k)} if ef else None)

    def _exact_vector_search(
        self, collection: str, vector: np.ndarray, k: int, where: Conditions
    ) -> list[Hit]:
        def run(physical):
            got = self._client(physical).query(
                NAME, filter=milvus_expr(where) or "", output_fields=["chunk_id", "doc_id", "text", "dense"]
            )
            return brute_force(
                got, np.asarray([r["dense"] for r in got], np.float32).reshape(len(got), -1), vector, k
            )

        return self._read(collection, run)

    def _keyword_search(self, collection: str, query: str, k: int, where: Conditions) -> list[Hit]:
        if self._segmentation(collection) is not None:
            query = _word_tokens(query)
        if not query.strip():
            return []
        # Milvus Lite reports BM25 relevance as a negative distance; the score is its magnitude
        hits = self._search(collection, query, "sparse", k, where, lambda d: abs(float(d)))
        return [h for h in hits if h.score > 0]

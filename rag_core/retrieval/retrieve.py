"""Retrieval of one config over the QA set: optional LLM query transformation, then the store's search.

fetch_k is the reranker's candidate count, or top_k without a reranker. An optional LLM query
transformation (rewrite, multi_query, hyde; rag_core/retrieval/query_transform.py) runs first; when it fails or
returns nothing usable the original question is used and the fallback is counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import polars as pl

from rag_core.common.completion import NO_USAGE, Completer, usage
from rag_core.common.concurrency import map_concurrently
from rag_core.planning.spec import RagConfig
from rag_core.retrieval.fusion import rrf_many
from rag_core.retrieval.hops import HOP_SCHEMA, Trajectory, iterate, new_documents
from rag_core.retrieval.query_transform import parse_reply, prompt_for


@dataclass(frozen=True)
class Hit:
    chunk_id: str
    doc_id: str
    text: str
    score: float


TIE_MARGIN = (
    10  # candidates fetched beyond k, so a tie at the k-th place is broken by the rule, not the store
)


MAX_DEPTH = 1000  # chunks fetched at most when retrieving until k distinct documents


def ranked(hits: list[Hit], k: int | None = None) -> list[Hit]:
    """The one tie rule of every ranking: score (higher first), then doc id, then chunk id."""
    return sorted(hits, key=lambda h: (-h.score, h.doc_id, h.chunk_id))[:k]


def first_documents(doc_ids: list[str], k: int) -> int:
    """How many leading items of a ranking cover its first k distinct documents."""
    seen: set[str] = set()
    for i, doc in enumerate(doc_ids):
        if doc not in seen:
            if len(seen) == k:
                return i
            seen.add(doc)
    return len(doc_ids)


class Searcher(Protocol):
    def retrieve(self, collection, mode, text, vector, k, alpha, fusion, where) -> list[Hit]: ...


RETRIEVAL_SCHEMA = {
    "query_id": pl.String,
    "queries": pl.List(pl.String),  # what was searched: the question, or its transformation(s)
    "transform_fallback": pl.Boolean,
    "transform_tokens": pl.Int64,
    "transform_cost_usd": pl.Float64,
    "transform_ms": pl.Float64,
    "chunk_ids": pl.List(pl.String),
    "doc_ids": pl.List(pl.String),
    "scores": pl.List(pl.Float64),
    "titles": pl.List(pl.String),
    "texts": pl.List(pl.String),
    "latency_ms": pl.Float64,
}


def transform_queries(
    c: RagConfig, questions: list[str], llm: Completer
) -> list[tuple[list[str], bool, dict]]:
    """Per question: (queries to search, fell back?, usage). Without a transformation: ([question], False)."""
    r = c.retrieval
    if r.query_transform == "none":
        return [([q], False, NO_USAGE) for q in questions]

    def one(q: str) -> tuple[list[str], bool, dict]:
        out = llm.complete(
            r.query_model, prompt_for(r.query_template, q, r.n_queries), temperature=0.0, max_tokens=256
        )
        parsed = [] if out.error else parse_reply(r.query_transform, out.text, r.n_queries)
        return (parsed, False, usage(out)) if parsed else ([q], True, usage(out))

    return map_concurrently(one, questions, llm.max_concurrency, what="queries transformed")


def search(
    store: Searcher,
    collection: str,
    c: RagConfig,
    question: str,
    queries: list[str],
    fell_back: bool,
    embed: Callable[[list[str]], np.ndarray],
) -> list[Hit]:
    r, k = c.retrieval, c.fetch_k

    def top(depth: int) -> list[Hit]:
        return _search_once(store, collection, r, question, queries, fell_back, embed, depth)

    if r.k_unit == "chunks":
        return top(k)
    depth = 4 * k  # k distinct documents: fetch deeper until they are covered or the index runs out
    while True:
        hits = top(depth)
        n = first_documents([h.doc_id for h in hits], k)
        if n < len(hits) or len(hits) < depth or depth >= MAX_DEPTH:
            return hits[:n]
        depth = min(2 * depth, MAX_DEPTH)


def _search_once(store, collection, r, question, queries, fell_back, embed, k: int) -> list[Hit]:
    def run(text: str, vector) -> list[Hit]:
        return store.retrieve(collection, r.mode, text, vector, k, r.hybrid_alpha, r.fusion, r.filter)

    if r.query_transform == "multi_query" and not fell_back:
        texts = [question, *queries]
        vectors = embed(texts) if r.reads_vector else [None] * len(texts)
        rankings = [run(t, v) for t, v in zip(texts, vectors, strict=True)]
        by_id = {h.chunk_id: h for ranking in rankings for h in ranking}
        fused = rrf_many([[(h.chunk_id, h.score) for h in ranking] for ranking in rankings])
        return ranked([Hit(cid, by_id[cid].doc_id, by_id[cid].text, s) for cid, s in fused], k)
    if r.query_transform == "hyde" and not fell_back:
        passage = queries[0]  # the hypothetical answer replaces the question's vector
        keyword = f"{question} {passage}" if not r.reads_vector else question
        return run(keyword, None if not r.reads_vector else embed([passage])[0])
    text = queries[0]  # the question, or its rewrite
    return run(text, None if not r.reads_vector else embed([text])[0])


def retrieve(
    c: RagConfig,
    qa: pl.DataFrame,
    chunks: pl.DataFrame,
    store: Searcher,
    collection: str,
    embed: Callable[[list[str]], np.ndarray],
    llm: Completer,
) -> pl.DataFrame:
    """One row per question (RETRIEVAL_SCHEMA): what was searched, the ranked hits and the search
    latency (ms of the store queries; query vectors are embedded beforehand, in one cached batch)."""
    by_id = {row["chunk_id"]: row for row in chunks.select("chunk_id", "title", "text").iter_rows(named=True)}
    questions = qa["question"].to_list()
    transformed = transform_queries(c, questions, llm)
    to_embed = list(
        dict.fromkeys(t for q, (qs, _, _) in zip(questions, transformed, strict=True) for t in [q, *qs])
    )
    vectors = dict(zip(to_embed, embed(to_embed), strict=True)) if c.retrieval.reads_vector else {}

    def lookup(texts: list[str]) -> np.ndarray:
        return np.stack([vectors[t] for t in texts])

    if (
        questions
    ):  # the store's first query opens the index (one-time start-up): untimed, no question's latency
        search(store, collection, c, questions[0], *transformed[0][:2], lookup)
    rows, first = [], []
    for qid, question, (queries, fell_back, used) in zip(qa["query_id"], questions, transformed, strict=True):
        t0 = time.perf_counter()
        hits = search(store, collection, c, question, queries, fell_back, lookup)
        first.append(hits)
        rows.append(
            {
                "query_id": qid,
                "queries": queries,
                "transform_fallback": fell_back,
                "transform_tokens": used["tokens"],
                "transform_cost_usd": used["cost_usd"],
                "transform_ms": used["ms"],
                **_ranking(hits, by_id),
                "latency_ms": (time.perf_counter() - t0) * 1000,
            }
        )
    if not c.retrieval.iterates:
        return pl.DataFrame(rows, schema=RETRIEVAL_SCHEMA)
    return _iterated(c, rows, first, questions, by_id, chunks, store, collection, embed, llm)


def _ranking(hits: list[Hit], by_id: dict) -> dict:
    return {
        "chunk_ids": [h.chunk_id for h in hits],
        "doc_ids": [h.doc_id for h in hits],
        "scores": [h.score for h in hits],
        "titles": [by_id[h.chunk_id]["title"] for h in hits],
        "texts": [by_id[h.chunk_id]["text"] for h in hits],
    }


def _iterated(c, rows, first, questions, by_id, chunks, store, collection, embed, llm) -> pl.DataFrame:
    """The rows after the hop loop (rag_core/retrieval/hops.py): each question's ranking holds the first
    hop's hits, then each later hop's new ones; its latency, every hop's store queries and LLM calls; HOP_SCHEMA's
    columns say what each hop did."""
    titles = dict(zip(chunks["doc_id"], chunks["title"], strict=True))
    # later hops search their query as it is: no transformation of it
    plain = c.retrieval.model_copy(update={"query_transform": "none"})

    def later(asked: list[tuple[str, int]]) -> list[tuple[list[Hit], float]]:
        unique = list(dict.fromkeys(q for q, _ in asked))
        vectors = dict(zip(unique, embed(unique), strict=True)) if c.retrieval.reads_vector else {}
        out = []
        for q, depth in asked:
            t0 = time.perf_counter()
            vector = (lambda ts: np.stack([vectors[t] for t in ts])) if vectors else None
            hits = _search_once(store, collection, plain, q, [q], False, vector, min(depth, MAX_DEPTH))
            out.append((hits, (time.perf_counter() - t0) * 1000))
        return out

    loops = [
        Trajectory(
            question, list(hits), [" | ".join(row["queries"])], [new_documents(hits, set())], [len(hits)]
        )
        for question, hits, row in zip(questions, first, rows, strict=True)
    ]
    iterate(c, loops, later, lambda d: titles.get(d) or "", lambda cid: by_id[cid]["text"], llm)
    out = [
        {**row, **_ranking(t.hits, by_id), "latency_ms": row["latency_ms"] + t.search_ms + t.ms, **t.row()}
        for row, t in zip(rows, loops, strict=True)
    ]
    return pl.DataFrame(out, schema={**RETRIEVAL_SCHEMA, **HOP_SCHEMA})

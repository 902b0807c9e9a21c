"""Reranking of retrieved candidates (pure: models and LLMs are passed in).

- mmr: Maximal Marginal Relevance (Carbonell & Goldstein, 1998): greedily pick the candidate maximizing
  lambda · sim(query, d) − (1 − lambda) · max_{s in selected} sim(d, s), cosine similarities.
- llm: the model returns an ordering of candidate numbers; `parse_ordering` reads it robustly.
- cross_encoder: scores (query, text) pairs with a sentence-transformers CrossEncoder the user supplies, on the
  device the caller names (rag_core/retrieval/cross_encoders.py).
- a plug-in (rag_core/components/rerankers.py): its order function, per question.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from rag_core.common.completion import NO_USAGE, Completer, usage
from rag_core.common.concurrency import map_concurrently
from rag_core.components.rerankers import RERANKERS, Reranker, reranker
from rag_core.planning.prompts import RERANK_PROMPT, fill
from rag_core.retrieval.cross_encoders import cross_encoder, cross_scores
from rag_core.retrieval.retrieve import first_documents

if TYPE_CHECKING:  # the spec validates rerank.method against this module's registrations
    from rag_core.planning.spec import RagConfig

RERANKERS.register("none", Reranker("none", "the retrieval's order, cut to top_k", model="none"))
RERANKERS.register(
    "mmr",
    Reranker(
        "mmr",
        "Maximal Marginal Relevance on the embeddings (rerank.mmr_lambda: 1 = relevance only)",
        model="none",
    ),
)
RERANKERS.register(
    "llm",
    Reranker(
        "llm",
        "an LLM's ordering of the numbered candidates (rerank.model, rerank.prompt)",
        model="required",
        calls_llm=True,
    ),
)
RERANKERS.register(
    "cross_encoder",
    Reranker(
        "cross_encoder",
        "a sentence-transformers CrossEncoder from a local folder (rerank.model) scores each (question, chunk)",
        model="required",
        local_model=True,
        key_name="ce",
    ),
)


def mmr(query: np.ndarray, candidates: np.ndarray, k: int, lam: float = 0.5) -> list[int]:
    """Indices of the k candidates chosen by MMR, in pick order."""
    n = len(candidates)
    if n == 0:
        return []
    c = candidates / np.maximum(np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
    q = query / max(np.linalg.norm(query), 1e-12)
    relevance = c @ q
    sims = c @ c.T
    chosen: list[int] = []
    redundancy = np.full(n, -np.inf)
    for _ in range(min(k, n)):
        penalty = np.where(np.isinf(redundancy), 0.0, redundancy)
        score = lam * relevance - (1 - lam) * penalty
        score[chosen] = -np.inf
        best = int(np.argmax(score))
        chosen.append(best)
        redundancy = np.maximum(redundancy, sims[best])
    return chosen


def llm_rerank_prompt(query: str, texts: Sequence[str], template: str = RERANK_PROMPT) -> str:
    """The LLM reranker's prompt (rerank.template: the config's, else the built-in one) for a question."""
    passages = "\n\n".join(f"[{i}] {t}" for i, t in enumerate(texts, start=1))
    return fill(template, query=query, passages=passages)


# A candidate is named by "[n]", "Passage n", or a line of numbers alone ("3, 1, 2", "1 > 3"); a bare number
# inside prose (a date, "April 3") or a list's marker ("1. VIVA Media AG …") names none: a small model that
# answers with a numbered list of its own text ranked nothing, and reading its markers as passage numbers
# kept the retrieval's order while counting no fallback.
_NAMED = re.compile(r"\[\s*(\d+)\s*\]|\bpassages?\s*#?\s*(\d+)", re.IGNORECASE)
_LABEL = re.compile(r"^\s*[A-Za-z][A-Za-z ]{0,24}:")
_NUMBERS_LINE = re.compile(r"^[\s\[\](),>#.;:-]*\d+(?:[\s\[\](),>#.;:-]+\d+)*[\s\[\](),>#.;:-]*$")


def parse_ordering(reply: str, n: int) -> list[int] | None:
    """0-based candidate order from a reply like "3, 1, [2]" or "Passage 3 > Passage 1". Numbers outside
    1..n and repeats are ignored; candidates the reply does not list keep their original order after the
    listed ones. None when the reply names no valid candidate (the caller falls back and counts it)."""
    named: list[str] = []
    for line in (reply or "").splitlines():
        line = _LABEL.sub("", line)  # "RANKING: 2, 1"
        if found := [a or b for a, b in _NAMED.findall(line)]:
            named += found  # "1. [3]": the bracket names the passage, not the list's marker
        elif _NUMBERS_LINE.match(line):
            named += re.findall(r"\d+", line)
    listed: list[int] = []
    for m in named:
        i = int(m) - 1
        if 0 <= i < n and i not in listed:
            listed.append(i)
    if not listed:
        return None
    return listed + [i for i in range(n) if i not in listed]


# ---- reranking one config's retrievals --------------------------------------------------------------

RERANK_COLUMNS = ("chunk_ids", "doc_ids", "scores", "titles", "texts")  # the per-candidate lists
RERANK_EXTRA_SCHEMA = {
    "rerank_fallback": pl.Boolean,
    "rerank_ms": pl.Float64,
    "rerank_tokens": pl.Int64,
    "rerank_cost_usd": pl.Float64,
}


def orders(
    c: RagConfig,
    rows: list[dict],
    questions: dict[str, str],
    llm: Completer | None,
    vectors: Callable[[dict], tuple[np.ndarray, np.ndarray]] | None,
    device: str = "cpu",
) -> list[tuple[list[int], bool, dict]]:
    """Per query: (candidate indices in the new order, fell back?, usage: tokens, cost, ms). `device`: where
    a cross-encoder runs."""
    method = c.rerank.method
    model = cross_encoder(c.rerank.model, device) if method == "cross_encoder" else None
    plugin = reranker(method).order  # None for a built-in

    def one(r: dict) -> tuple[list[int], bool, dict]:
        t0 = time.perf_counter()
        n, k = len(r["texts"] or []), context_k(c, r)
        if method == "none" or n == 0:
            return list(range(n)), False, NO_USAGE
        if method == "mmr":
            q, cands = vectors(r)
            order = mmr(q, cands, k if c.retrieval.k_unit == "chunks" else n, c.rerank.mmr_lambda)
        elif method == "cross_encoder":
            scores = cross_scores(model, [(questions[r["query_id"]], t) for t in r["texts"]])
            order = sorted(range(n), key=lambda i: (-float(scores[i]), i))
        elif plugin is not None:
            order = plugin_order(
                method, plugin, questions[r["query_id"]], list(r["texts"]), k, c.rerank.model
            )
        else:  # llm
            reply = llm.complete(
                c.rerank.model,
                llm_rerank_prompt(questions[r["query_id"]], r["texts"], c.rerank.template),
                max_tokens=128,
            )
            parsed = None if reply.error else parse_ordering(reply.text, n)
            return (
                (parsed, False, usage(reply)) if parsed is not None else (list(range(n)), True, usage(reply))
            )
        return order, False, {**NO_USAGE, "ms": (time.perf_counter() - t0) * 1000}

    if method != "llm":
        return [one(r) for r in rows]
    return map_concurrently(one, rows, llm.max_concurrency, what="queries reranked")


def plugin_order(method: str, order, query: str, texts: list[str], k: int, model: str | None) -> list[int]:
    """A plug-in reranker's order of one question's candidates: the indices it lists (each once, within
    range), then the others in retrieval order. Anything else is an error naming it and its package."""
    got = order(query, texts, k, model)
    listed = list(got) if got is not None else None
    bad = listed is None or any(
        not isinstance(i, int | np.integer) or not 0 <= i < len(texts) for i in listed
    )
    if bad or len(set(listed)) != len(listed):
        raise ValueError(
            f"reranker {method!r} ({RERANKERS.origin(method)}) returned {got!r} for {len(texts)} candidates of "
            f"question {query!r}: expected distinct candidate indices 0..{len(texts) - 1}, best first"
        )
    listed = [int(i) for i in listed]
    return listed + [i for i in range(len(texts)) if i not in set(listed)]


def context_k(c: RagConfig, row: dict) -> int:
    """How many chunks (or documents) of a question's candidates the context keeps: top_k, and top_k more
    for each later hop an iterative retrieval made (rag_core/retrieval/hops.py)."""
    return c.retrieval.top_k * (row.get("hops") or 1)


def rerank(
    c: RagConfig,
    retrieved: pl.DataFrame,
    qa: pl.DataFrame,
    llm: Completer | None,
    chunk_vectors: Callable[[], dict[str, np.ndarray]],
    embed: Callable[[list[str]], np.ndarray],
    device: str = "cpu",
) -> pl.DataFrame:
    """The retrieval rows cut to the reranker's top_k (`none` keeps the first top_k; `context_k` with
    hops), with the fallback,
    time, tokens and cost of each query's reranking. `chunk_vectors` is called only for MMR; `device`: where
    a cross-encoder runs."""
    questions = dict(zip(qa["query_id"], qa["question"], strict=True))
    rows = list(retrieved.iter_rows(named=True))
    vectors = None
    if c.rerank.method == "mmr":
        chunk_vec = chunk_vectors()
        qids = [r["query_id"] for r in rows]
        qvec = dict(zip(qids, embed([questions[q] for q in qids]), strict=True))

        def vectors(r: dict):
            ids = r["chunk_ids"]
            return qvec[r["query_id"]], np.stack([chunk_vec[x] for x in ids]) if ids else np.zeros((0, 1))

    out = []
    for r, (order, fell_back, used) in zip(
        rows, orders(c, rows, questions, llm, vectors, device), strict=True
    ):
        k = context_k(c, r)
        keep = order[:k]
        if c.retrieval.k_unit == "documents":  # the first k distinct documents in the new order
            keep = order[: first_documents([r["doc_ids"][i] for i in order], k)]
        out.append(
            {
                **r,
                **{col: [r[col][i] for i in keep] for col in RERANK_COLUMNS},
                "rerank_fallback": fell_back,
                "rerank_ms": used["ms"],
                "rerank_tokens": used["tokens"],
                "rerank_cost_usd": used["cost_usd"],
            }
        )
    return pl.DataFrame(out, schema={**retrieved.schema, **RERANK_EXTRA_SCHEMA})

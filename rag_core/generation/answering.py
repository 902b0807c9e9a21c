"""Answers of one config: context synthesis, then generation by a reader (the extractive one, or a plug-in's:
rag_core/components/readers.py) or an LLM.

A failed LLM call is retried by the client, then recorded (error kept, empty answer) and counted; the batch
always completes with one row per question.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import polars as pl

from rag_core.common.completion import NO_USAGE, Completer, Completion, usage
from rag_core.common.concurrency import map_concurrently
from rag_core.components.readers import READERS
from rag_core.generation.context import (
    apply_budget,
    compress_prompt,
    parent_spans,
    parse_compressed,
    word_count,
)
from rag_core.generation.generate import build_prompt, format_context
from rag_core.metrics.generation import citations
from rag_core.planning.prompts import COMPRESS_PROMPT
from rag_core.planning.spec import GenerationConfig, RagConfig

ANSWER_SCHEMA = {
    "query_id": pl.String,
    "sample": pl.Int64,  # which answer of the question (evaluation.samples of a random generator)
    "answer": pl.String,
    "error": pl.String,
    "context_doc_ids": pl.List(pl.String),  # the blocks the generator saw, in [n] order
    "context_texts": pl.List(pl.String),
    "citations": pl.List(pl.String),  # doc ids of the [n] markers in the answer
    "context_fallbacks": pl.Int64,  # blocks kept uncompressed because compression failed
    "context_calls": pl.Int64,  # compression calls: one per block
    "context_tokens": pl.Int64,
    "context_cost_usd": pl.Float64,
    "context_ms": pl.Float64,
    "attempts": pl.Int64,
    "latency_ms": pl.Float64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cost_usd": pl.Float64,
}


def generate(
    gen: GenerationConfig, question: str, titles: list[str], texts: list[str], llm: Completer, sample: int = 0
) -> Completion:
    if gen.is_reader:
        t0 = time.perf_counter()
        text = READERS.get(gen.model).answer(question, texts, titles)
        if not isinstance(text, str):
            raise ValueError(
                f"answer generator {gen.model!r} ({READERS.origin(gen.model)}) returned {type(text).__name__} "
                f"for question {question!r}: expected the answer's text"
            )
        return Completion(text=text, error=None, attempts=1, latency_ms=(time.perf_counter() - t0) * 1000)
    prompt = build_prompt(gen.prompt_template, question, format_context(texts, titles))
    if sample:  # another draw of the same call: its own entry in the call cache
        return llm.complete(gen.model, prompt, gen.temperature, gen.max_tokens, sample=sample)
    return llm.complete(gen.model, prompt, gen.temperature, gen.max_tokens)


def synthesize(
    gen: GenerationConfig,
    question: str,
    titles: list[str],
    texts: list[str],
    doc_ids: list[str],
    llm: Completer,
    count_tokens: Callable[[str], int],
) -> tuple[list[str], list[str], list[str], int, dict]:
    """Context synthesis (rag_core/generation/context.py): (titles, texts, doc_ids, compression fallbacks, usage)."""
    blocks = list(zip(titles, texts, doc_ids, strict=True))
    fallbacks = 0
    spent = dict(NO_USAGE)
    if gen.context == "compress":
        kept = []
        for title, text, doc in blocks:
            out = llm.complete(
                gen.context_model, compress_prompt(question, text, gen.context_prompt), max_tokens=256
            )
            spent = {k: spent[k] + v for k, v in usage(out).items()}
            # the built-in prompt asks for the passage's own sentences: held to them
            grounded = text if gen.context_prompt in (None, COMPRESS_PROMPT) else None
            short = None if out.error else parse_compressed(out.text, grounded)
            if short is None:
                fallbacks += 1
                kept.append((title, text, doc))
            elif short:
                kept.append((title, short, doc))
        blocks = kept
    if gen.context_max_tokens:
        count = word_count if gen.is_reader else count_tokens
        fitted = apply_budget([t for _, t, _ in blocks], gen.context_max_tokens, count)
        blocks = [(title, text, doc) for (title, _, doc), text in zip(blocks, fitted, strict=False)]
    return [b[0] for b in blocks], [b[1] for b in blocks], [b[2] for b in blocks], fallbacks, spent


def expand_to_parents(items: list[dict], chunks: pl.DataFrame, corpus: pl.DataFrame) -> list[dict]:
    """Replace each retrieved chunk by its parent section (rag_core.generation.context.parent_spans), in rank order,
    each parent once."""
    doc_text = dict(zip(corpus["doc_id"].to_list(), corpus["text"].to_list(), strict=True))
    parents = parent_spans(chunks)
    out = []
    for row in items:
        seen, titles, texts, docs = set(), [], [], []
        for cid, title, doc in zip(
            row["chunk_ids"] or [], row["titles"] or [], row["doc_ids"] or [], strict=True
        ):
            pid, start, end = parents[cid]
            if pid in seen:
                continue
            seen.add(pid)
            titles.append(title)
            texts.append(doc_text[doc][start:end])
            docs.append(doc)
        out.append({**row, "titles": titles, "texts": texts, "doc_ids": docs})
    return out


def answer(
    c: RagConfig,
    qa: pl.DataFrame,
    reranked: pl.DataFrame,
    llm: Completer,
    count_tokens: Callable[[str], int],
    parents: Callable[[], tuple[pl.DataFrame, pl.DataFrame]],
) -> pl.DataFrame:
    """One row per question and sample (ANSWER_SCHEMA). `parents` gives (chunkset, corpus), read only for
    parent/child context expansion."""
    items = list(
        qa.select("query_id", "question").join(reranked, on="query_id", how="left").iter_rows(named=True)
    )
    if c.generation.context_expand == "parent":
        items = expand_to_parents(items, *parents())

    samples = c.generation.samples
    items = [{**row, "sample": i} for row in items for i in range(samples)]

    def one(row: dict) -> tuple:
        titles, texts, docs, fallbacks, spent = synthesize(
            c.generation,
            row["question"],
            row["titles"] or [],
            row["texts"] or [],
            row["doc_ids"] or [],
            llm,
            count_tokens,
        )
        out = generate(c.generation, row["question"], titles, texts, llm, row["sample"])
        return out, texts, docs, fallbacks, spent

    workers = 1 if c.generation.is_reader else llm.max_concurrency
    results = map_concurrently(one, items, workers, what="questions answered")
    return pl.DataFrame(
        [
            {
                "query_id": row["query_id"],
                "sample": row["sample"],
                "answer": res.text,
                "error": res.error,
                "context_doc_ids": docs,
                "context_texts": texts,
                "citations": [docs[n - 1] if 1 <= n <= len(docs) else f"[{n}]?" for n in citations(res.text)],
                "context_fallbacks": fallbacks,
                "context_calls": len(row["texts"] or []) if c.generation.context == "compress" else 0,
                "context_tokens": spent["tokens"],
                "context_cost_usd": spent["cost_usd"],
                "context_ms": spent["ms"],
                "attempts": res.attempts,
                "latency_ms": res.latency_ms,
                "prompt_tokens": res.prompt_tokens,
                "completion_tokens": res.completion_tokens,
                "cost_usd": res.cost_usd,
            }
            for row, (res, texts, docs, fallbacks, spent) in zip(items, results, strict=True)
        ],
        schema=ANSWER_SCHEMA,
    )

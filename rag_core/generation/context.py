"""Context synthesis: which retrieved text the generator sees (pure functions).

- concat (default): the retrieved chunks as numbered blocks `[n] title: text` (rag_core.generation.generate).
- compress: each block reduced by an LLM to the sentences that help answer; `NONE` drops the block; a reply
  to the built-in prompt that is not the passage's own words keeps the block whole, counted as a fallback.
- budget: blocks are kept in rank order while the running token count fits `max_tokens`; the block that
  crosses the budget is cut to fit at a word boundary, and later blocks are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from rag_core.planning.prompts import COMPRESS_PROMPT


def compress_prompt(query: str, passage: str, template: str | None = None) -> str:
    # str.replace, not str.format: an evolved or user template may hold other braces
    return (template or COMPRESS_PROMPT).replace("{query}", query).replace("{passage}", passage)


def parse_compressed(reply: str, passage: str | None = None) -> str | None:
    """The kept text, '' when the model says nothing helps, None when the reply is unusable. With `passage`
    (the built-in prompt, which asks for its sentences word for word), a reply that is not mostly the
    passage's own words is unusable too: a small model writes text of its own there, and the generator would
    read it as the context (at least half of its words must be in sentences copied from the passage)."""
    text = (reply or "").strip()
    if not text:
        return None
    if text.upper().rstrip(".") == "NONE":
        return ""
    if passage is not None and not _from(text, passage):
        return None
    return text


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def _from(text: str, passage: str) -> bool:
    """Whether at least half of the reply's words are in sentences it copied from the passage (word for
    word, case and punctuation aside; a list's markers are not words of the reply)."""
    source = " " + " ".join(_words(passage)) + " "
    sentences = [_words(s) for s in re.split(r"(?<=[.!?])\s+|\n+|(?:^|\s)\d+[.)]\s", text)]
    total = sum(len(s) for s in sentences)
    copied = sum(len(s) for s in sentences if s and f" {' '.join(s)} " in source)
    return total > 0 and copied * 2 >= total


def apply_budget(texts: Sequence[str], max_tokens: int | None, count: Callable[[str], int]) -> list[str]:
    """Texts that fit the budget (see module docstring); all of them without a budget."""
    if not max_tokens:
        return list(texts)
    kept, used = [], 0
    for text in texts:
        n = count(text)
        if used + n <= max_tokens:
            kept.append(text)
            used += n
            continue
        words = text.split()
        lo, hi = 0, len(words)
        while lo < hi:  # the longest word prefix that fits
            mid = (lo + hi + 1) // 2
            if used + count(" ".join(words[:mid])) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        if lo:
            kept.append(" ".join(words[:lo]))
        break
    return kept


def word_count(text: str) -> int:
    return len(text.split())


def parent_spans(chunks) -> dict[str, tuple[str, int, int]]:
    """chunk_id -> (parent id, start, end): the parent is the chunk's markdown section (chunks of the same
    document sharing a heading path) or, without headings, the whole chunked extent of its document."""
    import json

    import polars as pl

    keyed = chunks.with_columns(
        pl.col("metadata")
        .map_elements(lambda m: json.loads(m or "{}").get("heading_path", ""), return_dtype=pl.String)
        .alias("_heading")
    )
    bounds = keyed.group_by("doc_id", "_heading").agg(
        pl.col("start").min().alias("_s"), pl.col("end").max().alias("_e")
    )
    joined = keyed.join(bounds, on=["doc_id", "_heading"])
    return {
        r["chunk_id"]: (f"{r['doc_id']}|{r['_heading']}", r["_s"], r["_e"])
        for r in joined.select("chunk_id", "doc_id", "_heading", "_s", "_e").iter_rows(named=True)
    }

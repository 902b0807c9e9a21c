"""Prompts past a model's context, found before a run (`rag-sweep plan`).

A call whose prompt and answer do not fit the tokens the model reads fails (a local server refuses it;
some providers cut the prompt silently), and every question that meets the longest chunks fails alike.
Here each LLM generator's and the judge's longest prompt on the sweep's own questions and chunks is built
as the run would build it (the longest question with the top_k longest chunks, cut by
`generation.context_max_tokens` where set), counted by the model's tokenizer, and held against its context.
Pure: the caller says how to count tokens and how many the model reads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from rag_core.generation.context import apply_budget, word_count
from rag_core.generation.generate import build_prompt, format_context
from rag_core.metrics.judge import judge_prompt
from rag_core.planning.plan import Plan

JUDGE_REPLY_TOKENS = 8  # the judge's verdict: a number
# the chat template's own tokens around a prompt (turn markers), which a count of the prompt alone misses
TEMPLATE_TOKENS = 16


@dataclass(frozen=True)
class PastContext:
    stage: str  # "answers" or "evaluations" (the judge)
    model: str
    tokens: int  # the longest prompt's, with the reply it may take
    window: int  # what the model reads
    configs: tuple[str, ...]  # the config keys whose calls it is


def longest_context(chunks: pl.DataFrame, top_k: int, max_tokens: int | None, count) -> str:
    """The largest context the run can send: the top_k longest chunks (with their titles), cut to the
    generator's context budget where it has one."""
    longest = chunks.sort(pl.col("text").str.len_chars(), descending=True).head(top_k)
    texts, titles = longest["text"].to_list(), longest["title"].fill_null("").to_list()
    if max_tokens:
        texts = apply_budget(texts, max_tokens, count)
    return format_context(texts, titles[: len(texts)])


def past_context(
    plan: Plan,
    chunks_of: Callable[[str], pl.DataFrame],
    questions: list[str],
    count: Callable[[str, str], int],
    window: Callable[[str], int | None],
) -> list[PastContext]:
    """The LLM calls of the plan's generators and judge whose longest prompt, with its reply, is past the
    model's context; `count(model, text)`: the model's tokens, `window(model)`: what it reads (None:
    unknown, not checked)."""
    if not questions:
        return []
    question = max(questions, key=len)
    found: dict[tuple[str, str, int], list[tuple[int, str]]] = {}
    windows: dict[str, int | None] = {}
    judge = plan.sweep.judge
    for key in plan.config_keys:
        c = plan.config(key)
        g = c.generation
        chunks = chunks_of(plan.key_of(c, "chunksets"))
        # the budget counted as the run counts it (rag_core/generation/answering.py: synthesize)
        budget_count = word_count if g.is_reader else functools.partial(count, g.model)
        context = longest_context(chunks, c.retrieval.top_k, g.context_max_tokens, budget_count)
        calls = []
        if not g.is_reader:
            calls.append(
                ("answers", g.model, build_prompt(g.prompt_template, question, context), g.max_tokens)
            )
        if judge is not None:
            answer_room = g.max_tokens if not g.is_reader else 64
            calls.append(
                ("evaluations", judge.model, judge_prompt(question, "", context, judge.prompt), answer_room)
            )
        for stage_name, model, prompt, reply in calls:
            if model not in windows:
                windows[model] = window(model)
            limit = windows[model]
            if limit is None:
                continue
            verdict = JUDGE_REPLY_TOKENS if stage_name == "evaluations" else 0
            tokens = count(model, prompt) + TEMPLATE_TOKENS + reply + verdict
            if tokens > limit:
                found.setdefault((stage_name, model, limit), []).append((tokens, key))
    return [
        PastContext(stage, model, max(t for t, _ in hits), limit, tuple(k for _, k in hits))
        for (stage, model, limit), hits in found.items()
    ]

"""The work a question costs a config, counted, not timed: what orders tied configs by speed the same way
on any machine and under any load.

Measured latency is noisy: on the example, hybrid retrieval's p95 is about twice BM25's, so wherever the
line between "equally fast" and "slower" is drawn on measured times, some runs fall on each side of it and
the recommendation flips with the machine's load. The counts below follow from a config's settings and
what its evaluation recorded, so they are the same on every machine. A config *does more work* than
another when it does at least as much of every kind and more of one: a hybrid search where the other does
its vector half, a second hop, an LLM call where the other makes none. Only whole steps are counted: the
size of an index or of a context (a top_k of 4 against 1) changes a step's time by a little the
measurement may not resolve, and would otherwise decide against the better score. Configs neither of which
does more (a vector search against a BM25 one, an LLM reranker against a cross-encoder, top_k 1 against 4)
are left to the measured latency (rag_core/decision/recommendation.py).

Per question:
- `llm_calls`: the LLM calls of a query transform, reranking and generation (one a sample), as the
  settings fix them, and of the hop loop and context compression, as recorded; the judge's are the
  evaluation's, not the question's.
- `cross_encoder_pairs`: the candidates a cross-encoder scores.
- `searches_<kind>`: the searches made (a query each, times the hops): `vector` and `keyword` for the
  built-in modes (hybrid makes both), a plug-in mode's own kind.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from rag_core.components.readers import is_reader

# the LLM calls a question costs whose number varies (recorded by the evaluation, per question asked)
VARYING_CALLS = ("hop_llm_calls", "n_context_compression_calls")
BUILTIN_SEARCHES = {"vector": ("vector",), "bm25": ("keyword",), "hybrid": ("vector", "keyword")}


def _num(row: Mapping, col: str, default: float = 0.0) -> float:
    value = row.get(col)
    return default if value is None or value != value else float(value)  # None or NaN: not recorded


def work_per_question(row: Mapping) -> dict[str, float]:
    """A board row's counts (the module's docstring); a count the row does not record is 0 (as on a
    board from before it was recorded, where no config is then said to do more of it)."""
    questions = max(_num(row, "n_queries", 1.0), 1.0)
    # the calls the settings fix: one a question for a query transform and an LLM reranker, one a sample
    # for an LLM generator; the loop's and the compression's as recorded
    calls = sum(_num(row, c) for c in VARYING_CALLS) / questions
    calls += row.get("retrieval.query_transform") not in (None, "none")
    calls += row.get("rerank.method") == "llm"
    if (model := row.get("generation.model")) and not is_reader(model):
        calls += max(_num(row, "generation.samples", 1.0), 1.0)
    multi = row.get("retrieval.query_transform") == "multi_query"
    queries = _num(row, "retrieval.n_queries", 1.0) if multi else 1.0
    searches = queries * max(_num(row, "mean_hops", 1.0), 1.0)
    mode = row.get("retrieval.mode") or ""
    kinds = BUILTIN_SEARCHES.get(mode, (mode,) if mode else ())
    cross = row.get("rerank.method") == "cross_encoder"
    work = {"llm_calls": calls, "cross_encoder_pairs": _num(row, "rerank.candidates") if cross else 0.0}
    for kind in ("vector", "keyword", *kinds):
        work[f"searches_{kind}"] = searches if kind in kinds else 0.0
    return work


def more_work(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Whether `a` does more work than `b`: at least as much of every kind either counts, more of one."""
    kinds = set(a) | set(b)
    return all(a.get(k, 0.0) >= b.get(k, 0.0) for k in kinds) and any(
        a.get(k, 0.0) > b.get(k, 0.0) for k in kinds
    )


def least_work(pool: pl.DataFrame) -> pl.DataFrame:
    """The rows of `pool` no other row does less work than (never empty when `pool` is not)."""
    work = [work_per_question(r) for r in pool.iter_rows(named=True)]
    keep = [not any(more_work(w, other) for other in work) for w in work]
    return pool.filter(pl.Series(keep, dtype=pl.Boolean))


def describe_work(work: Mapping[str, float]) -> str:
    """`searches 1 vector + 1 keyword, LLM calls 1` (what is not 0), a question's."""

    def count(n: float) -> str:
        return f"{n:,.0f}" if abs(n - round(n)) < 0.005 else f"{n:,.2f}"

    kinds = [
        f"{count(n)} {k.removeprefix('searches_')}"
        for k, n in work.items()
        if k.startswith("searches_") and n
    ]
    parts = [f"searches {' + '.join(kinds)}"] if kinds else []
    for key, what in (("llm_calls", "LLM calls"), ("cross_encoder_pairs", "cross-encoder pairs")):
        if n := work.get(key):
            parts.append(f"{what} {count(n)}")
    return ", ".join(parts)

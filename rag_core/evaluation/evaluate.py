"""Evaluation of one config: per-query metrics, their means with 95% bootstrap intervals, chunk quality,
and the tokens, cost and latency of every LLM-calling stage."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from rag_core.chunking.chunkers import split_sentences
from rag_core.common.completion import NO_USAGE, Completer, usage
from rag_core.common.concurrency import map_concurrently
from rag_core.generation.generate import format_context
from rag_core.metrics import evaluate_queries, metric_columns, percentile, summarize
from rag_core.metrics.chunking import answer_coverage, cohesion_separation, length_stats
from rag_core.metrics.judge import JUDGE_PROMPT, judge_prompt, parse_verdict
from rag_core.metrics.stats import bootstrap_cis
from rag_core.planning.spec import RagConfig
from rag_core.retrieval.hops import loop_counts

# cohesion/separation's sample, bounded whatever one document's size: the first chunks in corpus order,
# the first sentences of each, each sentence cut where the encoder would stop reading anyway (~256 tokens).
# 100 chunks (300 before: on the example's paragraph chunkset 1,267 sentences and 6 s of a cold run's
# embedding, now 404 and 2 s; cohesion 0.377 -> 0.391, separation 0.393 -> 0.346, docs/metrics.md)
COHESION_SAMPLE = 100  # chunks
SENTENCES_PER_CHUNK = 32
SENTENCE_CHARS = 2000


def stage_costs(ret: pl.DataFrame, ans: pl.DataFrame, judge_usage: dict) -> dict[str, float]:
    """Tokens and cost (litellm's usage and cost table; 0 for local models) of every LLM-calling stage,
    their totals, and p50/p95 latency of the query transformation, reranking and context synthesis."""
    stages = {
        "query_transform": (ret["transform_tokens"].sum(), ret["transform_cost_usd"].sum()),
        "rerank": (ret["rerank_tokens"].sum(), ret["rerank_cost_usd"].sum()),
        "context": (ans["context_tokens"].sum(), ans["context_cost_usd"].sum()),
        "generation": (ans["prompt_tokens"].sum() + ans["completion_tokens"].sum(), ans["cost_usd"].sum()),
        "judge": (judge_usage["tokens"], judge_usage["cost_usd"]),
    }
    if "hop_tokens" in ret.columns:  # an iterative retrieval's loop (only then: the keys other configs had)
        stages["hops"] = (ret["hop_tokens"].sum(), ret["hop_cost_usd"].sum())
    out = {}
    for name, (tokens, cost) in stages.items():
        out[f"tokens_{name}"], out[f"cost_usd_{name}"] = float(tokens), float(cost)
    out["tokens"] = sum(out[f"tokens_{n}"] for n in stages)
    out["cost_usd"] = sum(out[f"cost_usd_{n}"] for n in stages)
    for name, col, frame in (
        ("query_transform", "transform_ms", ret),
        ("rerank", "rerank_ms", ret),
        ("context", "context_ms", ans),
    ):
        values = frame[col].to_list()
        out[f"{name}_p50_ms"], out[f"{name}_p95_ms"] = percentile(values, 50), percentile(values, 95)
    return out


def chunk_quality(
    chunks: pl.DataFrame,
    qa: pl.DataFrame,
    embed: Callable[[list[str]], np.ndarray],
    token_counts: Callable[[list[str]], list[int]],
    max_tokens: int | None,
) -> dict[str, float]:
    """The chunkset's own metrics on a QA set: the same for every config that shares the chunkset, the
    embedding model and the QA set."""
    cohesion, separation = chunk_cohesion_separation(chunks, embed)
    return {
        "chunk_count": float(chunks.height),
        "chunk_chars_mean": float(chunks["text"].str.len_chars().mean()),
        **length_stats(token_counts(chunks["index_text"].to_list()), max_tokens),
        "answer_coverage": answer_coverage(chunks["text"].to_list(), qa["answers"].to_list()),
        "chunk_cohesion": cohesion,
        "chunk_separation": separation,
    }


def chunk_cohesion_separation(chunks: pl.DataFrame, embed) -> tuple[float, float]:
    """Cohesion and separation (rag_core/metrics/chunking.py) on the chunkset's first COHESION_SAMPLE
    chunks, so that its cost is bounded by the sample, whatever the corpus's or one document's size."""
    blocks, sentences, taken = [], [], 0
    for _, doc in chunks.group_by("doc_id", maintain_order=True):
        if taken >= COHESION_SAMPLE:
            break
        for text in doc["text"][: COHESION_SAMPLE - taken]:
            sents = [t[:SENTENCE_CHARS] for t in split_sentences(text)[:SENTENCES_PER_CHUNK]]
            blocks.append(sents)
            sentences += sents
            taken += 1
        blocks.append(None)
    unique = list(dict.fromkeys(sentences))
    vec = dict(zip(unique, embed(unique), strict=True)) if unique else {}
    return cohesion_separation([None if b is None else [vec[s] for s in b] for b in blocks if b != []])


def judge(
    llm: Completer,
    model: str,
    qa: pl.DataFrame,
    ret: pl.DataFrame,
    ans: pl.DataFrame,
    template: str = JUDGE_PROMPT,
) -> tuple[dict, dict]:
    """LLM-judged faithfulness per query: None when the call failed or the verdict did not parse (counted
    as `n_judge_failures`); an empty answer scores 0 without a call, as in the lexical variant. Also returns
    the judge's total tokens, cost and milliseconds. `template`: the sweep's judge prompt (evaluation.
    judge_prompt), else the built-in one."""
    rows = list(
        qa.select("query_id", "question")
        .join(ret, on="query_id")
        .join(ans, on="query_id")
        .iter_rows(named=True)
    )

    def one(r: dict) -> tuple[float | None, dict]:
        if not (r["answer"] or "").strip():
            return 0.0, NO_USAGE
        if r.get("context_texts") is not None:  # what the generator saw, after context synthesis
            context = format_context(r["context_texts"])
        else:
            context = format_context(r["texts"] or [], r["titles"] or [])
        prompt = judge_prompt(r["question"], r["answer"], context, template)
        out = llm.complete(model, prompt, temperature=0.0, max_tokens=8)
        return (None if out.error else parse_verdict(out.text)), usage(out)

    results = map_concurrently(one, rows, llm.max_concurrency, what="answers judged")
    scores = {r["query_id"]: score for r, (score, _) in zip(rows, results, strict=True)}
    spent = {k: sum(u[k] for _, u in results) for k in NO_USAGE}
    return scores, spent


def judge_row(
    llm: Completer, model: str, row: dict, template: str = JUDGE_PROMPT
) -> tuple[float | None, str]:
    """The judge's score of one labelled row (question, answer, context), asked exactly as the sweep's
    evaluation asks it, and why there is none: (None, reason) for a failed call or a verdict that did not
    parse; an empty answer scores 0, no call. `template`: another judge prompt with the same fields."""
    if not row["answer"].strip():
        return 0.0, ""
    prompt = judge_prompt(row["question"], row["answer"], row["context"], template)
    reply = llm.complete(model, prompt, temperature=0.0, max_tokens=8)
    if reply.error:
        return None, f"the call failed: {reply.error}"
    score = parse_verdict(reply.text)
    return score, "" if score is not None else f"the verdict did not parse: {reply.text[:200]!r}"


def judge_labelled(
    llm: Completer, model: str, rows: list[dict], template: str = JUDGE_PROMPT
) -> list[float | None]:
    """The judge's score of each labelled row (`judge_row`); None for a failed call or a verdict that did
    not parse."""
    return map_concurrently(
        lambda row: judge_row(llm, model, row, template)[0],
        rows,
        llm.max_concurrency,
        what="labelled answers judged",
    )


def evaluate(
    c: RagConfig,
    qa: pl.DataFrame,
    reranked: pl.DataFrame,
    answers: pl.DataFrame,
    chunks: pl.DataFrame,
    embed: Callable[[list[str]], np.ndarray],
    chunk_vectors: dict[str, np.ndarray],
    token_counts: Callable[[list[str]], list[int]],
    max_tokens: int | None,
    judged: Callable[[pl.DataFrame], tuple[dict, dict]] | None,
    language: str | None = None,
    quality: dict[str, float] | None = None,
) -> tuple[pl.DataFrame, dict[str, float | None]]:
    """(per-query metrics, summary): metric means (None where no query defines one) with their 95% bootstrap intervals, chunk quality
    (with the share of chunks longer than the embedder's `max_tokens`), per-stage usage and fallback counts. `judged(answers)` is the judge's (scores, usage) when a judge is set.
    Several answers per question (`sample`, a random generator): each is scored, and a question's metrics
    are their means (`n_samples`); the per-sample rows are `per_sample_metrics(per_query)`. `quality`:
    `chunk_quality` of these chunks and QA set where the caller has it already (it is the chunkset's)."""
    samples = answers["sample"].unique().sort().to_list() if "sample" in answers.columns else [0]
    frames, judge_usage = [], dict(NO_USAGE)
    for i in samples:
        ans = answers.filter(pl.col("sample") == i) if len(samples) > 1 else answers
        verdicts = judged(ans) if judged else None
        if verdicts:
            judge_usage = {k: judge_usage[k] + v for k, v in verdicts[1].items()}
        scored = evaluate_queries(
            qa,
            reranked,
            ans.drop("sample", strict=False),
            c.retrieval.top_k * c.retrieval.max_hops,  # every hop's documents count (top_k each)
            embed=embed,
            chunk_vectors=chunk_vectors,
            judge_scores=verdicts[0] if verdicts else None,
            max_hops=c.retrieval.max_hops,
            language=language,
        )
        frames.append(scored.with_columns(pl.lit(i, pl.Int64).alias("sample")))
    per_query = frames[0].drop("sample") if len(frames) == 1 else mean_over_samples(pl.concat(frames))
    metrics = summarize(per_query)
    defined = [m for m in metric_columns(per_query) if metrics[m] is not None]
    intervals = dict(
        zip(
            defined,
            bootstrap_cis([per_query[m].fill_null(float("nan")).to_numpy() for m in defined]),
            strict=True,
        )
    )
    for m in metric_columns(per_query):  # 95% bootstrap interval of each mean over queries
        # undefined for every query, too few questions or no spread (stats.why_no_estimate): no interval
        metrics[f"{m}_ci_low"], metrics[f"{m}_ci_high"] = intervals.get(m) or (None, None)
    if quality is None:
        quality = chunk_quality(chunks, qa, embed, token_counts, max_tokens)
    metrics |= {
        **quality,
        **stage_costs(reranked, answers, judge_usage),
        "n_samples": float(len(samples)),
        "generation_prompt_tokens": float(answers["prompt_tokens"].sum()),
        "generation_completion_tokens": float(answers["completion_tokens"].sum()),
        "n_query_transform_fallbacks": float(reranked["transform_fallback"].sum()),
        "n_rerank_fallbacks": float(reranked["rerank_fallback"].sum()),
        "n_context_compression_fallbacks": float(answers["context_fallbacks"].sum()),
        **llm_calls(c, per_query, reranked, answers, judged is not None),
    }
    if c.retrieval.iterates:
        metrics |= hop_summary(per_query, reranked, c.retrieval.max_hops)
    return per_query, metrics


def llm_calls(
    c: RagConfig, per_query: pl.DataFrame, reranked: pl.DataFrame, answers: pl.DataFrame, judged: bool
) -> dict[str, float]:
    """The calls each LLM-backed stage made, against which its failed or fallen-back calls are counted
    (rag_core/decision/qualification.LLM_STAGES; the hop loop counts its own, `hop_llm_calls`). Generation
    and the judge count questions, as their failures do (a question's samples: one)."""
    questions = float(per_query.height)
    if "context_calls" in answers.columns:
        compress = float(answers["context_calls"].sum())
    else:  # answers from before the calls were counted: at least the blocks that fell back
        compress = float(answers["context_fallbacks"].sum())
    return {
        "n_query_transform_calls": float(reranked.height) if c.retrieval.query_transform != "none" else 0.0,
        "n_rerank_calls": float(reranked.height) if c.rerank.method == "llm" else 0.0,
        "n_context_compression_calls": compress if c.generation.context == "compress" else 0.0,
        "n_generation_calls": 0.0 if c.generation.is_reader else questions,
        "n_judge_calls": questions if judged else 0.0,
    }


def hop_summary(per_query: pl.DataFrame, ret: pl.DataFrame, max_hops: int) -> dict[str, float | None]:
    """An iterative retrieval's figures: recall after each hop, stop accuracy and wasted hops (means over
    the questions with gold documents), the mean hops, and the loop's LLM calls and fallbacks."""

    def mean(col: str) -> float | None:
        values = per_query[col].drop_nulls()
        return float(values.mean()) if values.len() else None

    out = {f"recall_hop_{h}": mean(f"recall_hop_{h}") for h in range(1, max_hops + 1)}
    counts = loop_counts(ret)
    out |= {
        "mean_hops": mean("hops"),
        "stop_accuracy": mean("stop_correct"),
        "mean_wasted_hops": mean("wasted_hops"),
        "hop_llm_calls": float(counts.pop("llm_calls")),
        "n_hop_fallbacks": float(counts.pop("fallbacks")),
        **{f"n_{k}": float(n) for k, n in counts.items()},  # n_stopped_<reason>
    }
    return out


HOP_FIGURES = ("hops", "stop_correct", "wasted_hops")  # one retrieval per question: the same in every sample


def mean_over_samples(per_sample: pl.DataFrame) -> pl.DataFrame:
    """One row per question from its samples' rows: every metric and latency the mean over the samples
    (a metric a sample leaves undefined is left out of its mean), the first sample's answer, the first
    error, and the samples' metrics as lists (`samples_<metric>`) for the variance split."""
    metrics = [m for m in (*metric_columns(per_sample), "retrieval_ms", "generation_ms")]
    return (
        per_sample.sort("query_id", "sample")
        .group_by("query_id", maintain_order=True)
        .agg(
            pl.col("answer").first(),
            pl.col("error").drop_nulls().first(),
            *[pl.col(m).mean() for m in metrics],
            *[pl.col(m).alias(f"samples_{m}") for m in metric_columns(per_sample)],
            *[
                pl.col(m).first()
                for m in per_sample.columns
                if m in HOP_FIGURES or m.startswith("recall_hop_")
            ],
            pl.len().alias("n_samples"),
        )
    )


def variance_split(per_query: pl.DataFrame, weights: dict[str, float]) -> dict[str, float] | None:
    """How much of the overall score's per-question variance is between questions and how much within a
    question (sampling: a random generator's answers to the same question), from the per-sample scores
    `mean_over_samples` keeps; None with one sample per question. Within: the mean over questions of the
    variance of its samples' weighted scores (ddof 1); between: the variance over questions of their means."""
    if "n_samples" not in per_query.columns or per_query["n_samples"].max() < 2:
        return None
    metrics = [m for m in weights if f"samples_{m}" in per_query.columns]
    w = np.array([weights[m] for m in metrics], dtype=float)
    rows = []
    for r in per_query.iter_rows(named=True):
        values = np.array([r[f"samples_{m}"] for m in metrics], dtype=float).T  # samples × metrics
        have = ~np.isnan(values)
        total, weight = np.where(have, values, 0.0) @ w, have.astype(float) @ w
        rows.append(np.divide(total, weight, out=np.zeros_like(total), where=weight > 0))
    within = float(np.mean([np.var(s, ddof=1) for s in rows]))
    between = float(np.var([np.mean(s) for s in rows], ddof=1)) if len(rows) > 1 else 0.0
    total = within + between
    return {
        "score_var_between_questions": between,
        "score_var_within_questions": within,
        "sampling_share": within / total if total > 0 else 0.0,
    }


def per_question_table(per_query: pl.DataFrame, qa: pl.DataFrame, retrieved: pl.DataFrame) -> pl.DataFrame:
    """One row per question to read a config's results by: the question, its gold answers and documents,
    what was retrieved (ids and titles, in rank order), the answer and every metric."""
    gold = qa.select(
        "query_id",
        "question",
        pl.col("answers").alias("gold_answers"),
        pl.col("relevant_doc_ids").alias("gold_doc_ids"),
    )
    got = retrieved.select(
        "query_id",
        pl.col("doc_ids").alias("retrieved_doc_ids"),
        *([pl.col("titles").alias("retrieved_titles")] if "titles" in retrieved.columns else []),
    )
    return gold.join(got, on="query_id", how="left").join(per_query, on="query_id", how="left")


def language_slices(
    per_query: pl.DataFrame, qa: pl.DataFrame, weights: dict[str, float], language: str | None = None
) -> dict[str, float | None]:
    """For a QA set in several languages (its `language` column, else `language`, else "default"): per
    language, the overall score over its questions by the leaderboard's rule (the weighted mean of the metric
    means, a metric no question of the slice defines left out; None when none is defined) and their count.
    Empty for a QA set in one language."""
    if "language" not in qa.columns:
        return {}
    of = {
        q: lang or language or "default"
        for q, lang in zip(qa["query_id"].to_list(), qa["language"].to_list(), strict=True)
    }
    if len(set(of.values())) < 2:
        return {}
    out: dict[str, float | None] = {}
    for lang in sorted(set(of.values())):
        part = per_query.filter(pl.col("query_id").is_in([q for q, x in of.items() if x == lang]))
        means = {m: part[m].drop_nulls().mean() for m in weights if m in part.columns}
        defined = {m: w for m, w in weights.items() if means.get(m) is not None and w > 0}
        total = sum(defined.values())
        out[f"score_lang_{lang}"] = sum(means[m] * w for m, w in defined.items()) / total if total else None
        out[f"n_questions_lang_{lang}"] = float(part.height)
    return out

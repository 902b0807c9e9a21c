"""GEPA's adapter over this project's own stages: a candidate (the text components of a config) is scored
by answering questions with the config's retrieved contexts and the candidate's prompts (the sweep's
`answer` stage function), then scoring each answer with the sweep's metrics and weights (the per-question
overall score of the leaderboard). The reflective dataset gives the reflection model, per question, what it
needs to see why an answer failed: the question, the retrieved titles and snippets, the component's input
and output, the gold answers, each metric and what went wrong.

Retrieval and reranking do not read the answer prompt, so the config's rerankings are reused: only the
LLM stages after them run again. Every call goes through the Completer it is given (the project's client:
call cache and ledger, rate limit, redaction).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
from gepa import EvaluationBatch, GEPAAdapter

from rag_core.common.completion import Completer
from rag_core.generation.answering import answer
from rag_core.generation.generate import format_context
from rag_core.metrics import evaluate_queries
from rag_core.planning.spec import RagConfig
from rag_core.search.halving import question_scores

SNIPPET = 240  # characters of each retrieved text the reflection model is shown
PLACEHOLDERS = {"answer_prompt": ("{query}", "{context}"), "compress_prompt": ("{query}", "{passage}")}


def seed_candidate(c: RagConfig, components: list[str]) -> dict[str, str]:
    """The config's current text of each component: where the evolution starts."""
    return {name: c.text(name) for name in components}


def missing_placeholders(candidate: dict[str, str]) -> list[str]:
    """The placeholders a candidate's texts lack (a prompt without {context} cannot carry the context)."""
    return [
        f"{component}: {p}"
        for component, text in candidate.items()
        for p in PLACEHOLDERS.get(component, ())
        if p not in text
    ]


def _feedback(row: dict, score: float, weights: dict[str, float]) -> str:
    """What went wrong with one answer, in words the reflection model can act on."""
    notes = []
    if row.get("error"):
        notes.append(f"the generator's call failed ({row['error'][:200]})")
    elif not (row.get("answer") or "").strip():
        notes.append("the answer is empty")
    if row.get("exact_match") == 0:
        notes.append(
            "the answer is not exactly one of the gold answers (after lowercasing and removing punctuation)"
        )
    if row.get("token_f1") is not None and row["token_f1"] < 1:
        notes.append(
            f"it shares only part of its words with the best gold answer (token F1 {row['token_f1']:.2f})"
        )
    if row.get("recall_at_k") == 0:
        notes.append(
            "no gold document was retrieved, so the context may not hold the answer (no prompt fixes that)"
        )
    metrics = ", ".join(f"{m} {row[m]:.2f}" for m in weights if row.get(m) is not None)
    verdict = "; ".join(notes) if notes else "correct"
    return f"score {score:.2f} ({metrics}): {verdict}"


class PromptAdapter(GEPAAdapter):
    """`qa`: the questions GEPA may draw (selection split only: the caller never passes the holdout), one
    row per question with query_id, question, answers, relevant_doc_ids; `reranked`: the config's final
    contexts per question (the rerankings artifact); `weights`: the sweep's score weights. A batch GEPA
    evaluates is a list of query ids."""

    propose_new_texts = None  # GEPA asks the reflection model (its default proposer)

    def __init__(
        self,
        config: RagConfig,
        qa: pl.DataFrame,
        reranked: pl.DataFrame,
        weights: dict[str, float],
        llm: Completer,
        count_tokens: Callable[[str], int],
        parents: Callable[[], tuple[pl.DataFrame, pl.DataFrame]] = lambda: (None, None),
    ):
        self.config, self.weights, self.llm = config, weights, llm
        self.qa, self.reranked = qa, reranked.filter(pl.col("query_id").is_in(qa["query_id"].to_list()))
        self.count_tokens, self.parents = count_tokens, parents

    def scored(self, ids: list[str], candidate: dict[str, str]) -> tuple[pl.DataFrame, list[float]]:
        """(per-question rows: the answer, its metrics; scores) of the candidate on questions `ids`."""
        c = self.config.with_texts(candidate)
        qa = self.qa.filter(pl.col("query_id").is_in(ids))
        reranked = self.reranked.filter(pl.col("query_id").is_in(ids))
        answers = answer(c, qa, reranked, self.llm, self.count_tokens, self.parents)
        frames = []
        for sample in sorted(set(answers["sample"].to_list())):  # a random generator's samples: their mean
            ans = answers.filter(pl.col("sample") == sample).drop("sample")
            scored = evaluate_queries(qa, reranked, ans, c.retrieval.top_k)
            # a question's overall score (0 when no weighted metric is defined for it: GEPA sums scores)
            scores = question_scores(scored, self.weights)
            frames.append(scored.with_columns(pl.Series("score", [scores[q] for q in scored["query_id"]])))
        rows = frames[0]
        if len(frames) > 1:
            mean = pl.concat(frames).group_by("query_id").agg(pl.col("score").mean())
            rows = rows.drop("score").join(mean, on="query_id")
        order = {q: i for i, q in enumerate(ids)}
        rows = rows.sort(pl.col("query_id").replace_strict(order, return_dtype=pl.Int64))
        return rows, rows["score"].to_list()

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False):
        if missing := missing_placeholders(candidate):  # unusable: every question fails, and says why
            why = f"the prompt lacks {', '.join(missing)}: it cannot be filled in"
            outputs = [{"query_id": q, "answer": "", "error": why} for q in batch]
            traces = [{"query_id": q, "row": {"unusable": why}, "score": 0.0} for q in batch]
            return EvaluationBatch(outputs=outputs, scores=[0.0] * len(batch), trajectories=traces)
        rows, scores = self.scored(batch, candidate)
        records = list(rows.iter_rows(named=True))
        outputs = [{"query_id": r["query_id"], "answer": r["answer"], "error": r["error"]} for r in records]
        traces = [
            {"query_id": r["query_id"], "row": r, "score": s} for r, s in zip(records, scores, strict=True)
        ]
        return EvaluationBatch(
            outputs=outputs, scores=scores, trajectories=traces if capture_traces else None
        )

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        contexts = {r["query_id"]: r for r in self.reranked.iter_rows(named=True)}
        questions = {r["query_id"]: r for r in self.qa.iter_rows(named=True)}
        records = []
        for trace in eval_batch.trajectories or []:
            q, row = questions[trace["query_id"]], trace["row"]
            ctx = contexts.get(trace["query_id"]) or {}
            snippets = [t[:SNIPPET] for t in ctx.get("texts") or []]
            records.append(
                {
                    "Inputs": {
                        "question": q["question"],
                        "retrieved context (titles and snippets)": format_context(
                            snippets, ctx.get("titles") or None
                        ),
                    },
                    "Generated Outputs": row.get("answer") or "",
                    "Gold answers": ", ".join(q["answers"] or []) or "(none)",
                    "Feedback": (
                        f"score 0.00: {row['unusable']}"
                        if "unusable" in row
                        else _feedback(row, trace["score"], self.weights)
                    ),
                }
            )
        return {component: records for component in components_to_update}

"""GEPA's adapter over this project's own stages: a candidate (the text components of a config) is scored
by running the config's stages with the candidate's texts on a batch of questions (from the first stage an
optimized component changes: rag_core/optimization/contexts.py, then the sweep's `answer` stage function),
then scoring each answer with the sweep's metrics and weights (the per-question overall score of the
leaderboard). The reflective dataset gives the reflection model, per question and component, what it needs
to see why an answer failed: the question, the retrieved titles and snippets, the component's input and
output, the gold answers, each metric and what went wrong.

Every call goes through the Completer it is given (the project's client: call cache and ledger, rate limit,
redaction).
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
from rag_core.optimization.contexts import Contexts
from rag_core.planning.prompts import missing
from rag_core.planning.spec import COMPONENT_STAGES, PROMPT_COMPONENTS, RagConfig
from rag_core.search.halving import question_scores

SNIPPET = 240  # characters of each retrieved text the reflection model is shown


def seed_candidate(c: RagConfig, components: list[str]) -> dict[str, str]:
    """The config's current text of each component: where the evolution starts."""
    return {name: c.text(name) for name in components}


def missing_placeholders(candidate: dict[str, str]) -> list[str]:
    """The placeholders a candidate's texts lack (a prompt without {context} cannot carry the context)."""
    return [
        f"{component}: {p}"
        for component, text in candidate.items()
        for p in missing(PROMPT_COMPONENTS[component].split(".")[1], text)
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
            "no gold document was retrieved, so the context may not hold the answer (no answer prompt fixes that)"
        )
    metrics = ", ".join(f"{m} {row[m]:.2f}" for m in weights if row.get(m) is not None)
    verdict = "; ".join(notes) if notes else "correct"
    return f"score {score:.2f} ({metrics}): {verdict}"


def _gold_found(doc_ids: list[str], gold: list[str]) -> str:
    """Where the gold documents are in a ranking, in words."""
    if not gold:
        return "the question has no gold document"
    at = [f"#{doc_ids.index(g) + 1}" for g in gold if g in doc_ids]
    return f"{len(at)} of {len(gold)} gold document(s) among them" + (f" (at {', '.join(at)})" if at else "")


def _numbered(titles: list[str], texts: list[str]) -> str:
    return "\n".join(
        f"[{i}] {ti}: {te[:SNIPPET]}" for i, (ti, te) in enumerate(zip(titles, texts, strict=True), 1)
    )


class PromptAdapter(GEPAAdapter):
    """`qa`: the questions GEPA may draw (selection split only: the caller never passes the holdout), one
    row per question with query_id, question, answers, relevant_doc_ids; `contexts`: the config's stages
    before the answers (reused, or run again with a candidate's texts); `weights`: the sweep's score
    weights. A batch GEPA evaluates is a list of query ids."""

    propose_new_texts = None  # GEPA asks the reflection model (its default proposer)

    def __init__(
        self,
        config: RagConfig,
        qa: pl.DataFrame,
        contexts: Contexts,
        weights: dict[str, float],
        llm: Completer,
        count_tokens: Callable[[str], int],
        parents: Callable[[], tuple[pl.DataFrame, pl.DataFrame]] = lambda: (None, None),
    ):
        self.config, self.qa, self.contexts, self.weights, self.llm = config, qa, contexts, weights, llm
        self.count_tokens, self.parents = count_tokens, parents
        # (query id, texts of the components before the answers) -> (retrieved row or None, reranked row):
        # a candidate that changes only answer-side texts never retrieves or reranks again
        self._memo: dict[tuple, tuple[dict | None, dict]] = {}
        self._schemas: tuple[Any, Any] = (None, None)

    def _upstream(self, candidate: dict[str, str]) -> tuple:
        return tuple(sorted((k, v) for k, v in candidate.items() if COMPONENT_STAGES[k] != "answers"))

    def context_rows(self, ids: list[str], c: RagConfig, candidate: dict[str, str]) -> pl.DataFrame:
        """The reranked rows of config `c` (the candidate's) on questions `ids`, in their order."""
        up = self._upstream(candidate)
        todo = [q for q in ids if (q, up) not in self._memo]
        if todo:
            retrieved, reranked = self.contexts(c, self.qa.filter(pl.col("query_id").is_in(todo)), self.llm)
            self._schemas = (None if retrieved is None else retrieved.schema, reranked.schema)
            before = {} if retrieved is None else {r["query_id"]: r for r in retrieved.iter_rows(named=True)}
            for r in reranked.iter_rows(named=True):
                self._memo[(r["query_id"], up)] = (before.get(r["query_id"]), r)
        rows = [self._memo[(q, up)][1] for q in ids if (q, up) in self._memo]
        return pl.DataFrame(rows, schema=self._schemas[1])

    def scored(self, ids: list[str], candidate: dict[str, str]) -> tuple[pl.DataFrame, list[float]]:
        """(per-question rows: the answer, its metrics, the contexts; scores) of the candidate on `ids`."""
        c = self.config.with_texts(candidate)
        qa = self.qa.filter(pl.col("query_id").is_in(ids))
        reranked = self.context_rows(ids, c, candidate)
        answers = answer(c, qa, reranked, self.llm, self.count_tokens, self.parents)
        frames = []
        for sample in sorted(set(answers["sample"].to_list())):  # a random generator's samples: their mean
            ans = answers.filter(pl.col("sample") == sample).drop("sample")
            scored = evaluate_queries(qa, reranked, ans, c.retrieval.top_k)
            # a question's overall score (0 when no weighted metric is defined for it: GEPA sums scores)
            scores = question_scores(scored, self.weights)
            context = ans.select("query_id", "context_texts")
            frames.append(
                scored.with_columns(pl.Series("score", [scores[q] for q in scored["query_id"]])).join(
                    context, on="query_id", how="left"
                )
            )
        rows = frames[0]
        if len(frames) > 1:
            mean = pl.concat(frames).group_by("query_id").agg(pl.col("score").mean())
            rows = rows.drop("score").join(mean, on="query_id")
        order = {q: i for i, q in enumerate(ids)}
        rows = rows.sort(pl.col("query_id").replace_strict(order, return_dtype=pl.Int64))
        return rows, rows["score"].to_list()

    def evaluate(self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False):
        if missing_ := missing_placeholders(candidate):  # unusable: every question fails, and says why
            why = f"the prompt lacks {', '.join(missing_)}: it cannot be filled in"
            outputs = [{"query_id": q, "answer": "", "error": why} for q in batch]
            traces = [{"query_id": q, "row": {"unusable": why}, "score": 0.0} for q in batch]
            return EvaluationBatch(outputs=outputs, scores=[0.0] * len(batch), trajectories=traces)
        rows, scores = self.scored(batch, candidate)
        records = list(rows.iter_rows(named=True))
        outputs = [{"query_id": r["query_id"], "answer": r["answer"], "error": r["error"]} for r in records]
        up = self._upstream(candidate)
        traces = [
            {
                "query_id": r["query_id"],
                "row": r,
                "score": s,
                "contexts": self._memo.get((r["query_id"], up), (None, {})),
            }
            for r, s in zip(records, scores, strict=True)
        ]
        return EvaluationBatch(
            outputs=outputs, scores=scores, trajectories=traces if capture_traces else None
        )

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch, components_to_update: list[str]
    ) -> dict[str, list[dict[str, Any]]]:
        questions = {r["query_id"]: r for r in self.qa.iter_rows(named=True)}
        top_k = self.config.retrieval.top_k
        out: dict[str, list[dict[str, Any]]] = {}
        for component in components_to_update:
            records = []
            for trace in eval_batch.trajectories or []:
                q, row = questions[trace["query_id"]], trace["row"]
                retrieved, ctx = trace.get("contexts") or (None, {})
                gold = list(q.get("relevant_doc_ids") or [])
                feedback = (
                    f"score 0.00: {row['unusable']}"
                    if "unusable" in row
                    else _feedback(row, trace["score"], self.weights)
                )
                snippets = [t[:SNIPPET] for t in ctx.get("texts") or []]
                context = format_context(snippets, ctx.get("titles") or None)
                record: dict[str, Any] = {
                    "Inputs": {"question": q["question"], "retrieved context (titles and snippets)": context},
                    "Generated Outputs": row.get("answer") or "",
                }
                if component == "rewrite_prompt":
                    searched = " | ".join(ctx.get("queries") or [])
                    fell_back = " (the reply was unusable: the question itself was searched)"
                    record = {
                        "Inputs": {"question": q["question"]},
                        "Generated Outputs": searched + (fell_back if ctx.get("transform_fallback") else ""),
                        "Retrieved (titles, in rank order)": ", ".join(ctx.get("titles") or [])
                        or "(nothing)",
                        "Retrieval": _gold_found(list(ctx.get("doc_ids") or []), gold),
                        "Answer": row.get("answer") or "",
                    }
                elif component == "rerank_prompt" and retrieved is not None:
                    kept = [retrieved["chunk_ids"].index(x) + 1 for x in ctx.get("chunk_ids") or []]
                    record = {
                        "Inputs": {
                            "question": q["question"],
                            "candidate passages": _numbered(retrieved["titles"], retrieved["texts"]),
                        },
                        "Generated Outputs": (
                            f"kept, in this order: {', '.join(map(str, kept))}"
                            + (
                                " (the reply was unusable: the retrieval order was kept)"
                                if ctx.get("rerank_fallback")
                                else ""
                            )
                        ),
                        "Reranking": f"of the candidates, {_gold_found(list(retrieved['doc_ids']), gold)}; "
                        f"of the {top_k} kept, {_gold_found(list(ctx.get('doc_ids') or []), gold)}",
                        "Answer": row.get("answer") or "",
                    }
                elif component == "compress_prompt":
                    kept = row.get("context_texts") or []
                    record["Generated Outputs"] = (
                        "\n".join(f"[{i}] {t}" for i, t in enumerate(kept, 1)) or "(nothing kept)"
                    )
                    record["Answer"] = row.get("answer") or ""
                record["Gold answers"] = ", ".join(q["answers"] or []) or "(none)"
                record["Feedback"] = feedback
                records.append(record)
            out[component] = records
        return out

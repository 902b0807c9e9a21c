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
MAX_TITLES = 10  # retrieved titles the reflection model is shown for a query prompt


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


def _feedback(row: dict, score: float, weights: dict[str, float], answer_side: bool = True) -> str:
    """What went wrong with one answer, in words the reflection model can act on (`answer_side`: shown to
    a prompt that reads the retrieved contexts, which it cannot change)."""
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
            if answer_side
            else "no gold document is in the final context, so it may not hold the answer"
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


def retrieval_texts(candidate: dict[str, str]) -> tuple:
    """The candidate's texts that decide what retrieval finds (the query prompt, an iterative retrieval's
    sufficiency and refine prompts): the key its retrieved rows are reused under."""
    return tuple(candidate.get(c) for c, stage in COMPONENT_STAGES.items() if stage == "retrievals")


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
        language: str | None = None,
    ):
        self.config, self.qa, self.contexts, self.weights, self.llm = config, qa, contexts, weights, llm
        self.language = language  # the QA set's, as the sweep's evaluation scores it
        self.count_tokens, self.parents = count_tokens, parents
        # what the stages before the answers gave each question, per text of the prompts they read: a
        # candidate that changes only answer-side texts never retrieves or reranks again, one that changes
        # only the rerank prompt never searches again
        self._retrieved: dict[tuple, dict | None] = {}  # (query id, retrieval texts) -> retrieved row
        self._reranked: dict[tuple, dict] = {}  # (query id, query prompt, rerank prompt) -> reranked row
        self._schema: Any = None
        self._retrieved_schema: Any = None

    def _of(self, ids: list[str]) -> pl.DataFrame:
        return self.qa.filter(pl.col("query_id").is_in(ids))

    def context_rows(self, ids: list[str], c: RagConfig, candidate: dict[str, str]) -> pl.DataFrame:
        """The reranked rows of config `c` (the candidate's) on questions `ids`, in their order."""
        rw, rr = retrieval_texts(candidate), candidate.get("rerank_prompt")
        todo = [q for q in ids if (q, rw, rr) not in self._reranked]
        if todo:
            search = [q for q in todo if (q, rw) not in self._retrieved]
            if search:
                found = self.contexts.retrieval(c, self._of(search), self.llm)
                rows = {} if found is None else {r["query_id"]: r for r in found.iter_rows(named=True)}
                self._retrieved.update({(q, rw): rows.get(q) for q in search})
                self._retrieved_schema = None if found is None else found.schema
            before = [self._retrieved[(q, rw)] for q in todo]
            retrieved = (
                None
                if any(r is None for r in before)
                else pl.DataFrame(before, schema=self._retrieved_schema)
            )
            reranked = self.contexts.reranking(c, retrieved, self._of(todo), self.llm)
            self._schema = reranked.schema
            self._reranked.update({(r["query_id"], rw, rr): r for r in reranked.iter_rows(named=True)})
        return pl.DataFrame([self._reranked[(q, rw, rr)] for q in ids], schema=self._schema)

    def _contexts_of(self, q: str, candidate: dict[str, str]) -> tuple[dict | None, dict]:
        """(the retrieved row, or None when retrieval is reused; the reranked row) of question `q`."""
        rw, rr = retrieval_texts(candidate), candidate.get("rerank_prompt")
        return self._retrieved.get((q, rw)), self._reranked.get((q, rw, rr), {})

    def scored(self, ids: list[str], candidate: dict[str, str]) -> tuple[pl.DataFrame, list[float]]:
        """(per-question rows: the answer, its metrics, the contexts; scores) of the candidate on `ids`."""
        c = self.config.with_texts(candidate)
        qa = self._of(ids)
        reranked = self.context_rows(ids, c, candidate)
        answers = answer(c, qa, reranked, self.llm, self.count_tokens, self.parents)
        frames = []
        for sample in sorted(set(answers["sample"].to_list())):  # a random generator's samples: their mean
            ans = answers.filter(pl.col("sample") == sample).drop("sample")
            r = c.retrieval  # every hop's documents count (top_k each), as the sweep's evaluation does
            scored = evaluate_queries(
                qa, reranked, ans, r.top_k * r.max_hops, max_hops=r.max_hops, language=self.language
            )
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
        traces = [
            {
                "query_id": r["query_id"],
                "row": r,
                "score": s,
                "contexts": self._contexts_of(r["query_id"], candidate),
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
        out: dict[str, list[dict[str, Any]]] = {}
        for component in components_to_update:
            records = []
            for trace in eval_batch.trajectories or []:
                q, row = questions[trace["query_id"]], trace["row"]
                retrieved, ctx = trace.get("contexts") or (None, {})
                if COMPONENT_STAGES[component] == "retrievals":  # the query prompt, the hop prompts
                    record = self._search_record(q, row, retrieved, ctx)
                elif component == "rerank_prompt" and retrieved is not None:
                    record = _rerank_record(q, row, retrieved, ctx)
                else:
                    record = _answer_record(q, row, ctx, component)
                answer_side = COMPONENT_STAGES[component] == "answers"
                record["Gold answers"] = ", ".join(q["answers"] or []) or "(none)"
                record["Feedback"] = (
                    f"score 0.00: {row['unusable']}"
                    if "unusable" in row
                    else _feedback(row, trace["score"], self.weights, answer_side)
                )
                records.append(record)
            out[component] = records
        return out

    def _search_record(self, q: dict, row: dict, retrieved: dict | None, ctx: dict) -> dict[str, Any]:
        """What the query prompt read and wrote for one question: the queries searched, what they found
        before any reranking and where the gold documents are."""
        found = retrieved or ctx
        fell_back = " (the reply was unusable: the question itself was searched)"
        titles = list(found.get("titles") or [])
        shown = ", ".join(titles[:MAX_TITLES])
        shown += f" … ({len(titles)} in all)" if len(titles) > MAX_TITLES else ""
        gold = list(q.get("relevant_doc_ids") or [])
        retrieval = f"of the {len(titles)} retrieved, {_gold_found(list(found.get('doc_ids') or []), gold)}"
        if self.config.rerank.method != "none":
            kept = list(ctx.get("doc_ids") or [])
            retrieval += f"; of the {len(kept)} kept after reranking, {_gold_found(kept, gold)}"
        return {
            "Inputs": {"question": q["question"]},
            "Generated Outputs": " | ".join(found.get("queries") or [])
            + (fell_back if found.get("transform_fallback") else ""),
            "Retrieved (titles, in rank order)": shown or "(nothing)",
            "Retrieval": retrieval,
            "Answer": row.get("answer") or "",
        }


def _rerank_record(q: dict, row: dict, retrieved: dict, ctx: dict) -> dict[str, Any]:
    """What the rerank prompt read and wrote for one question: the numbered candidates, the order it kept
    and where the gold documents are before and after."""
    kept = [retrieved["chunk_ids"].index(x) + 1 for x in ctx.get("chunk_ids") or []]
    gold = list(q.get("relevant_doc_ids") or [])
    fell_back = (
        " (the reply was unusable: the retrieval order was kept)" if ctx.get("rerank_fallback") else ""
    )
    return {
        "Inputs": {
            "question": q["question"],
            "candidate passages": _numbered(retrieved["titles"], retrieved["texts"]),
        },
        "Generated Outputs": f"kept, in this order: {', '.join(map(str, kept))}{fell_back}",
        "Reranking": f"of the candidates, {_gold_found(list(retrieved['doc_ids']), gold)}; "
        f"of the {len(kept)} kept, {_gold_found(list(ctx.get('doc_ids') or []), gold)}",
        "Answer": row.get("answer") or "",
    }


def _answer_record(q: dict, row: dict, ctx: dict, component: str) -> dict[str, Any]:
    """What an answer-side prompt read and wrote for one question: the question, the retrieved titles and
    snippets, the answer (the compression prompt: the passages it kept, then the answer)."""
    snippets = [t[:SNIPPET] for t in ctx.get("texts") or []]
    record: dict[str, Any] = {
        "Inputs": {
            "question": q["question"],
            "retrieved context (titles and snippets)": format_context(snippets, ctx.get("titles") or None),
        },
        "Generated Outputs": row.get("answer") or "",
    }
    if component == "compress_prompt":
        kept = row.get("context_texts") or []
        record["Generated Outputs"] = (
            "\n".join(f"[{i}] {t}" for i, t in enumerate(kept, 1)) or "(nothing kept)"
        )
        record["Answer"] = row.get("answer") or ""
    return record

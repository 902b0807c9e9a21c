"""How trustworthy a QA set is, measured on the set and its corpus (the QA set's asset checks report these).

The loader already rejects what no run could use (empty questions or answers, duplicate query ids, gold
ids outside the corpus when it is given); these figures flag what a run can use but a team should look at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from rag_core.common.text import normalize_answer

MIN_ANSWER_IN_GOLD = 0.5  # below: many reference answers are not in their gold passages (a check warns)


@dataclass
class QAQuality:
    questions: int
    missing_gold_ids: list[str] = field(default_factory=list)  # gold ids that are no corpus document
    duplicate_questions: list[str] = field(default_factory=list)  # the same question (normalized) again
    duplicate_query_ids: list[str] = field(default_factory=list)
    empty_questions: int = 0
    without_gold: int = 0  # queries with no gold document (left out of retrieval metrics)
    answer_in_gold: float | None = None  # of queries with answers and gold docs: an answer is in a gold doc
    answer_in_gold_of: int = 0  # how many queries that rate is over

    @property
    def without_gold_share(self) -> float:
        return self.without_gold / self.questions if self.questions else 0.0


def qa_quality(qa: pl.DataFrame, corpus: pl.DataFrame) -> QAQuality:
    """qa: query_id, question, answers, relevant_doc_ids; corpus: doc_id, text."""
    text_of = dict(zip(corpus["doc_id"], corpus["text"], strict=True))
    seen_q: set[str] = set()
    seen_id: set[str] = set()
    out = QAQuality(questions=qa.height)
    found = judged = 0
    for qid, question, answers, gold in qa.select(
        "query_id", "question", "answers", "relevant_doc_ids"
    ).iter_rows():
        norm = normalize_answer(question or "")
        if not norm:
            out.empty_questions += 1
        elif norm in seen_q:
            out.duplicate_questions.append(question)
        seen_q.add(norm)
        if qid in seen_id:
            out.duplicate_query_ids.append(qid)
        seen_id.add(qid)
        gold = gold or []
        out.missing_gold_ids += [d for d in gold if d not in text_of and d not in out.missing_gold_ids]
        if not gold:
            out.without_gold += 1
        golds = [normalize_answer(a) for a in answers or [] if normalize_answer(a)]
        passages = [normalize_answer(text_of[d]) for d in gold if d in text_of]
        if golds and passages:
            judged += 1
            found += any(a in p for a in golds for p in passages)
    if judged:
        out.answer_in_gold, out.answer_in_gold_of = found / judged, judged
    return out

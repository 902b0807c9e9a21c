"""The `answer_in_context` metric: did the generator see a gold answer at all?

1 when some reference answer, normalized as SQuAD normalizes (lowercase, no punctuation or articles),
occurs in the normalized context the generator was given; 0 otherwise; undefined for a question without
reference answers. It separates the failures retrieval causes (the answer never reached the generator) from
those the generator causes (it was there and not used).
"""

from __future__ import annotations

from rag_sweep.plugins import Metric, Question, normalize_answer


def _score(q: Question) -> float | None:
    golds = [g for g in (normalize_answer(a) for a in q.gold_answers) if g]
    if not golds:
        return None
    context = f" {normalize_answer(' '.join(q.context_texts))} "
    return float(any(f" {g} " in context for g in golds))


ANSWER_IN_CONTEXT = Metric(
    "answer_in_context",
    "1 when a gold answer occurs (normalized) in the context the generator saw",
    label="ans in ctx",
    needs="reference answers (answers)",
    score=_score,
    reference="examples/plugins/src/rag_sweep_example_plugins/answer_in_context.py",
)

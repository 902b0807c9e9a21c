"""LLM-as-judge faithfulness: a versioned prompt and a robust parser of the numeric verdict.

The judge sees the retrieved context and the answer and replies with one number in [0, 1]: the share of the
answer's claims the context supports. Parsing takes the first number of the reply; a percentage (`85%`) is
divided by 100; anything else (no number, a number outside [0, 1]) is a failure, counted, never NaN.
"""

from __future__ import annotations

import re

from rag_core.metrics.registry import Metric, register

JUDGE_PROMPT_VERSION = "faithfulness-v1"
JUDGE_PROMPT = """You are grading a question-answering system.
Decide how much of the ANSWER is supported by the CONTEXT (not by your own knowledge).
Reply with a single number between 0 and 1: 1 = every claim of the answer is stated in the context,
0 = nothing in the answer is supported. Reply with the number only.

CONTEXT:
{context}

QUESTION: {question}
ANSWER: {answer}
SCORE:"""

_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)\s*(%?)")


def judge_prompt(question: str, answer: str, context: str, template: str = JUDGE_PROMPT) -> str:
    """The judge's prompt for one answer; `template`: another prompt with the same fields (an aligned one,
    rag_core/metrics/judge_alignment.py)."""
    return template.format(question=question, answer=answer, context=context)


def parse_verdict(text: str) -> float | None:
    m = _NUMBER.search(text or "")
    if not m:
        return None
    value = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    return value if 0.0 <= value <= 1.0 else None


register(
    Metric(
        "faithfulness_judge",
        "an LLM judge's share of the answer's claims the context supports (evaluation.judge_model)",
        "judge",
        needs="a verdict of the judge (evaluation.judge_model)",
    )
)

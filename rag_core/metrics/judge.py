"""LLM-as-judge faithfulness: a versioned prompt and a robust parser of the numeric verdict.

The judge sees the retrieved context and the answer and replies with one number in [0, 1]: the share of the
answer's claims the context supports. Parsing takes the first number of the reply; a percentage (`85%`) is
divided by 100; anything else (no number, a number outside [0, 1]) is a failure, counted, never NaN.
A sweep may ask with another prompt with the same fields (`evaluation.judge_prompt`, e.g. the aligned one
`rag-sweep calibrate-judge --align --aligned-out` writes): `JudgeSetting` is the model and the prompt, and the
prompt's fingerprint is the built-in version's name, or another prompt's content hash.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass

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

FIELDS = ("question", "answer", "context")


@dataclass(frozen=True)
class JudgeSetting:
    """The sweep's judge: its litellm model and the prompt it is asked with."""

    model: str
    prompt: str = JUDGE_PROMPT

    @property
    def custom(self) -> bool:
        return self.prompt != JUDGE_PROMPT

    @property
    def prompt_version(self) -> str:
        """The prompt in fingerprints: the built-in one's version (as before prompts could be given), or the
        content hash of another."""
        if not self.custom:
            return JUDGE_PROMPT_VERSION
        return "sha256:" + hashlib.sha256(self.prompt.encode()).hexdigest()


def template_problem(template: str) -> str | None:
    """What keeps `template` from being a judge prompt, or None: its fields are {question}, {answer} and
    {context}, each at least once, and no other; a literal brace is doubled."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        return f"not a prompt template ({e}; a literal brace is written twice: {{{{ }}}})"
    if missing := [f for f in FIELDS if f not in fields]:
        return f"no {', '.join('{' + f + '}' for f in missing)} field"
    if other := sorted(fields - set(FIELDS)):
        named = ", ".join("{" + f + "}" for f in other)
        rule = "the fields are {question}, {answer}, {context}; a literal brace is written twice"
        return f"unknown field(s) {named} ({rule})"
    return None


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

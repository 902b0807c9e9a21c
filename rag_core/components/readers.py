"""The answer generators that are not LLMs ("readers"), by name: what `generation.model` names when it is not a
litellm model.

A reader answers a question from the context blocks the generator is given, offline and without a prompt,
temperature or token limit; one answer per question says it all. The built-in `extractive` reader is
registered in rag_core/generation/generate.py. A plug-in registers under the entry-point group
`rag_sweep.generators`: a function `answer(question, texts, titles) -> str` (its docstring's first line
describes it) or a `Reader`. Any other `generation.model` is a litellm model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_core.common.registry import Registry, function_or


@dataclass(frozen=True)
class Reader:
    name: str
    description: str
    answer: Callable[[str, Sequence[str], Sequence[str]], str]  # (question, texts, titles) -> the answer


READERS = Registry(
    "answer generator",
    "rag_sweep.generators",
    modules=("rag_core.generation.generate",),
    adapt=function_or(Reader, "answer", "answer(question, texts, titles)"),
)


def is_reader(model: str) -> bool:
    """Whether `generation.model` names a reader (built in or an installed plug-in), not a litellm model."""
    return model in READERS.names()

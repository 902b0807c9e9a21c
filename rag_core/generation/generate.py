"""Answer generation without an LLM (the offline default) and prompt construction for LLMs.

The extractive reader picks the sentence of the retrieved context that best supports the question
(IDF-weighted overlap of content words, earlier chunks win ties), then answers with the span of that
sentence the question does not already say: the longest run of tokens not in the question. Yes/no
questions ("Is ...", "Are ...", "Did ...") are answered "yes" or "no" by whether both compared entities
appear in the context. It is a baseline: cheap, deterministic and honest about what retrieval found.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence

from rag_core.common.text import STOPWORDS, fold, word_pattern
from rag_core.components.readers import READERS, Reader

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_YES_NO = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have|had)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=1 << 15)  # a chunk's sentences come back for every config that retrieves it
def _content_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in word_pattern().findall(fold(text)) if w not in STOPWORDS)


def extractive_answer(question: str, contexts: Sequence[str]) -> str:
    if not contexts:
        return ""
    q_words = set(_content_words(question))
    if _YES_NO.match(question.strip()):
        in_context = set().union(*(_content_words(c) for c in contexts))
        return "yes" if q_words and q_words <= in_context else "no"
    sentences = [(ci, s) for ci, c in enumerate(contexts) for s in _SENTENCE.split(c) if s.strip()]
    words = [set(_content_words(s)) for _, s in sentences]  # once per sentence: df and score read them
    n = len(sentences)
    df: dict[str, int] = {}
    for ws in words:
        for w in ws:
            df[w] = df.get(w, 0) + 1

    def score(i: int) -> tuple[float, int]:
        # summed in sorted order: a float sum in set order depends on the hash seed and flips ties
        overlap = sum(math.log(1 + n / df[w]) for w in sorted(words[i] & q_words))
        return (overlap, -sentences[i][0])

    best = max(range(n), key=score)  # ties: the first sentence (max keeps the first maximum)
    return _novel_span(sentences[best][1], q_words)


def _novel_span(sentence: str, q_words: set[str]) -> str:
    """The longest run of tokens in `sentence` that are not question words (stopwords may sit inside)."""
    toks = list(word_pattern().finditer(sentence))  # a word keeps its vowel signs (Hindi, Thai)
    best: tuple[int, int] = (0, -1)
    start = None
    for i, m in enumerate(toks + [None]):
        novel = m is not None and fold(m.group()) not in q_words
        if novel and start is None:
            start = i
        if not novel and start is not None:
            # trim stopwords at both ends of the run
            a, b = start, i - 1
            while a <= b and fold(toks[a].group()) in STOPWORDS:
                a += 1
            while b >= a and fold(toks[b].group()) in STOPWORDS:
                b -= 1
            if b >= a and (b - a) > (best[1] - best[0]):
                best = (a, b)
            start = None
    if best[1] < best[0]:
        return sentence.strip()
    return sentence[toks[best[0]].start() : toks[best[1]].end()]


def format_context(texts: Sequence[str], titles: Sequence[str] | None = None) -> str:
    """Numbered context blocks, `[n] title: text`, so a prompt may ask for `[n]` citations."""
    blocks = []
    for i, text in enumerate(texts, start=1):
        title = titles[i - 1] if titles else ""
        blocks.append(f"[{i}] {title + ': ' if title else ''}{text}")
    return "\n\n".join(blocks)


def build_prompt(template: str, query: str, context: str) -> str:
    # str.replace, not str.format: user templates may contain other braces (JSON examples).
    return template.replace("{query}", query).replace("{context}", context)


READERS.register(
    "extractive",
    Reader(
        "extractive",
        "the span of the best-supported context sentence the question does not already say (offline)",
        lambda question, texts, titles: extractive_answer(question, texts),
    ),
)

"""Text normalization shared by the metrics and the extractive reader."""

from __future__ import annotations

import functools
import re
import string
import sys
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_DROP_PUNCT = str.maketrans("", "", string.punctuation)  # one C pass, not a generator per character

STOPWORDS = frozenset(
    """a an the of in on at to for from by with and or but is are was were be been being what which who whom
    whose when where why how did do does done has have had this that these those it its as into than then
    there their they he she his her him i you we our your not no yes""".split()
)


@functools.lru_cache(maxsize=1 << 14)  # answers and retrieved texts are normalized again for every config
def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalization: lowercase, remove punctuation, drop articles, collapse whitespace."""
    s = s.lower()
    s = s.translate(_DROP_PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def tokens(s: str) -> list[str]:
    return normalize_answer(s).split()


@functools.cache
def marks() -> str:
    """Every combining mark (Unicode category M*), escaped for a regex character class: Python's `\\w` does
    not match them, so a word in Devanagari, Thai, Bengali or Tamil would be cut at each vowel sign."""
    return "".join(
        re.escape(chr(i)) for i in range(sys.maxunicode + 1) if unicodedata.category(chr(i))[0] == "M"
    )


@functools.cache
def word_pattern() -> re.Pattern:
    """A word: a run of letters, digits, `_` and combining marks (`\\w` and the marks it leaves out)."""
    return re.compile(f"(?:\\w|[{marks()}])+")


def fold(s: str) -> str:
    """Accent-insensitive lowercase form used for lexical matching (not for SQuAD scores)."""
    if s.isascii():  # nothing to decompose or drop: most text, at a tenth of the cost
        return s.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", s.lower()) if not unicodedata.combining(c))


# Scripts written without spaces between words: Han, Hiragana, Katakana, Thai, Lao, Myanmar, Khmer. The
# plain and english keyword analyzers (runs of letters and digits) read a whole unbroken run of them as one
# "word"; chinese, japanese and thai (rag_core/retrieval/keywords.py) segment their language.
_UNSEGMENTED = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]"
)


def unsegmented(text: str, threshold: float = 0.2) -> bool:
    """Whether at least `threshold` of the text's letters belong to a script written without spaces."""
    letters = sum(ch.isalpha() for ch in text)
    return bool(letters) and len(_UNSEGMENTED.findall(text)) >= threshold * letters


def unsegmented_share(texts: list[str]) -> float:
    """The share of texts written mostly in a script without spaces between words (see `unsegmented`)."""
    return sum(map(unsegmented, texts)) / len(texts) if texts else 0.0


UNSEGMENTED_ADVICE = (
    "BM25's analyzer splits words at spaces and punctuation, so a run of Chinese, Japanese or Thai text "
    "is one 'word' and keyword search rarely matches it: set data.language (zh, ja, th) or "
    "index.bm25_analyzer (chinese, japanese, thai) so the keyword index segments it, rank these configs by "
    "vector search, or segment the text (spaces between words) before indexing"
)

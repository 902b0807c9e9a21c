"""Text normalization shared by the metrics and the extractive reader."""

from __future__ import annotations

import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)

STOPWORDS = frozenset(
    """a an the of in on at to for from by with and or but is are was were be been being what which who whom
    whose when where why how did do does done has have had this that these those it its as into than then
    there their they he she his her him i you we our your not no yes""".split()
)


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalization: lowercase, remove punctuation, drop articles, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def tokens(s: str) -> list[str]:
    return normalize_answer(s).split()


def fold(s: str) -> str:
    """Accent-insensitive lowercase form used for lexical matching (not for SQuAD scores)."""
    return "".join(c for c in unicodedata.normalize("NFKD", s.lower()) if not unicodedata.combining(c))

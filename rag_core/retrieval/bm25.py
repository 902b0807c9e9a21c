"""Okapi BM25 (k1=1.2, b=0.75, Lucene's idf) for stores without a native keyword index.

Qdrant gets the document side as sparse vectors (term weights) and applies the idf itself
(`Modifier.IDF`, same formula); Chroma's embedded client has no keyword index at all, so its keyword search
ranks the collection's texts with `BM25Index` in process. A keyword index of a segmenting analyzer (chinese,
japanese, thai: rag_core/retrieval/keywords.py) holds text the project segmented already, words joined by
spaces: `segmented=True` splits it at those spaces only (a Thai word keeps its vowel and tone marks).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter

K1, B = 1.2, 0.75
_WORD = re.compile(
    r"[^\W_]+"
)  # runs of letters and digits (the `plain` analyzer, see rag_core/planning/spec.py)


def tokenize(text: str, segmented: bool = False) -> list[str]:
    return text.split() if segmented else _WORD.findall(text.lower())


def term_id(term: str) -> int:
    """A stable 32-bit id per term (sparse-vector index)."""
    return zlib.crc32(term.encode("utf-8"))


def idf(n_docs: int, doc_freq: int) -> float:
    return math.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def term_weights(tokens: list[str], avg_len: float) -> dict[str, float]:
    """The document side of BM25: saturated, length-normalised term frequency."""
    norm = K1 * (1 - B + B * len(tokens) / avg_len) if avg_len else K1
    return {t: tf * (K1 + 1) / (tf + norm) for t, tf in Counter(tokens).items()}


def document_weights(texts: list[str], segmented: bool = False) -> list[dict[str, float]]:
    """term -> BM25 term weight of each text, length-normalised against the texts' average length."""
    docs = [tokenize(t, segmented) for t in texts]
    avg = sum(map(len, docs)) / len(docs) if docs else 0.0
    return [term_weights(d, avg) for d in docs]


class BM25Index:
    """BM25 over a fixed list of texts; `search` returns (position, score) best first, scores > 0 only."""

    def __init__(self, texts: list[str], segmented: bool = False):
        self._segmented = segmented
        self._weights = document_weights(texts, segmented)
        df = Counter(t for w in self._weights for t in w)
        self._idf = {t: idf(len(texts), n) for t, n in df.items()}

    def search(self, query: str, k: int, allowed: set[int] | None = None) -> list[tuple[int, float]]:
        # a fixed summation order: no hash-seed noise
        terms = sorted(set(tokenize(query, self._segmented)) & self._idf.keys())
        scored = []
        for i, w in enumerate(self._weights):
            if allowed is not None and i not in allowed:
                continue
            s = sum(self._idf[t] * w[t] for t in terms if t in w)
            if s > 0:
                scored.append((i, s))
        scored.sort(key=lambda x: (-x[1], x[0]))
        return scored[:k]

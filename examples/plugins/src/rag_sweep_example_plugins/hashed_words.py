"""An embedding model plug-in: the hashed bag of words (feature hashing of lowercased word counts).

No model, no download, no GPU: a lexical baseline a dense model should beat, and a vector that any machine
computes the same. `embedding.model: hashed_words` names it.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from rag_sweep.plugins import Embedder

DIMENSIONS = 256
_WORD = re.compile(r"\w+")


def _bucket(word: str) -> tuple[int, float]:
    digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % DIMENSIONS, 1.0 if value >> 63 else -1.0  # a sign spreads collisions around zero


def encode(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in _WORD.findall(text.lower()):
            column, sign = _bucket(word)
            out[row, column] += sign
        if not out[row].any():  # no word (or words that cancel): a fixed direction, never a zero vector
            out[row, 0] = 1.0
    return out


HASHED_WORDS = Embedder(
    "hashed_words",
    "the hashed bag of words (256 dimensions): a lexical baseline, no model",
    encode,
    count_tokens=lambda texts: [len(_WORD.findall(t)) for t in texts],
)

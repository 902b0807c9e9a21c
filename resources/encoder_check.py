"""The check an encoder must pass to share the embedding cache and the fingerprints with torch on the CPU:
the same token ids and offsets, and every vector within cosine MIN_COSINE of the CPU's, on the run's first
texts and fixed probes (empty, accented and CJK, longer than the model reads). Torch's own vectors move by
~1e-7 with the batch a text is in: the bar asks for the same numbers up to float rounding."""

from __future__ import annotations

import numpy as np

MIN_COSINE = 0.9999
SAMPLE_TEXTS = 48  # texts of the first call that join the probes in the check
PROBES = [
    "",
    "a",
    "Café déjà vu: naïve façade, Ångström — 東京 🙂",
    "The quick brown fox jumps over the lazy dog. " * 60,  # longer than the model reads: truncated
]


def check(candidate, reference, texts: list[str]) -> dict:
    """How an encoder (the ONNX graph, torch on a GPU) agrees with torch on the CPU (live, or its vectors
    carried with the code: resources/encoder_reference.py) on `texts`: token ids and offsets equal, worst
    cosine."""
    same_tokens = candidate.token_counts(texts) == reference.token_counts(texts) and candidate.token_offsets(
        texts
    ) == reference.token_offsets(texts)
    if hasattr(candidate, "token_ids") and hasattr(
        reference, "token_ids"
    ):  # the ids themselves, not only counts
        same_tokens = same_tokens and candidate.token_ids(texts) == reference.token_ids(texts)
    by_length = sorted(texts, key=len, reverse=True)
    ours = np.concatenate([candidate.encode(by_length[i : i + 16]) for i in range(0, len(by_length), 16)])
    theirs = np.concatenate([reference.encode(by_length[i : i + 16]) for i in range(0, len(by_length), 16)])
    cosine = float((ours * theirs).sum(axis=1).min())
    return {
        "texts": len(texts),
        "same_tokens": same_tokens,
        "min_cosine": cosine,
        "passed": same_tokens and cosine >= MIN_COSINE,
    }


def sample(texts: list[str]) -> list[str]:
    """The probes and up to SAMPLE_TEXTS of `texts`, spread over their lengths."""
    distinct = sorted(set(texts), key=len)
    step = max(1, len(distinct) // SAMPLE_TEXTS)
    return PROBES + distinct[::step][:SAMPLE_TEXTS]

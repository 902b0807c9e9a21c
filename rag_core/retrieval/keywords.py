"""The keyword (BM25) analyzers that segment a language written without spaces between words.

`plain` and `english` are applied by each store to the chunk text (rag_core/planning/spec.py). Chinese,
Japanese and Thai write no spaces between words, so those analyzers read a whole unbroken run as one "word"
and keyword search matches almost nothing. The analyzers here segment the text in this project, before a store
sees it, into words joined by single spaces (`keyword_text`), and segment the query the same way; every store
indexes that text in a field of its own (`keywords`) and splits it only at those spaces, so an analyzer means
the same on every store and hits still carry the chunk's own text. A word is:
- chinese (`zh`): each CJK ideograph alone (MLQA scores Chinese per character: `_mixed_segmentation` in
  rag_core/metrics/languages.py; here over every ideograph block, not only U+4E00-U+9FA5), any other run of
  letters and digits whole. No Chinese word segmenter is installed (jieba, the usual one, was last released
  in 2020), and per character a query word found inside a sentence always matches, whatever its length.
- japanese (`ja`): SudachiPy's words (mode A), as answer scoring cuts them (`segment`).
- thai (`th`): PyThaiNLP's newmm words, as answer scoring cuts them.
Each word is then NFKC-normalized (full-width letters and digits, half-width katakana, compatibility
ideographs) and lowercased, and split into runs of letters, digits and combining marks (Thai's vowel and tone
marks are marks, not letters): punctuation, symbols and `_` are dropped as `plain` drops them.
Korean has no analyzer here: it is written with spaces between words, which `plain` splits at (Hangul
syllables are letters). Its particles stay attached to their word (서울에서); a morpheme analyzer would strip
them and none is installed, and per-syllable terms (KorQuAD's F1 rule) would match any text sharing a syllable.
`keyword_rule` names what an analyzer's words depend on (the segmenter's packages and versions): it joins the
vector index's fingerprint, so an upgrade rebuilds the keyword index.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from rag_core.common.text import marks
from rag_core.metrics.languages import segment, segmenter

# analyzer -> the language (data.language) whose text it segments
SEGMENTING = {"chinese": "zh", "japanese": "ja", "thai": "th"}
BY_LANGUAGE = {language: analyzer for analyzer, language in SEGMENTING.items()}
FIELD = "keywords"  # the field each store indexes the segmented text in
# the rule below, versioned: a change to it rebuilds every segmented keyword index
RULE = "NFKC, lowercase, runs of letters, digits and marks"
_IDEOGRAPH = (
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef\U00030000-\U0003134f"  # CJK ideographs
)
_PIECES = re.compile(f"[{_IDEOGRAPH}]|[^{_IDEOGRAPH}]+")


def analyzer_for(language: str | None) -> str | None:
    """The keyword analyzer that follows `language` (data.language), or None (plain, as before)."""
    return BY_LANGUAGE.get(language or "")


def segments(analyzer: str | None) -> bool:
    """Whether `analyzer` is one of those here: the project segments the text, a store indexes `keywords`."""
    return analyzer in SEGMENTING


@lru_cache(maxsize=1)
def _word() -> re.Pattern:
    return re.compile(f"(?:[^\\W_]|[{marks()}])+")  # `plain`'s runs, with the marks \\w leaves out


def _runs(text: str) -> list[str]:
    return _word().findall(unicodedata.normalize("NFKC", text).lower())


def keyword_words(text: str, analyzer: str) -> list[str]:
    """The words `analyzer` (chinese, japanese or thai) indexes of `text`, in order."""
    language = SEGMENTING[analyzer]
    if language == "zh":
        return [piece for run in _runs(text) for piece in _PIECES.findall(run)]
    return [run for word in segment(text, language) for run in _runs(word)]


def keyword_text(text: str, analyzer: str) -> str:
    """`text` as the keyword index of a segmenting `analyzer` holds it: its words joined by single spaces."""
    return " ".join(keyword_words(text, analyzer))


def keyword_rule(analyzer: str | None) -> str | None:
    """What a segmenting analyzer's words depend on beyond the text: the segmenter (its packages' versions)
    and the rule above. None for plain and english (their fingerprints are as before)."""
    if not segments(analyzer):
        return None
    language = SEGMENTING[analyzer]
    cut = "CJK ideographs one by one" if language == "zh" else segmenter(language)
    return f"{cut}; {RULE}"

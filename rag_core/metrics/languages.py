"""Answer normalization per language, as MLQA's official evaluation does it (Lewis et al. 2020).

A QA set names its language (`data.language`, or a `language` column per question). Without one, answers are
normalized as SQuAD v1.1's script does (rag_core.common.text.normalize_answer: ASCII punctuation, English
articles, whitespace tokens), exactly as before languages existed. With one:
- lowercase; every Unicode punctuation character (category P*) and ASCII punctuation removed;
- the language's articles removed: en a/an/the; es un/una/unos/unas/el/la/los/las; de ein/eine/einen/einem/
  eines/einer/der/die/das/den/dem/des; vi của/là/cái/chiếc/những; ar every "ال" (the script's rule); hi and zh
  have none;
- tokens: Chinese (`zh`) per character for CJK ideographs (U+4E00-U+9FA5) and by whitespace between them
  (MLQA's mixed segmentation); every other language by whitespace.
A language MLQA has no rule for is normalized as above with no articles and whitespace tokens; `covered`
says whether a code has its own rule, so the evaluation can count the questions scored by the fallback.
tests/test_languages.py checks every rule against the MLQA script's own scores, question by question.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from functools import lru_cache

_ARTICLES = {
    "en": r"\b(a|an|the)\b",
    "es": r"\b(un|una|unos|unas|el|la|los|las)\b",
    "de": r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b",
    "vi": r"\b(của|là|cái|chiếc|những)\b",
    "ar": r"ال",  # MLQA's '\sال^|ال': its first branch never matches, so every occurrence goes
}
NO_ARTICLES = ("hi", "zh")
COVERED = (*_ARTICLES, *NO_ARTICLES)  # MLQA's seven languages
_HAN = re.compile(r"[\u4e00-\u9fa5]")


@lru_cache(maxsize=1)
def _punctuation() -> dict[int, None]:
    chars = {chr(i) for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P")}
    return dict.fromkeys(map(ord, chars | set(string.punctuation)))


def covered(language: str) -> bool:
    return language in COVERED


def _mixed_segmentation(text: str) -> list[str]:
    out, run = [], ""
    for ch in text:
        if _HAN.match(ch):
            out.extend(run.split())
            run = ""
            out.append(ch)
        else:
            run += ch
    out.extend(run.split())
    return out


def answer_tokens(text: str, language: str) -> list[str]:
    """The normalized tokens of an answer in `language` (an ISO 639-1 code, lowercase)."""
    text = text.lower().translate(_punctuation())
    if language in _ARTICLES:
        text = re.sub(_ARTICLES[language], " ", text)
    return _mixed_segmentation(text) if language == "zh" else text.split()


def normalize(text: str, language: str) -> str:
    """The normalized answer, its tokens joined by spaces (what exact match compares)."""
    return " ".join(answer_tokens(text, language))

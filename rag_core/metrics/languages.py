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
A language MLQA has no rule for is normalized as above with no articles and whitespace tokens; `COVERED`
names the codes with a rule of their own, so loading a QA set can count the questions scored by the fallback.
tests/test_languages.py checks every rule against the MLQA script's own scores, question by question.

`data.language: auto` detects each question's language (`detect`) with py3langid: langid.py's model (Lui and
Baldwin 2012) shipped inside the package, deterministic, ~0.5 s to load and no download, over 97 languages
and a few dialects; Arabic dialects count as `ar`, Wu and Cantonese as `zh`. An unsure detection is not used.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from functools import lru_cache
from importlib.metadata import version

from rag_core.common.text import normalize_answer, tokens

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


def answer_tokens(text: str, language: str | None) -> list[str]:
    """The normalized tokens of an answer in `language` (an ISO 639-1 code, lowercase); None: SQuAD v1.1's."""
    if language is None:
        return tokens(text)
    text = text.lower().translate(_punctuation())
    if language in _ARTICLES:
        text = re.sub(_ARTICLES[language], " ", text)
    return _mixed_segmentation(text) if language == "zh" else text.split()


def normalize(text: str, language: str | None) -> str:
    """The normalized answer, its tokens joined by spaces (what exact match compares); None: SQuAD v1.1's."""
    return normalize_answer(text) if language is None else " ".join(answer_tokens(text, language))


DIALECTS = {"arz": "ar", "ary": "ar", "wuu": "zh", "yue": "zh"}  # scored with their language's rules
# below this confidence a detection is not used: the question is scored as one without a language (SQuAD's
# normalization), and counted. "Who wrote Hamlet?" is en at 0.16, "1998" sr at 0.01; a sentence is above 0.9
UNSURE = 0.3


@lru_cache(maxsize=1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect(text: str) -> tuple[str | None, float]:
    """The language of `text` (an ISO 639-1 code where it has one) and the detector's confidence in [0, 1];
    None when the detector is unsure (below UNSURE) or names no language."""
    code, confidence = _identifier().classify(text)
    code = DIALECTS.get(code, code)
    return (None if code == "zxx" or confidence < UNSURE else code), float(confidence)


def detector_version() -> str:
    """What joins the QA set snapshot's fingerprint when languages are detected."""
    return f"py3langid=={version('py3langid')}"

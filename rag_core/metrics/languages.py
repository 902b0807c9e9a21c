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
Japanese, Thai and Korean, which MLQA has no rule for, are cut into words first (`segment`), from the text as
written (a segmenter reads the punctuation around a word); each word is then lowercased and loses its Unicode
punctuation as above, and a word left empty (punctuation, whitespace) is dropped. No articles:
- ja: SudachiPy with its smallest dictionary, SudachiDict-small, in split mode A (UniDic's short units, the
  finest: "東京大学" is 東京 | 大学), as spaCy's and GiNZA's Japanese use it. Chosen over fugashi (MeCab) +
  unidic-lite: sudachipy (Rust, one abi3 wheel per platform) and sudachidict-small (the dictionary inside a
  wheel) are both Apache-2.0 and both released in 2026 (the dictionary several times a year), ~115 MB
  installed, ~20 ms to load, no download; unidic-lite is a 47 MB source archive only, last released in 2021
  with UniDic 2.1.2 of 2013, ~250 MB installed. SudachiPy refuses an input over 49,149 bytes: a longer run (a
  context, for faithfulness) is cut after a sentence end, else every 12,000 characters.
- th: PyThaiNLP's `newmm` (dictionary-based maximal matching within Thai character clusters, its default
  engine): Apache-2.0, a pure-Python wheel with its word list inside (~65 MB installed) and no required
  dependency, released in 2026; ~0.7 s to import and build its dictionary's trie on first use. It is loaded
  with PYTHAINLP_READ_ONLY and PYTHAINLP_OFFLINE set (unless set already): it neither creates its data
  folder in the home directory nor downloads anything.
- ko: per character (syllable), spaces dropped, as KorQuAD 1.0's official script scores F1 (per character
  because morpheme analysis of Korean is not reliable enough, its authors say). The standard Korean QA
  benchmark's script uses no morpheme analyzer, so none is installed (kiwipiepy and its model: ~88 MB).
  Exact match compares the characters, so it ignores spacing, which Korean writers vary ("서울 특별시",
  "서울특별시"); KorQuAD's compares with spaces.
Both segmenters are deterministic (a dictionary, no sampling) and load once, on first use, so importing this
module stays cheap; SudachiPy's tokenizer is not shared between threads (one per thread, on one dictionary).
`segmenter` names what a language's tokens depend on beyond this module (the packages and their versions for
ja and th, the rule for ko): it joins the fingerprint of an evaluation whose `data.language` is one of them,
so an upgrade recomputes it; every other language's fingerprints are as before.
A language with no rule here is normalized as above with no articles and whitespace tokens; `COVERED` names
the codes with a rule of their own (MLQA's seven and SEGMENTED), so loading a QA set can count the questions
scored by the fallback. tests/test_languages.py checks every MLQA rule against the MLQA script's own scores,
question by question.

`data.language: auto` detects the language each question is scored in (`scoring_language`: its gold
documents', else its gold answers', else the question's; `detect`). The whole text's letters are counted by
script first (digits, punctuation and whitespace aside), in words as MLQA's Chinese rule counts tokens: a
run of letters is one word, and in a script written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar)
each character is one. The script writing most words wins, so an English head ("Source: Wikipedia", a name)
does not make a Chinese text English, nor do a few Chinese characters make an English one Chinese; a tie
goes to the script that is not Latin (a Latin name or acronym in another language's text is common). Han,
kana and Hangul, one family, tell their language apart themselves: Korean where Hangul makes a fifth of them,
Japanese where kana do, Chinese with neither, py3langid over them in between. Any other script (Latin,
Cyrillic, Arabic, Devanagari, ...) is told apart by py3langid, reading only that script's letters:
langid.py's model (Lui and Baldwin 2012) shipped inside the package, deterministic, ~0.5 s to load and no
download, over 97 languages and a few dialects; Arabic dialects count as `ar`, Wu and Cantonese as `zh`. A
text in one script reaches py3langid as it is. An unsure detection is not used. Gold documents are read to
CONTEXT_CHARS each, so a long English head (a page's navigation) is a small share of one.
"""

from __future__ import annotations

import os
import re
import string
import sys
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterator
from functools import cache, lru_cache
from importlib.metadata import version

from rag_core.common.extras import require
from rag_core.common.text import normalize_answer, tokens

_ARTICLES = {
    "en": r"\b(a|an|the)\b",
    "es": r"\b(un|una|unos|unas|el|la|los|las)\b",
    "de": r"\b(ein|eine|einen|einem|eines|einer|der|die|das|den|dem|des)\b",
    "vi": r"\b(của|là|cái|chiếc|những)\b",
    "ar": r"ال",  # MLQA's '\sال^|ال': its first branch never matches, so every occurrence goes
}
NO_ARTICLES = ("hi", "zh")
MLQA = (*_ARTICLES, *NO_ARTICLES)  # MLQA's seven languages
SEGMENTED = ("ja", "th", "ko")  # cut into words (ja, th) or characters (ko, as KorQuAD) before scoring
COVERED = (*MLQA, *SEGMENTED)  # every language with a rule of its own
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


_SUDACHI_CHARS = 12_000  # at most 4 bytes each: under SudachiPy's 49,149-byte limit on one input
_SENTENCE_ENDS = "。！？!?"
_sudachi_tokenizers = threading.local()


@lru_cache(maxsize=1)
def _sudachi_dictionary():
    require("japanese", "segmenting Japanese words (answer scoring, the japanese BM25 analyzer)")
    from sudachipy import Dictionary

    return Dictionary(dict="small")


def _sudachi():
    tokenizer = getattr(_sudachi_tokenizers, "tokenizer", None)
    if tokenizer is None:  # a tokenizer may not be used by two threads at once: one each
        dictionary = _sudachi_dictionary()  # first: it names the extra where SudachiPy is not installed
        from sudachipy import SplitMode

        tokenizer = _sudachi_tokenizers.tokenizer = dictionary.tokenizer(mode=SplitMode.A)
    return tokenizer


def _windows(run: str, size: int = _SUDACHI_CHARS) -> Iterator[str]:
    """`run` in pieces of at most `size` characters, each cut after its last sentence end where it has one."""
    while len(run) > size:
        cut = max(run.rfind(end, 0, size) for end in _SENTENCE_ENDS) + 1 or size
        yield run[:cut]
        run = run[cut:]
    yield run


def _runs(text: str) -> list[str]:
    """The text between whitespace; a zero-width space (Thai's word or phrase break) is whitespace too."""
    return text.replace("\u200b", " ").split()


def _japanese(text: str) -> list[str]:
    tokenizer = _sudachi()
    return [m.surface() for run in _runs(text) for piece in _windows(run) for m in tokenizer.tokenize(piece)]


@lru_cache(maxsize=1)
def _newmm():
    os.environ.setdefault("PYTHAINLP_READ_ONLY", "1")  # no data folder created in the home directory
    os.environ.setdefault("PYTHAINLP_OFFLINE", "1")  # and no corpus downloaded (newmm's is in the package)
    require("thai", "segmenting Thai words (answer scoring, the thai BM25 analyzer)")
    from pythainlp.tokenize import word_tokenize

    return word_tokenize


def _thai(text: str) -> list[str]:
    word_tokenize = _newmm()
    return [w for run in _runs(text) for w in word_tokenize(run, engine="newmm", keep_whitespace=False)]


def _korean(text: str) -> list[str]:
    return [ch for run in _runs(text) for ch in run]


_SEGMENTERS = {"ja": _japanese, "th": _thai, "ko": _korean}


def segment(text: str, language: str | None) -> list[str] | None:
    """The words of `text` as its language's segmenter cuts them (ja, th; ko: its characters), as written:
    case and punctuation kept, whitespace dropped. None for a language without one."""
    cut = _SEGMENTERS.get(language or "")
    return None if cut is None else cut(text)


@cache
def segmenter(language: str | None) -> str | None:
    """What `language`'s tokens depend on beyond this module: its segmenter's packages and their versions
    (ja, th) or its rule (ko). It joins the fingerprint of an evaluation in that language, so upgrading a
    segmenter recomputes it. None for every other language (its fingerprints are as before)."""
    if language in ("ja", "th"):  # a fingerprint needs the version: the same one-line error as scoring
        require(*(("japanese", "scoring Japanese") if language == "ja" else ("thai", "scoring Thai")))
    if language == "ja":
        return (
            f"sudachipy=={version('sudachipy')} + sudachidict-small=={version('sudachidict-small')} (mode A)"
        )
    if language == "th":
        return f"pythainlp=={version('pythainlp')} (newmm)"
    if language == "ko":
        return "characters (KorQuAD 1.0)"
    return None


def answer_tokens(text: str, language: str | None) -> list[str]:
    """The normalized tokens of an answer in `language` (an ISO 639-1 code, lowercase); None: SQuAD v1.1's."""
    if language is None:
        return tokens(text)
    words = segment(text, language)
    if words is not None:  # cut as written, then each word normalized; punctuation alone goes
        return [w for w in (w.lower().translate(_punctuation()) for w in words) if w]
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


# scripts written without spaces between words: each character counts as a word (MLQA's Chinese tokens)
_UNSPACED = frozenset({"Han", "Kana", "THAI", "LAO", "KHMER", "MYANMAR"})
_CJK = frozenset({"Han", "Kana", "HANGUL"})  # one family: Japanese and Korean write Han among their own
# Hangul (else kana) making this share of a text's Han, kana and Hangul makes it Korean (else Japanese): a
# sentence of either writes more so (particles, endings); below it py3langid decides (a kanji-heavy name, a
# Chinese text quoting a Japanese title); none at all is Chinese
_OWN_SHARE = 0.2
SAMPLE_CHARS = 10_000  # of the dominant script's text read by py3langid: plenty, and bounded


@lru_cache(maxsize=1 << 16)
def _script(ch: str) -> str | None:
    """The script a letter is written in: its Unicode name's first word (LATIN, ARABIC, HANGUL, ...), Han
    for ideographs and Kana for hiragana and katakana, whatever their width; None for a non-letter."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    words = unicodedata.name(ch, "").split() or [""]
    if words[0] in ("FULLWIDTH", "HALFWIDTH") and len(words) > 1:
        words = words[1:]
    if words[0] in ("CJK", "IDEOGRAPHIC"):
        return "Han"
    if words[0] in ("HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA"):
        return "Kana"
    return words[0] or None


def _family(script: str) -> str:
    return "CJK" if script in _CJK else script


def _words(text: str, chars: Counter[str]) -> Counter[str]:
    """The words of `text` per script: a run of letters of a spaced script is one, a character of an
    unspaced one is one. `chars`: the text's characters counted."""
    words: Counter[str] = Counter()
    cut: dict[int, str | None] = {}  # everything but a spaced script's letters cuts runs; a mark joins them
    for ch, n in chars.items():
        script = _script(ch)
        if script in _UNSPACED:
            words[script] += n
        if script is None or script in _UNSPACED:
            cut[ord(ch)] = None if unicodedata.category(ch).startswith("M") else " "
    for run in text.translate(cut).split():
        words[_script(run[0])] += 1
    return words


def _only(text: str, chars: Counter[str], family: str) -> str:
    """`text` with the letters of every other script family blanked."""
    other = {ord(ch): " " for ch in chars if (s := _script(ch)) is not None and _family(s) != family}
    return text.translate(other) if other else text


def _cjk_language(text: str, chars: Counter[str]) -> str:
    """zh, ja or ko: from the share of Hangul or kana among the text's Han, kana and Hangul where it is
    plain, else from py3langid over those letters."""
    n = Counter({s: 0 for s in _CJK})
    for ch, count in chars.items():
        if (script := _script(ch)) in _CJK:
            n[script] += count
    code, own = ("ko", n["HANGUL"]) if n["HANGUL"] >= n["Kana"] else ("ja", n["Kana"])
    if own == 0:
        return "zh"
    if own >= _OWN_SHARE * sum(n.values()):
        return code
    return code if _identifier().classify(_only(text, chars, "CJK")[:SAMPLE_CHARS])[0] == code else "zh"


def detect(text: str) -> tuple[str | None, float]:
    """The language of `text` (an ISO 639-1 code where it has one) and the confidence in [0, 1]; None when
    unsure (below UNSURE) or no language is named. The script writing most of the text's words decides: Han,
    kana and Hangul among themselves (the confidence is their share of the words), any other by py3langid
    over that script's letters alone (its confidence); a text in one script other than those reaches
    py3langid as it is."""
    chars = Counter(text)
    families = {_family(s) for s in map(_script, chars) if s is not None}
    family, share = (next(iter(families)) if families else None), 1.0
    if len(families) > 1:
        words: Counter[str] = Counter()
        for script, n in _words(text, chars).items():
            words[_family(script)] += n
        # a tie goes to the script that is not Latin: a Latin name or acronym in another language is common
        family, n = max(words.items(), key=lambda kv: (kv[1], kv[0] != "LATIN", kv[0]))
        share = n / sum(words.values())
    if family == "CJK":
        return (None if share < UNSURE else _cjk_language(text, chars)), share
    if family is not None:  # py3langid reads that script's letters only: a few Han make no English text zh
        text = _only(text, chars, family)
    code, confidence = _identifier().classify(text[:SAMPLE_CHARS])
    code = DIALECTS.get(code, code)
    return (None if code == "zxx" or confidence < UNSURE else code), float(confidence)


def scoring_language(answers: list[str], contexts: list[str], question: str) -> str | None:
    """The language a question's answers are scored in, detected (`detect`): that of its gold documents
    (the first CONTEXT_CHARS of each), the context the answers come from (MLQA scores in the context's
    language: its cross-lingual sets ask in one language about a context in another), else of its gold
    answers (short answers, names and numbers say little: Hindi answers read as Marathi or Nepali), else of
    the question; None when all are unsure."""
    for text in (" ".join(c[:CONTEXT_CHARS] for c in contexts), " ".join(answers), question):
        if text.strip() and (found := detect(text)[0]) is not None:
            return found
    return None


# of each gold document: a boilerplate head (navigation, a licence) is a small share of it; bounded for a
# long document
CONTEXT_CHARS = 10_000


def detector_version() -> str:
    """What joins the QA set snapshot's fingerprint when languages are detected: the detector and what it
    reads (`scoring_language`'s order and the script count first), so a snapshot detected by another rule
    is not reused."""
    return f"py3langid=={version('py3langid')};scripts;documents {CONTEXT_CHARS},answers,question"

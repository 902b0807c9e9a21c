"""Generation metrics of one answer (pure functions; definitions in docs/metrics.md).

SQuAD v1.1 normalization for exact match and token F1, exactly as its evaluation script: lowercase, strip
ASCII punctuation (`string.punctuation`; other Unicode punctuation stays), drop the articles a/an/the,
collapse whitespace; the max over gold answers is taken. A question in a named language is normalized as
MLQA's script does instead (rag_core/metrics/languages.py). `[n]` citation markers are removed from the answer
and the gold answers alike before scoring (evaluate_queries).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from rag_core.metrics.languages import answer_tokens, normalize, segment
from rag_core.metrics.registry import Metric, register

_CITATION = re.compile(r"\[(\d+)\]")


def exact_match(answer: str, golds: Sequence[str], language: str | None = None) -> float:
    """1.0 when the normalized answer equals a normalized gold answer: SQuAD v1.1's normalization, or MLQA's
    for `language` (rag_core/metrics/languages.py)."""
    return max(float(normalize(answer, language) == normalize(g, language)) for g in golds)


def _f1(pred: list[str], gold: list[str]) -> float:
    """SQuAD v1.1's F1: 0 without a common token (so also when either side normalizes to nothing)."""
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


def token_f1(answer: str, golds: Sequence[str], language: str | None = None) -> float:
    pred = answer_tokens(answer, language)
    return max(_f1(pred, answer_tokens(g, language)) for g in golds)


def faithfulness(answer: str, contexts: Sequence[str], language: str | None = None) -> float:
    """Lexical faithfulness: share of the answer's normalized tokens found in the retrieved context (tokens
    of its language: a Chinese answer's characters, a Japanese or Thai answer's words)."""
    ans = answer_tokens(answer, language)
    if not ans:
        return 0.0
    support = set(answer_tokens(" ".join(contexts), language))
    return sum(t in support for t in ans) / len(ans)


def bleu(answer: str, golds: Sequence[str], language: str | None = None) -> float:
    """sacreBLEU sentence BLEU (exp smoothing) against all golds, scaled to [0, 1]: its 13a tokenizer, or for
    a named language its `zh` tokenizer (Chinese: per character) or `intl` (Unicode punctuation split off);
    Japanese and Thai are cut by their word segmenter first (case and punctuation kept, as sacreBLEU's own
    tokenizers keep them), Korean keeps `intl`'s words between spaces."""
    import sacrebleu

    if not answer.strip():
        return 0.0
    if language in ("ja", "th"):
        answer, golds = " ".join(segment(answer, language)), [" ".join(segment(g, language)) for g in golds]
        return sacrebleu.sentence_bleu(answer, golds, tokenize="none").score / 100.0
    tokenize = "13a" if language is None else "zh" if language == "zh" else "intl"
    return sacrebleu.sentence_bleu(answer, list(golds), tokenize=tokenize).score / 100.0


# rouge-score's default tokenizer without its stemmer: lowercase, every run of characters outside [a-z0-9]
# a separator (rouge_score/tokenize.py)
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def _rouge_tokens(text: str, language: str | None) -> list[str]:
    return _NON_ALNUM.sub(" ", text.lower()).split() if language is None else answer_tokens(text, language)


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (the dynamic programme, one row at a time)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def rouge_l(answer: str, golds: Sequence[str], language: str | None = None) -> float:
    """ROUGE-L F-measure, max over golds: rouge-score's `rougeL` without stemming, computed here with the
    same tokens and arithmetic (tests/test_metrics_reference.py holds it equal to rouge-score), because
    rouge-score imports NLTK, ~2 s of every process that scores. A named language reads its answer tokens
    (rouge-score's tokenizer keeps [a-z0-9] only, so a Chinese answer had no token at all)."""
    pred = _rouge_tokens(answer, language)
    if not pred:  # no token to match: 0 against every gold
        return 0.0
    best = 0.0
    for gold in golds:
        ref = _rouge_tokens(gold, language)
        if not ref:
            continue
        lcs = _lcs_length(ref, pred)
        precision, recall = lcs / len(pred), lcs / len(ref)
        best = max(best, 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0)
    return best


def citations(answer: str) -> list[int]:
    """The `[n]` markers of an answer, in order, without repeats."""
    return list(dict.fromkeys(int(n) for n in _CITATION.findall(answer)))


def strip_citations(answer: str) -> str:
    """The answer without its `[n]` markers, for the answer-quality metrics."""
    return " ".join(_CITATION.sub(" ", answer).split())


def citation_accuracy(answer: str, context_doc_ids: Sequence[str], relevant: set[str]) -> float | None:
    """Share of cited context blocks ([n], 1-based) whose document is gold; a marker outside the context
    counts as wrong. None when the answer cites nothing (left out and counted)."""
    cited = citations(answer)
    if not cited:
        return None
    ok = sum(1 for n in cited if 1 <= n <= len(context_doc_ids) and context_doc_ids[n - 1] in relevant)
    return ok / len(cited)


# ---- registered: scored per question by evaluate_queries --------------------------------------------

_ANSWERS = "reference answers (answers)"


def _in_language(fn):
    return lambda q: fn(q.answer, q.gold_answers, q.language) if q.gold_answers else None


for _metric in (
    Metric(
        "exact_match",
        "SQuAD exact match, max over gold answers",
        "generation",
        "EM",
        _ANSWERS,
        score=_in_language(exact_match),
    ),
    Metric(
        "token_f1",
        "SQuAD token F1, max over gold answers",
        "generation",
        "F1",
        _ANSWERS,
        score=_in_language(token_f1),
    ),
    Metric(
        "bleu",
        "sacreBLEU sentence BLEU against the gold answers, in [0, 1]",
        "generation",
        needs=_ANSWERS,
        score=_in_language(bleu),
    ),
    Metric(
        "rouge_l",
        "ROUGE-L F-measure, max over gold answers",
        "generation",
        needs=_ANSWERS,
        score=_in_language(rouge_l),
    ),
    Metric(
        "faithfulness",
        "share of the answer's tokens found in the context it was given",
        "support",
        "faithful",
        score=lambda q: faithfulness(q.answer, q.context_texts, q.language),
    ),
    Metric(
        "citation_accuracy",
        "share of cited context blocks whose document is gold",
        "support",
        needs="answers that cite their context ([n] markers)",
        score=lambda q: citation_accuracy(q.raw_answer, q.context_doc_ids, q.relevant_doc_ids),
    ),
):
    register(_metric)

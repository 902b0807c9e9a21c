"""A QA set generated from a corpus through any LLM, with filters that keep only questions worth asking.

Sampling is stratified across documents (every document once before any twice) and reproducible by a
seed. Question types, weighted by the user:
- factoid: one passage, a short answer in it; gold = its document;
- multi_hop: two passages of different documents that share a named entity or a title, an answer that needs
  both; gold = both documents;
- unanswerable: a question on a passage's topic that it does not answer; gold = none, no reference answer
  (counted apart from the retrieval and answer metrics, which have nothing to score it against).

Filters, in order of cost, each counted: the question quotes its passage verbatim (a run of
`max_quoted_words` words); a near-duplicate of a kept question (embedding cosine ≥ `duplicate_cosine`);
the answer is not supported by the passage (an LLM check; for an unanswerable question: the passage does
answer it); with `require_context`, the model answers it without the passage (closed-book token F1 ≥ 0.8).

A failed or malformed call is skipped and counted, never raised; `max_calls` caps every call made.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag_core.common.completion import Completer
from rag_core.common.concurrency import map_concurrently
from rag_core.common.text import STOPWORDS, normalize_answer, tokens
from rag_core.metrics.generation import token_f1

QuestionType = Literal["factoid", "multi_hop", "unanswerable"]
PROMPT_VERSIONS = {
    "factoid": "qa-factoid-v1",
    "multi_hop": "qa-multihop-v1",
    "unanswerable": "qa-unanswerable-v1",
    "supported": "qa-supported-v1",
    "closed_book": "qa-closed-book-v1",
}
DEDUPE_MODEL = "all-MiniLM-L6-v2"  # the packaged embedder: near-duplicate questions, offline
CLOSED_BOOK_F1 = 0.8  # a closed-book answer this close to the reference: the question needs no passage
ROUNDS = 8  # draws of fresh samples to replace rejected questions, before giving up short
MAX_OVERSAMPLE = 3.0  # a round draws up to this many samples per missing question (the observed keep rate)


class QAGeneration(BaseModel):
    """The `qa_generation` settings (sweep file or `rag-sweep generate-qa`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    model: str = Field(min_length=1)
    """The litellm model that writes the questions, e.g. `openai/gpt-4o-mini`."""
    questions: int = Field(50, ge=1)
    """How many questions to write."""
    types: dict[QuestionType, float] = Field(default_factory=lambda: {"factoid": 0.8, "multi_hop": 0.2})
    """Question type -> weight: `factoid` (from one passage), `multi_hop` (from two passages of different
    documents that share a name or title), `unanswerable` (from a passage that does not answer it)."""
    seed: int = 0
    """The seed of the stratified, reproducible document sample."""
    require_context: bool = True
    """Drop questions the model answers closed-book (token F1 >= 0.8)."""
    max_calls: int | None = Field(None, ge=1)
    """The call budget: no call beyond it."""
    duplicate_cosine: float = Field(0.95, gt=0, le=1)
    """A question this close (all-MiniLM-L6-v2 cosine) to a kept one is a near-duplicate and dropped."""
    max_quoted_words: int = Field(8, ge=3)
    """A question quoting a run of this many words of its passage is dropped."""
    passage_chars: int = Field(1500, ge=200)
    """The length of a passage a question is written from."""

    @field_validator("types")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("types: weights must be non-negative and sum to more than 0")
        return v

    def targets(self) -> dict[str, int]:
        """Questions per type: the weights' shares of `questions`, largest remainders rounded up."""
        total = sum(self.types.values())
        exact = {t: self.questions * w / total for t, w in self.types.items() if w > 0}
        out = {t: int(x) for t, x in exact.items()}
        for t in sorted(exact, key=lambda t: out[t] - exact[t])[: self.questions - sum(out.values())]:
            out[t] += 1
        return out


@dataclass
class Sample:
    kind: str
    doc_ids: list[str]
    passages: list[str]


@dataclass
class Candidate:
    sample: Sample
    question: str
    answer: str  # "" for an unanswerable question


@dataclass
class GenerationReport:
    """What generation did: counts per outcome and what it spent; `metadata()` for the set's sidecar."""

    settings: QAGeneration
    kept: Counter = field(default_factory=Counter)  # per type
    rejected: Counter = field(default_factory=Counter)  # per filter
    calls: int = 0
    failed_calls: int = 0
    malformed_replies: int = 0
    errors: list = field(default_factory=list)  # the failed calls' errors (redacted), for the summary
    skipped_for_budget: int = 0
    no_pair: int = 0  # multi-hop samples without a second document sharing an entity
    tokens: int = 0
    cost_usd: float = 0.0

    def metadata(self) -> dict:
        return {
            "generator_model": self.settings.model,
            "seed": self.settings.seed,
            "prompt_versions": PROMPT_VERSIONS,
            "settings": self.settings.model_dump(),
            "kept": dict(self.kept),
            "rejected": dict(self.rejected),
            "calls": self.calls,
            "failed_calls": self.failed_calls,
            "malformed_replies": self.malformed_replies,
            "skipped_for_budget": self.skipped_for_budget,
            "multi_hop_without_pair": self.no_pair,
            "tokens": self.tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


# ---- prompts (versioned: a changed wording is a new version) ---------------------------------------------

FACTOID = """Write one question that the passage below answers, and its answer.
The question must make sense on its own to someone who has not seen the passage: name the people, places
and things it is about; do not say "the passage" or "the text", and do not copy a sentence of it.
The answer is a short phrase taken from the passage (a name, a number, a date, a few words).
Reply with JSON only: {{"question": "...", "answer": "..."}}

Passage (from "{title}"):
{passage}"""

MULTI_HOP = """Write one question that needs BOTH passages below to answer (a fact from each), and its answer.
The question must make sense on its own: name what it is about; do not mention the passages and do not copy
a sentence of them. The answer is a short phrase.
Reply with JSON only: {{"question": "...", "answer": "..."}}

Passage 1 (from "{title}"):
{passage}

Passage 2 (from "{title2}"):
{passage2}"""

UNANSWERABLE = """Write one question on the topic of the passage below that the passage does NOT answer
(something a reader would plausibly ask, whose answer is not in it). The question must make sense on its
own and name what it is about.
Reply with JSON only: {{"question": "...", "answer": ""}}

Passage (from "{title}"):
{passage}"""

SUPPORTED = """Passage:
{passage}

Question: {question}
Proposed answer: {answer}

Does the passage state the proposed answer to the question, so that a reader of the passage alone would
give it? Reply with one word: yes or no."""

ANSWERED = """Passage:
{passage}

Question: {question}

Does the passage answer the question? Reply with one word: yes or no."""

CLOSED_BOOK = """Answer the question in as few words as possible, from what you know, without looking
anything up. If you do not know, reply "unknown".

Question: {question}"""


# ---- sampling -----------------------------------------------------------------------------------------------


def _passage(text: str, chars: int, rng: random.Random) -> str:
    """A window of at most `chars` characters at a paragraph boundary (the whole text when it is short)."""
    if len(text) <= chars:
        return text.strip()
    starts = [0] + [m.end() for m in re.finditer(r"\n\s*\n", text) if m.end() < len(text) - chars // 4]
    start = rng.choice(starts)
    window = text[start : start + chars]
    cut = window.rfind(". ")
    return (window[: cut + 1] if cut > chars // 2 else window).strip()


_ENTITY = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")


def entities(text: str) -> set[str]:
    """Capitalized phrases that are not stopwords: the names two documents can share."""
    out = set()
    for m in _ENTITY.finditer(text):
        phrase = m.group(0).strip()
        if phrase.lower() not in STOPWORDS and len(phrase) > 2:
            out.add(phrase.lower())
    return out


def document_order(doc_ids: list[str], n: int, rng: random.Random) -> list[str]:
    """`n` documents, stratified: each document once (in a seeded order) before any a second time."""
    out: list[str] = []
    while len(out) < n:
        batch = list(doc_ids)
        rng.shuffle(batch)
        out += batch
    return out[:n]


class Sampler:
    """Passages to write questions from, reproducible by the seed; draws continue where they left off."""

    def __init__(self, corpus: pl.DataFrame, settings: QAGeneration):
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.ids = corpus["doc_id"].to_list()
        self.text = dict(zip(self.ids, corpus["text"], strict=True))
        self.title = dict(zip(self.ids, corpus["title"], strict=True))
        self.order: list[str] = []
        self.drawn = 0
        self._entities: dict[str, set[str]] = {}

    def _next_doc(self) -> str:
        if self.drawn >= len(self.order):
            self.order += document_order(self.ids, len(self.ids), self.rng)
        self.drawn += 1
        return self.order[self.drawn - 1]

    def _ents(self, doc_id: str) -> set[str]:
        if doc_id not in self._entities:
            self._entities[doc_id] = entities(self.title[doc_id] + "\n" + self.text[doc_id])
        return self._entities[doc_id]

    def partner(self, doc_id: str) -> str | None:
        """Another document sharing a named entity with this one (its title mentioned, or a shared name)."""
        mine = self._ents(doc_id)
        title = self.title[doc_id].lower()
        candidates = [
            d
            for d in self.ids
            if d != doc_id
            and (
                (title and title in self.text[d].lower())
                or (self.title[d] and self.title[d].lower() in self.text[doc_id].lower())
                or mine & self._ents(d)
            )
        ]
        return self.rng.choice(candidates) if candidates else None

    def draw(self, kind: str) -> Sample | None:
        chars = self.settings.passage_chars
        doc = self._next_doc()
        if kind != "multi_hop":
            return Sample(kind, [doc], [_passage(self.text[doc], chars, self.rng)])
        other = self.partner(doc)
        if other is None:
            return None
        passages = [_passage(self.text[d], chars // 2, self.rng) for d in (doc, other)]
        return Sample(kind, [doc, other], passages)


# ---- replies and filters -------------------------------------------------------------------------------------


def parse_reply(text: str, kind: str) -> tuple[str, str] | None:
    """(question, answer) from a JSON reply (fenced or with prose around it), or None when malformed."""
    m = re.search(r"\{.*\}", text, re.DOTALL)
    if not m:
        return None
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    question, answer = obj.get("question"), obj.get("answer", "")
    if not isinstance(question, str) or not question.strip() or not isinstance(answer, str):
        return None
    if kind != "unanswerable" and not normalize_answer(answer):
        return None  # an answer that normalizes to nothing would match an empty (failed) answer
    return question.strip(), (answer.strip() if kind != "unanswerable" else "")


def quotes_passage(question: str, passages: list[str], words: int) -> bool:
    """Whether the question repeats a run of `words` consecutive words of a passage."""
    q = tokens(question)
    runs = {tuple(q[i : i + words]) for i in range(len(q) - words + 1)}
    if not runs:
        return False
    for p in passages:
        t = tokens(p)
        if any(tuple(t[i : i + words]) in runs for i in range(len(t) - words + 1)):
            return True
    return False


def is_yes(text: str) -> bool:
    return normalize_answer(text).split()[:1] == ["yes"]


def near_duplicates(vectors: np.ndarray, kept: np.ndarray | None, cosine: float) -> list[bool]:
    """For each (L2-normalized) row: whether it is within `cosine` of a kept row or of an earlier row."""
    out, pool = [], [] if kept is None else list(kept)
    for v in vectors:
        dup = bool(pool) and float(np.max(np.asarray(pool) @ v)) >= cosine
        out.append(dup)
        if not dup:
            pool.append(v)
    return out


# ---- generation ----------------------------------------------------------------------------------------------


class _Budget:
    """Counts calls across threads and refuses any beyond `max_calls`."""

    def __init__(self, llm: Completer, report: GenerationReport, max_calls: int | None):
        self.llm, self.report, self.max_calls = llm, report, max_calls
        self.lock = threading.Lock()

    def ask(self, model: str, prompt: str, max_tokens: int) -> str | None:
        with self.lock:
            if self.max_calls is not None and self.report.calls >= self.max_calls:
                self.report.skipped_for_budget += 1
                return None
            self.report.calls += 1
        out = self.llm.complete(model, prompt, temperature=0.0, max_tokens=max_tokens)
        with self.lock:
            self.report.tokens += out.prompt_tokens + out.completion_tokens
            self.report.cost_usd += out.cost_usd
            if out.error:
                self.report.failed_calls += 1
                self.report.errors.append(out.error)
        return None if out.error else out.text


def _prompt(s: Sample, titles: dict[str, str]) -> str:
    title = titles[s.doc_ids[0]]
    if s.kind == "factoid":
        return FACTOID.format(title=title, passage=s.passages[0])
    if s.kind == "unanswerable":
        return UNANSWERABLE.format(title=title, passage=s.passages[0])
    return MULTI_HOP.format(
        title=title, passage=s.passages[0], title2=titles[s.doc_ids[1]], passage2=s.passages[1]
    )


def generate_qa(
    corpus: pl.DataFrame,
    settings: QAGeneration,
    llm: Completer,
    embed: Callable[[list[str]], np.ndarray] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
) -> tuple[pl.DataFrame, GenerationReport]:
    """A QA set in the project's format (plus `question_type`) and the report of what was kept and why not.

    corpus: doc_id, title, text. `embed` (L2-normalized vectors) enables the near-duplicate filter (without
    it, only questions equal once normalized are duplicates); `progress(kept, wanted, calls)` after each round.
    """
    report = GenerationReport(settings)
    budget = _Budget(llm, report, settings.max_calls)
    sampler = Sampler(corpus, settings)
    targets = settings.targets()
    kept: list[Candidate] = []
    kept_vectors: np.ndarray | None = None
    seen = set()
    model = settings.model

    def write(s: Sample) -> Candidate | None:
        text = budget.ask(model, _prompt(s, sampler.title), 256)
        if text is None:
            return None
        parsed = parse_reply(text, s.kind)
        if parsed is None:
            with budget.lock:
                report.malformed_replies += 1
            return None
        return Candidate(s, *parsed)

    def verdict(c: Candidate) -> str | None:
        """The filter that rejects the candidate (None: kept, "call" when a check could not be made)."""
        passage = "\n\n".join(c.sample.passages)
        if c.sample.kind == "unanswerable":
            reply = budget.ask(model, ANSWERED.format(passage=passage, question=c.question), 4)
            return "call" if reply is None else ("answered_by_passage" if is_yes(reply) else None)
        reply = budget.ask(model, SUPPORTED.format(passage=passage, question=c.question, answer=c.answer), 4)
        if reply is None:
            return "call"
        if not is_yes(reply):
            return "unsupported"
        if settings.require_context:
            closed = budget.ask(model, CLOSED_BOOK.format(question=c.question), 32)
            if closed is None:
                return "call"
            if token_f1(closed, [c.answer]) >= CLOSED_BOOK_F1:
                return "answerable_without_context"
        return None

    drawn = Counter()
    for _ in range(ROUNDS):
        need = {t: n - report.kept[t] for t, n in targets.items() if n > report.kept[t]}
        samples = []
        for kind, n in need.items():
            # after the first round, draw as many more as this type's rejections say it takes
            rate = report.kept[kind] / drawn[kind] if drawn[kind] else 1.0
            extra = min(MAX_OVERSAMPLE, 1 / rate) if rate > 0 else MAX_OVERSAMPLE
            for _ in range(math.ceil(n * extra)):
                drawn[kind] += 1
                s = sampler.draw(kind)
                if s is None:
                    report.no_pair += 1
                else:
                    samples.append(s)
        if not samples or (settings.max_calls is not None and report.calls >= settings.max_calls):
            break
        candidates = [c for c in map_concurrently(write, samples, llm.max_concurrency) if c is not None]
        fresh = []
        for c in candidates:
            norm = normalize_answer(c.question)
            if quotes_passage(c.question, c.sample.passages, settings.max_quoted_words):
                report.rejected["quotes_passage"] += 1
            elif norm in seen:
                report.rejected["near_duplicate"] += 1
            else:
                seen.add(norm)
                fresh.append(c)
        if embed is not None and fresh:
            vectors = embed([c.question for c in fresh])
            dup = near_duplicates(vectors, kept_vectors, settings.duplicate_cosine)
            report.rejected["near_duplicate"] += sum(dup)
            fresh = [c for c, d in zip(fresh, dup, strict=True) if not d]
            vectors = vectors[np.array([not d for d in dup], dtype=bool)]
        else:
            vectors = None
        verdicts = map_concurrently(verdict, fresh, llm.max_concurrency)
        for i, (c, why) in enumerate(zip(fresh, verdicts, strict=True)):
            if why == "call":
                report.rejected["check_not_made"] += 1
            elif why:
                report.rejected[why] += 1
            elif sum(1 for k in kept if k.sample.kind == c.sample.kind) < targets[c.sample.kind]:
                kept.append(c)
                report.kept[c.sample.kind] += 1
                if vectors is not None:
                    v = vectors[i : i + 1]
                    kept_vectors = v if kept_vectors is None else np.vstack([kept_vectors, v])
        if progress:
            progress(len(kept), settings.questions, report.calls)
        if len(kept) >= settings.questions:
            break
        if sampler.drawn >= len(sampler.ids) and not any(report.kept[t] > targets[t] - need[t] for t in need):
            break  # every document tried and a whole round kept nothing: more of the same would not either
    rows = [
        {
            "query_id": f"gen-{i + 1:04d}",
            "question": c.question,
            "answers": [c.answer] if c.answer else [],
            "relevant_doc_ids": c.sample.doc_ids if c.sample.kind != "unanswerable" else [],
            "question_type": c.sample.kind,
        }
        for i, c in enumerate(kept)
    ]
    schema = {
        "query_id": pl.String,
        "question": pl.String,
        "answers": pl.List(pl.String),
        "relevant_doc_ids": pl.List(pl.String),
        "question_type": pl.String,
    }
    return pl.DataFrame(rows, schema=schema), report


def estimate_calls(settings: QAGeneration) -> int:
    """Calls a generation makes when every question passes: one to write it, one support check, one
    closed-book check (answerable ones, with require_context); the budget caps it."""
    targets = settings.targets()
    checks = sum(
        n * (2 if t != "unanswerable" and settings.require_context else 1) for t, n in targets.items()
    )
    calls = settings.questions + checks
    return min(calls, settings.max_calls) if settings.max_calls else calls


def sidecar(qa_path) -> Path:
    """Where a generated QA set's metadata (generator model, seed, prompt versions, counts) is kept."""
    qa_path = Path(qa_path)
    return qa_path.with_name(qa_path.stem + ".generation.json")


def write_generated(frame: pl.DataFrame, report: GenerationReport, out: Path) -> None:
    """The set as JSONL in the project's QA format (a person can review and edit it) and its sidecar; each
    file appears whole or not at all."""
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in frame.to_dicts())
    for path, text in ((sidecar(out), json.dumps(report.metadata(), indent=2) + "\n"), (out, lines)):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)


def generation_metadata(qa_path) -> dict | None:
    """The sidecar of a generated set, when there is one (a hand-made set has none)."""
    path = sidecar(qa_path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def generation_params(qa_path) -> dict[str, str]:
    """MLflow params of a run evaluated on a generated set: who wrote its questions, how."""
    meta = generation_metadata(qa_path)
    if not meta:
        return {}
    versions = meta.get("prompt_versions") or {}
    return {
        "qa.generator_model": str(meta.get("generator_model")),
        "qa.generation_seed": str(meta.get("seed")),
        "qa.prompt_versions": ",".join(sorted(versions.values())),
    }

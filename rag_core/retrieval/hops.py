"""Iterative retrieval (retrieval.max_hops > 1): after the first search, each question may search again,
up to max_hops searches, each adding the top chunks of documents not found before.

Whether to go on and what to search next is the config's `hop_policy`:
- `names` (offline, no LLM): the loop stops when the passages found so far cover the question: at least
  COVERAGE of its content words (`sufficient`; a comparison question whose two pages the first hop found
  stops there). Else the next query is the question followed by the names (capitalized phrases) the first
  passages of the last hop's new documents mention that neither the question nor an earlier query holds,
  and that are not the title of a document found already. On a bridge question ("in which city was the company that produced Film X
  founded?") the first hop finds Film X's page, which names the company: the second hop searches for it,
  and its page covers the rest of the question. It also stops when there is no new name to search for
  (`nothing_new`), or a hop finds no new document.
- `llm`: `hop_model` reads the question and the passages found so far; it says whether they suffice
  (sufficiency_prompt: stop), and if not writes the next query (refine_prompt). A failed or empty reply
  falls back to the `names` rule for that decision and is counted: a failed sufficiency call stops where
  the passages cover the question (COVERAGE), a failed refine call searches the names rule's query (or
  stops: nothing new). More than 10% of the loop's calls failed: the config is not ranked
  (rag_core/decision/qualification.py).

Each question's trajectory is kept with its retrieval (HOP_SCHEMA): the query and the new documents of
every hop, why it stopped, and the loop's LLM calls, tokens, cost and time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from rag_core.common.completion import Completer, usage
from rag_core.common.concurrency import map_concurrently
from rag_core.planning.prompts import REFINE_PROMPT, SUFFICIENCY_PROMPT, fill
from rag_core.planning.spec import RagConfig

HOP_SCHEMA = {
    "hops": pl.Int64,  # searches made
    "hop_queries": pl.List(pl.String),  # the query of each hop
    "hop_doc_ids": pl.List(pl.List(pl.String)),  # the documents each hop found first (in rank order)
    "hop_chunk_counts": pl.List(pl.Int64),  # chunks each hop added to the ranking
    "hop_stop": pl.String,  # max_hops | nothing_new | no_new_documents | sufficient
    "hop_calls": pl.Int64,  # the loop's LLM calls
    "hop_tokens": pl.Int64,
    "hop_cost_usd": pl.Float64,
    "hop_ms": pl.Float64,  # the loop's LLM time
    "hop_fallbacks": pl.Int64,  # LLM decisions that failed and fell back to the names rule
}

STOPS = ("max_hops", "nothing_new", "no_new_documents", "sufficient")
MAX_NAMES = 3  # names the names rule adds to the question
COVERAGE = 0.8  # the share of the question's content words the passages must hold to stop
# words a question holds that no passage needs to repeat
FUNCTION_WORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how in is it its of on or she "
    "that the their there they this to was were what when where which who whom whose why with".split()
)
PASSAGES_READ = 2  # of the last hop's new documents, the first passages the names rule reads
DEPTH = 4  # a later hop fetches this many times (fetch_k + the chunks found so far): enough new documents
# a capitalized word, or several joined by spaces or a few lower-case particles ("Bank of England")
NAME = re.compile(
    r"[A-Z][\w'’-]*(?:(?:\s+(?:of|the|and|de|la|le|von|van|der|du|da|del|&))*\s+[A-Z][\w'’-]*)*"
)
# capitalized words that start sentences rather than name something
NOT_NAMES = frozenset(
    "A An And As At After Before But By During For From He Her His How I If In It Its Of On Or She That The "
    "Their There These They This Those To Was We What When Where Which While Who Why With".split()
)


@dataclass
class Trajectory:
    """One question's loop: the hits so far, and what each hop did."""

    question: str
    hits: list  # Hit, in the order the ranking keeps them: the first hop's, then each later hop's new ones
    queries: list[str]
    docs: list[list[str]]  # the new documents of each hop
    counts: list[int]
    stop: str = "max_hops"
    calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    ms: float = 0.0
    fallbacks: int = 0
    done: bool = False
    search_ms: float = 0.0  # the later hops' store queries (the first hop's are the retrieval's own)

    def row(self) -> dict:
        return {
            "hops": len(self.queries),
            "hop_queries": self.queries,
            "hop_doc_ids": self.docs,
            "hop_chunk_counts": self.counts,
            "hop_stop": self.stop,
            "hop_calls": self.calls,
            "hop_tokens": self.tokens,
            "hop_cost_usd": self.cost_usd,
            "hop_ms": self.ms,
            "hop_fallbacks": self.fallbacks,
        }

    def spend(self, out) -> None:
        used = usage(out)
        self.calls += 1
        self.tokens += used["tokens"]
        self.cost_usd += used["cost_usd"]
        self.ms += used["ms"]


def loop_counts(rows: pl.DataFrame) -> dict[str, int]:
    """Over a retrieval's rows (HOP_SCHEMA's columns): the loop's LLM calls and fallbacks, and how many
    questions each stop reason ended (`stopped_<reason>`, every reason of STOPS)."""
    return {
        "llm_calls": int(rows["hop_calls"].sum()),
        "fallbacks": int(rows["hop_fallbacks"].sum()),
        **{f"stopped_{s}": int((rows["hop_stop"] == s).sum()) for s in STOPS},
    }


def new_documents(hits, seen: set[str]) -> list[str]:
    """The documents of `hits` not in `seen`, in rank order, each once."""
    return list(dict.fromkeys(h.doc_id for h in hits if h.doc_id not in seen))


def names_in(text: str) -> list[str]:
    """The names a text mentions (capitalized phrases), in order, each once; a lone sentence-starting word
    such as "The" is not one."""
    found = (m.group(0) for m in NAME.finditer(text or ""))
    return list(dict.fromkeys(n for n in found if " " in n or n not in NOT_NAMES))


def next_query(question: str, asked: list[str], found_titles: list[str], passages: list[str]) -> str | None:
    """The names rule: the question and up to MAX_NAMES names the passages mention that no query asked so
    far holds and no document found so far is titled (its page is here already); None when there is none
    (nothing new to search for)."""
    low = " ".join([question, *asked]).lower()
    have = {t.lower() for t in found_titles if t}
    names = dict.fromkeys(x for p in passages for x in names_in(p))
    new = [n for n in names if n.lower() not in low and n.lower() not in have][:MAX_NAMES]
    return " ".join([question, *new]) if new else None


def coverage(question: str, passages: list[str]) -> float:
    """The share of the question's content words (lower-cased words that are not FUNCTION_WORDS) that the
    passages hold; 1.0 for a question without any."""
    from rag_core.retrieval.bm25 import tokenize

    wanted = set(tokenize(question)) - FUNCTION_WORDS
    if not wanted:
        return 1.0
    held = set().union(*(tokenize(p) for p in passages)) if passages else set()
    return len(wanted & held) / len(wanted)


def _names_rule(t: Trajectory, title_of, text_of) -> str | None:
    last = set(t.docs[-1])
    passages = [text_of(h.chunk_id) for h in t.hits if h.doc_id in last][:PASSAGES_READ]
    return next_query(t.question, t.queries, [title_of(h.doc_id) for h in t.hits], passages)


def passages_text(t: Trajectory, text_of: Callable[[str], str]) -> str:
    return "\n\n".join(f"[{i}] {text_of(h.chunk_id)}" for i, h in enumerate(t.hits, start=1))


def parse_yes(reply: str) -> bool | None:
    """YES / NO at the start of a reply (any case, punctuation around it); None: neither."""
    m = re.match(r"\W*(yes|no)\b", reply or "", re.IGNORECASE)
    return None if m is None else m.group(1).lower() == "yes"


def iterate(
    c: RagConfig,
    trajectories: list[Trajectory],
    search: Callable[[list[tuple[str, int]]], list[tuple[list, float]]],
    title_of: Callable[[str], str],
    text_of: Callable[[str], str],
    llm: Completer | None,
) -> None:
    """Run the loop on every question's trajectory (its first hop done), in place. `search([(query,
    depth)])`: each query's top `depth` hits and the ms of its store queries, in one batch (the query vectors
    are embedded together); `title_of(doc_id)`,
    `text_of(chunk_id)`: what the names rule and the prompts read."""
    r = c.retrieval
    for hop in range(2, r.max_hops + 1):
        active = [t for t in trajectories if not t.done]
        if not active:
            return
        if r.hop_policy == "llm":
            results = map_concurrently(
                lambda t: _decide_llm(c, t, title_of, text_of, llm),
                active,
                llm.max_concurrency,
                what=f"hop {hop} decided",
            )
        else:
            results = [
                (True, None)
                if coverage(t.question, [text_of(h.chunk_id) for h in t.hits]) >= COVERAGE
                else (False, _names_rule(t, title_of, text_of))
                for t in active
            ]
        going = []
        for t, (enough, query) in zip(active, results, strict=True):
            if enough:
                t.stop, t.done = "sufficient", True
            elif query is None or query in t.queries:
                t.stop, t.done = "nothing_new", True
            else:
                going.append((t, query))
        # deep enough that the documents found so far do not hide the new ones
        found = search([(q, DEPTH * (c.fetch_k + len(t.hits))) for t, q in going]) if going else []
        for (t, query), (hits, ms) in zip(going, found, strict=True):
            t.search_ms += ms
            seen = {h.doc_id for h in t.hits}
            added = [h for h in hits if h.doc_id not in seen][: c.fetch_k]  # this hop's share of the context
            t.queries.append(query)
            t.docs.append(new_documents(added, seen))
            t.counts.append(len(added))
            t.hits.extend(added)
            if not added:
                t.stop, t.done = "no_new_documents", True
    for t in trajectories:
        if not t.done:
            t.stop = "max_hops"


def _decide_llm(c: RagConfig, t: Trajectory, title_of, text_of, llm: Completer) -> tuple[bool, str | None]:
    """(enough?, the next query) from the hop model; a failed or unreadable reply falls back to the names
    rule for that decision (go on; the names rule's query) and is counted."""
    r = c.retrieval
    passages = passages_text(t, text_of)

    def ask(template: str, max_tokens: int) -> str | None:
        """The hop model's reply to the template filled for this question (None: the call failed)."""
        out = llm.complete(
            r.hop_model,
            fill(template, query=t.question, passages=passages),
            temperature=0.0,
            max_tokens=max_tokens,
        )
        t.spend(out)
        return None if out.error else out.text or ""

    reply = ask(r.sufficiency_prompt or SUFFICIENCY_PROMPT, 4)
    enough = None if reply is None else parse_yes(reply)
    if enough is None:  # the names rule decides: a failed call is no reason to search again
        t.fallbacks += 1
        enough = coverage(t.question, [text_of(h.chunk_id) for h in t.hits]) >= COVERAGE
    if enough:
        return True, ""
    reply = ask(r.refine_prompt or REFINE_PROMPT, 64)
    lines = [x.strip() for x in (reply or "").splitlines() if x.strip()]
    if lines:
        return False, lines[0]
    t.fallbacks += 1
    return False, _names_rule(t, title_of, text_of)

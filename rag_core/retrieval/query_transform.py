"""Query transformation prompts and parsers (the calls go through the LLM resource).

- rewrite:     one rewritten search query.
- multi_query: n alternative phrasings; each is retrieved and the rankings are fused (RRF) with the
               original question's.
- hyde:        a hypothetical answer passage (Gao et al., 2022) whose embedding replaces the question's.
A reply that parses to nothing falls back to the original question (the caller counts it).
"""

from __future__ import annotations

import re

REWRITE_PROMPT = """Rewrite the question into a short, specific search query for a keyword and vector search
engine over Wikipedia paragraphs. Keep all names. Reply with the query only.

QUESTION: {query}
QUERY:"""

MULTI_QUERY_PROMPT = """Write {n} different search queries that together find the information needed to answer
the question (one query per line, no numbering, no commentary).

QUESTION: {query}
QUERIES:"""

HYDE_PROMPT = """Write a short encyclopedic paragraph (2-3 sentences) that answers the question. If you are
unsure, write what such a paragraph would plausibly say.

QUESTION: {query}
PARAGRAPH:"""

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|q\d+[:.)])\s*", re.IGNORECASE)


def prompt_for(transform: str, query: str, n: int = 3) -> str:
    template = {"rewrite": REWRITE_PROMPT, "multi_query": MULTI_QUERY_PROMPT, "hyde": HYDE_PROMPT}[transform]
    return template.format(query=query, n=n)


def parse_reply(transform: str, reply: str, n: int = 3) -> list[str]:
    """The usable queries (or passage) in a reply; [] when nothing usable came back."""
    text = (reply or "").strip()
    if not text:
        return []
    if transform == "multi_query":
        lines = [_BULLET.sub("", line).strip().strip('"') for line in text.splitlines()]
        return list(dict.fromkeys(q for q in lines if len(q) > 2))[:n]
    first = text if transform == "hyde" else text.splitlines()[0]
    first = _BULLET.sub("", first).strip().strip('"')
    return [first] if len(first) > 2 else []

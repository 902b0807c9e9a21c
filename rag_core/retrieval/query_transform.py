"""Query transformation prompts and parsers (the calls go through the LLM resource).

- rewrite:     one rewritten search query.
- multi_query: n alternative phrasings; each is retrieved and the rankings are fused (RRF) with the
               original question's.
- hyde:        a hypothetical answer passage (Gao et al., 2022) whose embedding replaces the question's.
Their built-in prompts are in rag_core/planning/prompts.py (retrieval.query_prompt replaces them).
A reply that parses to nothing falls back to the original question (the caller counts it).
"""

from __future__ import annotations

import re

from rag_core.planning.prompts import fill

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|q\d+[:.)])\s*", re.IGNORECASE)


def prompt_for(template: str, query: str, n: int = 3) -> str:
    """The transformation's prompt (retrieval.query_template: the config's, else the built-in one) for a question."""
    return fill(template, query=query, n=n)


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

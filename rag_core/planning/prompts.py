"""The built-in text of each prompt a config setting holds, and how the query transformation and reranking
prompts are filled in.

Each of these prompts is a config setting (unset: the built-in text here), so a user can write their own
and prompt optimization (`optimize:`) can evolve it: the answer prompt (generation.prompt_template), the
context compression prompt (generation.context_prompt), the query transformation prompt
(retrieval.query_prompt: rewrite, multi_query or hyde) and the LLM reranking prompt (rerank.prompt). The
judge's prompt is the metric's, not a pipeline setting (rag_core/metrics/judge.py).
"""

from __future__ import annotations

import re

ANSWER_PROMPT = (
    "Answer the question using only the context. Reply with a short answer (a few words), no explanation.\n\n"
    "Context:\n{context}\n\nQuestion: {query}\nAnswer:"
)

# Context compression (generation.context: compress): the sentences of one passage that answer
COMPRESS_PROMPT = """Copy the sentences of the passage that help answer the question, word for word. If no
sentence helps, reply NONE.

QUESTION: {query}
PASSAGE: {passage}
RELEVANT SENTENCES:"""

# Query transformation (retrieval.query_transform), one built-in prompt per transformation
QUERY_PROMPTS = {
    "rewrite": """Rewrite the question into a short, specific search query for a keyword and vector search
engine over Wikipedia paragraphs. Keep all names. Reply with the query only.

QUESTION: {query}
QUERY:""",
    "multi_query": """Write {n} different search queries that together find the information needed to answer
the question (one query per line, no numbering, no commentary).

QUESTION: {query}
QUERIES:""",
    "hyde": """Write a short encyclopedic paragraph (2-3 sentences) that answers the question. If you are
unsure, write what such a paragraph would plausibly say.

QUESTION: {query}
PARAGRAPH:""",
}

# LLM reranking (rerank.method: llm)
RERANK_PROMPT = """Rank the passages by how useful they are to answer the question.
Reply with the passage numbers, most useful first, separated by commas (for example: 3, 1, 2).

QUESTION: {query}

{passages}

RANKING:"""

# Iterative retrieval (retrieval.max_hops > 1, retrieval.hop_policy: llm): after each hop, whether the passages
# found so far suffice, and if not, the next hop's search query
SUFFICIENCY_PROMPT = """Do the passages contain every fact needed to answer the question? Reply YES or NO only.

QUESTION: {query}

{passages}

ENOUGH:"""

REFINE_PROMPT = """The passages below do not yet answer the question. Write one short search query for the
missing fact, naming the entity the passages point to (for example the person or place the question hinges
on). Reply with the query only.

QUESTION: {query}

{passages}

NEXT QUERY:"""

# the placeholders each prompt must hold (multi_query's {n}, the number of queries, is optional)
PLACEHOLDERS = {
    "prompt_template": ("{query}", "{context}"),
    "context_prompt": ("{query}", "{passage}"),
    "sufficiency_prompt": ("{query}", "{passages}"),
    "refine_prompt": ("{query}", "{passages}"),
    "query_prompt": ("{query}",),
    "prompt": ("{query}", "{passages}"),
}


def fill(template: str, **values: object) -> str:
    """The template with each `{name}` replaced by its value, in one pass (a value holding `{name}` stays as
    it is); every other brace stays as it is (a user's or an evolved template may hold JSON), where
    str.format would read `{{` as an escape. The built-in prompts come out as str.format made them."""
    names = "|".join(re.escape(n) for n in values)
    return re.sub(r"\{(" + names + r")\}", lambda m: str(values[m.group(1)]), template)


def missing(field: str, template: str) -> list[str]:
    """The placeholders of prompt setting `field` that `template` lacks."""
    return [p for p in PLACEHOLDERS[field] if p not in template]

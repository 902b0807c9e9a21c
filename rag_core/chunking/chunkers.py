"""Chunkers: pure functions from a document's text to character spans.

Every chunk is an exact slice `text[start:end]` of its document (nothing invented), chunks follow the
document order, and together they cover every non-whitespace character (nothing lost). Sizes and overlaps
are in characters, or in tokens of the embedder's tokenizer when token offsets are given. Leading/trailing
whitespace of a chunk is trimmed by moving its span inwards.

- fixed:     windows of `chunk_size` units, each starting `chunk_size - chunk_overlap` after the last.
- sentence:  whole sentences packed up to `chunk_size`; the overlap carries trailing sentences.
- paragraph: whole paragraphs (blank-line separated) packed up to `chunk_size`.
- recursive: split on the coarsest separator that yields pieces within `chunk_size` (paragraph, line,
             sentence, word, character), then pack pieces up to `chunk_size` with overlap.
- markdown:  structure-aware: a chunk never crosses a heading (Markdown `#` or HTML `<h1>`-`<h6>`), a
             heading stays with the content after it, fenced code blocks and tables are never split (an
             oversized one becomes a chunk of its own), and each chunk carries its heading path.
- semantic:  sentences are grouped until the embedding distance between adjacent sentences exceeds a
             breakpoint (a percentile of all adjacent distances of the corpus), within `chunk_size`.
Units longer than `chunk_size` fall back to the next finer level, down to single characters (tokens).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag_core.chunking.base import CHUNKERS, Chunker, Measure, Span, pack

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before whitespace.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")
_LEVELS = {
    "paragraph": re.compile(r"\n\s*\n\s*"),
    "line": re.compile(r"\n\s*"),
    "sentence": _SENTENCE_END,
    "word": re.compile(r"\s+"),
}
_LEVELS_BY_METHOD = {
    "sentence": ["sentence", "word"],
    "paragraph": ["paragraph", "sentence", "word"],
    "recursive": ["paragraph", "line", "sentence", "word"],
}


def chunk_text(
    text: str,
    method: str,
    chunk_size: int,
    chunk_overlap: int,
    token_offsets: Sequence[tuple[int, int]] | None = None,
    breakpoints: set[int] | None = None,
) -> list[Span]:
    """Split `text` into spans by a registered chunking method (the module docstring describes the
    built-ins). `token_offsets` (character offsets of the tokenizer's tokens) switches sizes to tokens;
    `breakpoints` (character offsets where a new semantic group starts) drives the semantic method."""
    if chunk_overlap >= chunk_size:
        raise ValueError("chunk_overlap must be smaller than chunk_size")
    m = Measure(token_offsets)
    spans = CHUNKERS.get(method).spans(text, chunk_size, chunk_overlap, m, breakpoints)
    return [s for s in (_trim(text, s) for s in spans) if s is not None]


def _split(text: str, start: int, end: int, levels: list[str], size: int, m: Measure) -> list[Span]:
    """Units in order covering every non-whitespace character of [start, end), each at most `size`
    (characters or tokens) and trimmed of surrounding whitespace (sizes count content, not separators)."""
    if m.size(start, end) <= size:
        trimmed = _trim(text, Span(start, end))
        return [trimmed] if trimmed else []
    if not levels:
        return [t for t in (_trim(text, s) for s in m.windows(start, end, size, size)) if t]
    pattern, rest = _LEVELS[levels[0]], levels[1:]
    cuts = [x.end() for x in pattern.finditer(text, start, end) if x.end() < end]
    if not cuts:
        return _split(text, start, end, rest, size, m)
    units = []
    bounds = [start, *cuts, end]
    for a, b in zip(bounds, bounds[1:], strict=False):
        units.extend(_split(text, a, b, rest, size, m))
    return units


def _trim(text: str, span: Span) -> Span | None:
    start, end = span.start, span.end
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(start, end, span.heading) if end > start else None


# ---- structure-aware (Markdown / HTML headings) ---------------------------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$|^\s*<h([1-6])[^>]*>(.*?)</h\3>\s*$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE = re.compile(r"^\s*\|")


def _blocks(text: str) -> list[tuple[str, int, int, int, str]]:
    """(kind, start, end, heading level, heading title) per block: heading, code, table or paragraph."""
    blocks, pos, lines = [], 0, text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line, start = lines[i], pos
        h = _HEADING.match(line.rstrip("\n"))
        if h:
            level = len(h.group(1)) if h.group(1) else int(h.group(3))
            title = (h.group(2) or re.sub(r"<[^>]+>", "", h.group(4) or "")).strip()
            blocks.append(("heading", start, start + len(line), level, title))
            pos += len(line)
            i += 1
            continue
        if _FENCE.match(line):
            fence = _FENCE.match(line).group(1)
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith(fence):
                j += 1
            j = min(j + 1, len(lines))  # include the closing fence (or run to the end)
            kind = "code"
        elif _TABLE.match(line):
            j = i
            while j < len(lines) and _TABLE.match(lines[j]):
                j += 1
            kind = "table"
        elif not line.strip():
            pos += len(line)
            i += 1
            continue
        else:
            j = i
            while (
                j < len(lines)
                and lines[j].strip()
                and not _HEADING.match(lines[j].rstrip("\n"))
                and not _FENCE.match(lines[j])
                and not _TABLE.match(lines[j])
            ):
                j += 1
            kind = "paragraph"
        end = start + sum(len(x) for x in lines[i:j])
        blocks.append((kind, start, end, 0, ""))
        pos, i = end, j
    return blocks


def _markdown(text: str, size: int, overlap: int, m: Measure) -> list[Span]:
    out: list[Span] = []
    path: list[tuple[int, str]] = []
    section: list[Span] = []
    pending_heading: Span | None = None

    def flush() -> None:
        nonlocal section
        if section:
            out.extend(pack(section, size, overlap, m, " > ".join(t for _, t in path)))
        section = []

    for kind, start, end, level, title in _blocks(text):
        if kind == "heading":
            flush()
            if pending_heading is not None:  # a heading with no content of its own
                out.append(Span(pending_heading.start, pending_heading.end, " > ".join(t for _, t in path)))
            path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
            pending_heading = Span(start, end)
            continue
        if kind in ("code", "table"):
            units = [Span(start, end)]  # never split
        else:
            units = _split(text, start, end, ["sentence", "word"], size, m)
        if pending_heading is not None and units:
            # the heading travels with the first piece of its content (if they fit together)
            first = units[0]
            if m.size(pending_heading.start, first.end) <= size or kind in ("code", "table"):
                units[0] = Span(pending_heading.start, first.end)
            else:
                units.insert(0, pending_heading)
            pending_heading = None
        section.extend(units)
    flush()
    if pending_heading is not None:
        out.append(Span(pending_heading.start, pending_heading.end, " > ".join(t for _, t in path)))
    return out


# ---- semantic --------------------------------------------------------------------------------------


def sentence_spans(text: str) -> list[Span]:
    bounds = [0, *(x.end() for x in _SENTENCE_END.finditer(text)), len(text)]
    spans = (_trim(text, Span(a, b)) for a, b in zip(bounds, bounds[1:], strict=False))
    return [s for s in spans if s]


def split_sentences(text: str) -> list[str]:
    """Sentences of a text, by the sentence chunker's boundary rule."""
    return [text[s.start : s.end] for s in sentence_spans(text)]


def _semantic(text: str, size: int, overlap: int, m: Measure, breakpoints: set[int]) -> list[Span]:
    units = [u for s in sentence_spans(text) for u in _split(text, s.start, s.end, ["word"], size, m)]
    out: list[Span] = []
    group: list[Span] = []
    for unit in units:
        if group and unit.start in breakpoints:
            out.extend(pack(group, size, overlap, m))
            group = []
        group.append(unit)
    if group:
        out.extend(pack(group, size, overlap, m))
    return out


def semantic_breakpoints(sentences: list[list[Span]], vectors: list, percentile: float) -> list[set[int]]:
    """Per document, the start offsets of sentences whose cosine distance to the previous sentence is
    above the `percentile` of all adjacent distances (over the corpus)."""
    import numpy as np

    distances = []
    for vecs in vectors:
        v = np.asarray(vecs, dtype=np.float64)
        if len(v) < 2:
            distances.append(np.zeros(0))
            continue
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        distances.append(1.0 - np.sum(v[1:] * v[:-1], axis=1))
    pooled = np.concatenate(distances) if distances else np.zeros(0)
    if pooled.size == 0:
        return [set() for _ in sentences]
    threshold = float(np.percentile(pooled, percentile))
    return [
        {spans[i + 1].start for i, d in enumerate(dist) if d > threshold}
        for spans, dist in zip(sentences, distances, strict=True)
    ]


def chunk_corpus(corpus, method: str, chunk_size: int, chunk_overlap: int, tokenize=None, breakpoints=None):
    """Chunk every document of a corpus frame (doc_id, title, text, metadata) into a chunk frame.

    `tokenize(texts) -> list of token character offsets` switches sizes to tokens; `breakpoints` is one
    set per document for the semantic method. `index_text` is what gets embedded and keyword-indexed: the
    document title (and heading path), a newline, the chunk — a contextual header, so a chunk that never
    names its subject can still be found by it.
    """
    import json

    import polars as pl

    docs = list(corpus.iter_rows(named=True))
    offsets = tokenize([d["text"] for d in docs]) if tokenize else [None] * len(docs)
    rows = []
    for n, doc in enumerate(docs):
        text, title = doc["text"], doc["title"] or ""
        bps = breakpoints[n] if breakpoints else None
        for i, span in enumerate(chunk_text(text, method, chunk_size, chunk_overlap, offsets[n], bps)):
            chunk = text[span.start : span.end]
            header = " > ".join(x for x in (title, span.heading) if x)
            meta = json.loads(doc["metadata"] or "{}")
            if span.heading:
                meta["heading_path"] = span.heading
            rows.append(
                {
                    "chunk_id": f"{doc['doc_id']}#{i}",
                    "doc_id": doc["doc_id"],
                    "title": title,
                    "text": chunk,
                    "start": span.start,
                    "end": span.end,
                    "index_text": f"{header}\n{chunk}" if header else chunk,
                    "metadata": json.dumps(meta, sort_keys=True),
                }
            )
    schema = {
        "chunk_id": pl.String,
        "doc_id": pl.String,
        "title": pl.String,
        "text": pl.String,
        "start": pl.Int64,
        "end": pl.Int64,
        "index_text": pl.String,
        "metadata": pl.String,
    }
    return pl.DataFrame(rows, schema=schema)


# ---- the built-in methods ---------------------------------------------------------------------------


def _fixed(text: str, size: int, overlap: int, m: Measure) -> list[Span]:
    return m.windows(0, len(text), size, size - overlap)


def _packed(levels: list[str]):
    def split(text: str, size: int, overlap: int, m: Measure) -> list[Span]:
        return pack(_split(text, 0, len(text), levels, size, m), size, overlap, m)

    return split


for _chunker in (
    Chunker(
        "fixed",
        _fixed,
        "windows of chunk_size units, each starting chunk_size - chunk_overlap after the last",
    ),
    Chunker("sentence", _packed(_LEVELS_BY_METHOD["sentence"]), "whole sentences packed up to chunk_size"),
    Chunker("paragraph", _packed(_LEVELS_BY_METHOD["paragraph"]), "whole paragraphs packed up to chunk_size"),
    Chunker(
        "recursive",
        _packed(_LEVELS_BY_METHOD["recursive"]),
        "the coarsest separator (paragraph, line, sentence, word) within chunk_size, packed with overlap",
    ),
    Chunker(
        "markdown",
        _markdown,
        "never crosses a heading, keeps a heading with its content, never splits code blocks or tables",
    ),
    Chunker(
        "semantic",
        _semantic,
        "cuts where adjacent sentences' embeddings drift apart (semantic_percentile), within chunk_size",
        semantic=True,
    ),
):
    CHUNKERS.register(_chunker.name, _chunker)

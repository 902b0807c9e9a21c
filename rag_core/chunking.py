"""Chunkers: pure functions from a document's text to character spans.

Every chunk is an exact slice `text[start:end]` of its document (nothing invented), chunks follow the
document order, and together they cover every non-whitespace character (nothing lost). Sizes and overlaps
are in characters. Leading/trailing whitespace of a chunk is trimmed by moving its span inwards.

- fixed:     windows of `chunk_size` characters, each starting `chunk_size - chunk_overlap` after the last.
- sentence:  whole sentences packed up to `chunk_size`; the overlap carries trailing sentences.
- paragraph: whole paragraphs (blank-line separated) packed up to `chunk_size`.
- recursive: split on the coarsest separator that yields pieces within `chunk_size` (paragraph, line,
             sentence, word, character), then pack pieces up to `chunk_size` with overlap.
Units longer than `chunk_size` fall back to the next finer level, down to single characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Span:
    start: int
    end: int


def chunk_text(text: str, method: str, chunk_size: int, chunk_overlap: int) -> list[Span]:
    """Split `text` into spans; see the module docstring for each method."""
    if chunk_overlap >= chunk_size:
        raise ValueError("chunk_overlap must be smaller than chunk_size")
    if method == "fixed":
        spans = _fixed(0, len(text), chunk_size, chunk_size - chunk_overlap)
    elif method in _LEVELS_BY_METHOD:
        units = _split(text, 0, len(text), _LEVELS_BY_METHOD[method], chunk_size)
        spans = _pack(units, chunk_size, chunk_overlap)
    else:
        raise ValueError(f"unknown chunking method {method!r}")
    return [s for s in (_trim(text, s) for s in spans) if s is not None]


def _fixed(start: int, end: int, size: int, step: int) -> list[Span]:
    out = []
    pos = start
    while pos < end:
        out.append(Span(pos, min(pos + size, end)))
        if pos + size >= end:
            break
        pos += step
    return out


def _split(text: str, start: int, end: int, levels: list[str], size: int) -> list[Span]:
    """Units in order covering every non-whitespace character of [start, end), each at most `size`
    characters and trimmed of surrounding whitespace (so sizes count content, not separators)."""
    if end - start <= size:
        trimmed = _trim(text, Span(start, end))
        return [trimmed] if trimmed else []
    if not levels:
        return [t for t in (_trim(text, s) for s in _fixed(start, end, size, size)) if t]
    pattern, rest = _LEVELS[levels[0]], levels[1:]
    cuts = [m.end() for m in pattern.finditer(text, start, end) if m.end() < end]
    if not cuts:
        return _split(text, start, end, rest, size)
    units = []
    bounds = [start, *cuts, end]
    for a, b in zip(bounds, bounds[1:], strict=False):
        units.extend(_split(text, a, b, rest, size))
    return units


def _pack(units: list[Span], size: int, overlap: int) -> list[Span]:
    """Greedily pack consecutive units into spans of at most `size` characters; a new span starts with
    the trailing units of the previous one that fit in `overlap` characters."""
    out: list[Span] = []
    current: list[Span] = []
    for unit in units:
        if current and unit.end - current[0].start > size:
            out.append(Span(current[0].start, current[-1].end))
            carried: list[Span] = []
            for u in reversed(current):
                if current[-1].end - u.start > overlap or unit.end - u.start > size:
                    break
                carried.insert(0, u)
            current = carried
        current.append(unit)
    if current:
        out.append(Span(current[0].start, current[-1].end))
    return out


def _trim(text: str, span: Span) -> Span | None:
    start, end = span.start, span.end
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(start, end) if end > start else None


def chunk_corpus(corpus, method: str, chunk_size: int, chunk_overlap: int):
    """Chunk every document of a corpus frame (doc_id, title, text, metadata) into a chunk frame.

    `index_text` is what gets embedded and keyword-indexed: the document title, a newline, the chunk
    (a contextual header, so a chunk that never names its subject can still be found by it).
    """
    import polars as pl

    rows = []
    for doc in corpus.iter_rows(named=True):
        text, title = doc["text"], doc["title"] or ""
        for i, span in enumerate(chunk_text(text, method, chunk_size, chunk_overlap)):
            chunk = text[span.start : span.end]
            rows.append(
                {
                    "chunk_id": f"{doc['doc_id']}#{i}",
                    "doc_id": doc["doc_id"],
                    "title": title,
                    "text": chunk,
                    "start": span.start,
                    "end": span.end,
                    "index_text": f"{title}\n{chunk}" if title else chunk,
                    "metadata": doc["metadata"],
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


def split_sentences(text: str) -> list[str]:
    """Sentences of a text, by the sentence chunker's boundary rule."""
    bounds = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
    spans = (_trim(text, Span(a, b)) for a, b in zip(bounds, bounds[1:], strict=False))
    return [text[s.start : s.end] for s in spans if s]

"""What a chunker is, and the registry of chunking methods (`chunking.method`).

A chunker splits one document's text into character spans: `split(text, chunk_size, chunk_overlap,
measure)` returns Spans (or (start, end) pairs) in document order, each a slice of the text. `measure`
counts a span's length in characters, or in tokens of the embedder's tokenizer (`chunking.unit: tokens`),
and cuts windows of a size; a chunker that uses it works in both units. The built-ins are registered in
rag_core/chunking/chunkers.py; a plug-in registers under the entry-point group `rag_sweep.chunkers` (a
`Chunker`, or a split function whose docstring's first line describes it; see examples/plugins/).
"""

from __future__ import annotations

import bisect
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_core.common.registry import Registry, first_line


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    heading: str = ""  # markdown: the heading path, "Title > Section"


class Measure:
    """Length of a span in characters, or in tokens when the tokenizer's character offsets are given."""

    def __init__(self, token_offsets: Sequence[tuple[int, int]] | None = None):
        self.tokens = None if token_offsets is None else [o for o in token_offsets if o[1] > o[0]]
        self._starts = [s for s, _ in self.tokens or []]
        self._ends = [e for _, e in self.tokens or []]

    def size(self, start: int, end: int) -> int:
        if self.tokens is None:
            return end - start
        # tokens lying inside [start, end): starts >= start, ends <= end
        first = bisect.bisect_left(self._starts, start)
        last = bisect.bisect_right(self._ends, end)
        return max(0, last - first)

    def windows(self, start: int, end: int, size: int, step: int) -> list[Span]:
        if self.tokens is None:
            out, pos = [], start
            while pos < end:
                out.append(Span(pos, min(pos + size, end)))
                if pos + size >= end:
                    break
                pos += step
            return out
        idx = [i for i, (s, e) in enumerate(self.tokens) if s >= start and e <= end]
        if not idx:
            return [Span(start, end)]
        out = []
        for w in range(0, len(idx), step):
            group = idx[w : w + size]
            a = start if w == 0 else self.tokens[group[0]][0]
            last = w + size >= len(idx)
            b = end if last else self.tokens[idx[w + size]][0]  # up to the next window's first token
            out.append(Span(a, b))
            if last:
                break
        return out


def pack(units: list[Span], size: int, overlap: int, m: Measure, heading: str = "") -> list[Span]:
    """Greedily pack consecutive units into spans of at most `size`; a new span starts with the
    trailing units of the previous one that fit in `overlap` (and beside the unit that starts it). The
    built-in methods pack their sentences, paragraphs or pieces with it; a plug-in may pack its own units."""
    out: list[Span] = []
    current: list[Span] = []
    for unit in units:
        if current and m.size(current[0].start, unit.end) > size:
            out.append(Span(current[0].start, current[-1].end, heading))
            carried: list[Span] = []
            for u in reversed(current):
                if m.size(u.start, current[-1].end) > overlap or m.size(u.start, unit.end) > size:
                    break
                carried.insert(0, u)
            current = carried
        current.append(unit)
    if current:
        out.append(Span(current[0].start, current[-1].end, heading))
    return out


@dataclass(frozen=True)
class Chunker:
    name: str
    split: Callable[..., Sequence[Span | tuple[int, int]]]
    description: str
    # cut where adjacent sentences' embeddings drift apart: `split` also takes `breakpoints` (the character
    # offsets where a new group starts), computed with the embedder while chunking
    semantic: bool = False

    def spans(
        self, text: str, size: int, overlap: int, m: Measure, breakpoints: set[int] | None
    ) -> list[Span]:
        raw = (
            self.split(text, size, overlap, m, breakpoints or set())
            if self.semantic
            else self.split(text, size, overlap, m)
        )
        out = []
        for s in raw:
            span = s if isinstance(s, Span) else Span(*s)
            if not (
                isinstance(span.start, int)
                and isinstance(span.end, int)
                and 0 <= span.start <= span.end <= len(text)
            ):
                raise ValueError(
                    f"chunking method {self.name!r} returned span {span.start!r}..{span.end!r}, outside its "
                    f"text of {len(text)} characters"
                )
            out.append(span)
        return out


def _adapt(name: str, obj: object) -> Chunker:
    if isinstance(obj, Chunker):
        return obj if obj.name == name else Chunker(name, obj.split, obj.description, obj.semantic)
    if callable(obj) and len(inspect.signature(obj).parameters) >= 4:
        return Chunker(name, obj, first_line(obj.__doc__) or f"{name} (no description)")
    raise TypeError(
        f"got {type(obj).__name__}; expected a Chunker or a function split(text, chunk_size, chunk_overlap, measure)"
    )


CHUNKERS: Registry[Chunker] = Registry(
    "chunking method", "rag_sweep.chunkers", ("rag_core.chunking.chunkers",), _adapt
)

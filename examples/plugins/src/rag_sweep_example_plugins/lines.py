"""The `lines` chunking method: whole lines packed up to chunk_size.

For line-oriented documents (lists, logs, tables as text, verse), where a paragraph is too coarse and a
sentence rule cuts in the wrong places. A line longer than chunk_size is cut into windows of it; the
overlap carries whole trailing lines. `measure` counts characters or tokens (`chunking.unit`), so the
method works in both units.
"""

from __future__ import annotations

import re

from rag_sweep.plugins import Measure, Span, pack

_LINE = re.compile(r"[^\n]*\S[^\n]*")  # a line with some text


def lines(text: str, chunk_size: int, chunk_overlap: int, measure: Measure) -> list[Span]:
    """whole lines packed up to chunk_size; a longer line is cut into windows"""
    units: list[Span] = []
    for m in _LINE.finditer(text):
        if measure.size(m.start(), m.end()) <= chunk_size:
            units.append(Span(m.start(), m.end()))
        else:
            units.extend(measure.windows(m.start(), m.end(), chunk_size, chunk_size))
    return pack(units, chunk_size, chunk_overlap, measure)  # whole lines, whole trailing lines as overlap

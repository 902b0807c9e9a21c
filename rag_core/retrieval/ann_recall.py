"""What an approximate vector index loses: `ann_recall_at_k`, the share of the exact search's top k that the
approximate search returns for the same question at the same k (the measure of ann-benchmarks and
VectorDBBench), and the index's cost figures carried to the config's evaluation.

The exact reference is the store's own exact search over the same collection (every row compared:
resources/vector_stores/base.py `exact_vector_search`), so the recall is the index's alone: same vectors,
same filter, same k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import polars as pl

# per-question columns a retrieval of an approximate index adds (rerankings and answers carry them along)
RECALL = "ann_recall_at_k"
# the index build's figures, the same on every row of a config (read off its vector_index marker)
BUILD_FIGURES = {
    "build_s": "index_build_s",
    "build_peak_mb": "index_build_peak_mb",
    # the IVF partitions the store trained (LanceDB trains fewer than asked on few rows): what was built
    "ann_partitions": "index_ann_partitions",
}


class VectorSearcher(Protocol):
    def vector_search(self, collection: str, vector, k: int, where: dict | None = None) -> list: ...

    def exact_vector_search(self, collection: str, vector, k: int, where: dict | None = None) -> list: ...


def recall_at_k(approximate: Sequence[str], exact: Sequence[str]) -> float | None:
    """|approximate ∩ exact| / |exact| (None when the exact search finds nothing: a filter matched no row)."""
    if not exact:
        return None
    return len(set(approximate) & set(exact)) / len(set(exact))


def ann_recalls(
    store: VectorSearcher, collection: str, vectors: np.ndarray, k: int, where: dict | None = None
) -> list[float | None]:
    """Each question's recall of the approximate search against the exact one (same vector, k, filter), each
    as a retrieval returns it: searched k + TIE_MARGIN deep and its top k kept by the tie rule
    (rag_core/retrieval/retrieve.py), so the figure is that of the chunks the config actually returned (a
    search 5 deep recalls less than the top 5 of one 15 deep, the deeper the more an index refines)."""
    from rag_core.retrieval.retrieve import TIE_MARGIN, ranked

    depth = k + TIE_MARGIN
    out = []
    for v in vectors:
        approx = [h.chunk_id for h in ranked(store.vector_search(collection, v, depth, where), k)]
        exact = [h.chunk_id for h in ranked(store.exact_vector_search(collection, v, depth, where), k)]
        out.append(recall_at_k(approx, exact))
    return out


def index_figures(retrievals: pl.DataFrame) -> dict[str, float]:
    """A config's index figures for its evaluation: the mean ann_recall_at_k over its questions (an
    approximate index searched by vector), and the build's time and peak memory (where its marker has them)."""
    out: dict[str, float] = {}
    if RECALL in retrievals.columns and retrievals[RECALL].drop_nulls().len():
        out[RECALL] = float(retrievals[RECALL].drop_nulls().mean())
    for column in BUILD_FIGURES.values():
        if column in retrievals.columns and retrievals.height:
            out[column] = float(retrievals[column][0])
    return out

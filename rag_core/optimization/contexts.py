"""The contexts a candidate's answers read: the config's retrieval and reranking, run again on the questions
asked when an optimized component changes them (the query transformation or LLM reranking prompt), else
the config's own rerankings, which no answer-side prompt changes.

A stage is passed in as a function of (the candidate's config, the questions, the LLM client), so the
optimization stays free of stores and models; the caller binds those (rag_assets/prompt_optimization.py)
to the sweep's own stage functions (rag_core/retrieval/retrieve.py, rag_core/retrieval/rerank.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from rag_core.common.completion import Completer
from rag_core.planning.spec import RagConfig

Retrieve = Callable[[RagConfig, pl.DataFrame, Completer], pl.DataFrame]  # (config, qa, llm) -> retrievals
Rerank = Callable[[RagConfig, pl.DataFrame, pl.DataFrame, Completer], pl.DataFrame]  # (c, retrieved, qa, llm)


def _of(frame: pl.DataFrame, qa: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("query_id").is_in(qa["query_id"].to_list()))


@dataclass(frozen=True)
class Contexts:
    """From `first_stage` on, the stages run again: `retrievals` (needs retrieve and rerank), `rerankings`
    (the config's `retrieved` candidates; needs rerank) or `answers` (the config's `reranked` rows)."""

    first_stage: str = "answers"
    reranked: pl.DataFrame | None = None
    retrieved: pl.DataFrame | None = None
    retrieve: Retrieve | None = None
    rerank: Rerank | None = None

    def __post_init__(self):
        needs = {
            "answers": ("reranked",),
            "rerankings": ("retrieved", "rerank"),
            "retrievals": ("retrieve", "rerank"),
        }
        if self.first_stage not in needs:
            raise ValueError(f"no optimization starts at stage {self.first_stage!r}")
        if lacking := [n for n in needs[self.first_stage] if getattr(self, n) is None]:
            raise ValueError(f"contexts from {self.first_stage} need {', '.join(lacking)}")

    def retrieval(self, c: RagConfig, qa: pl.DataFrame, llm: Completer) -> pl.DataFrame | None:
        """The retrieved candidates of config `c` on the questions of `qa`: searched again (first stage
        `retrievals`), the config's own (`rerankings`), or None (`answers`: retrieval and reranking reused)."""
        if self.first_stage == "retrievals":
            return self.retrieve(c, qa, llm)
        return _of(self.retrieved, qa) if self.first_stage == "rerankings" else None

    def reranking(
        self, c: RagConfig, retrieved: pl.DataFrame | None, qa: pl.DataFrame, llm: Completer
    ) -> pl.DataFrame:
        """The final contexts of config `c` on the questions of `qa`: `retrieved` reranked again, or the
        config's own rerankings (first stage `answers`)."""
        if self.first_stage == "answers":
            return _of(self.reranked, qa)
        return self.rerank(c, retrieved, qa, llm)

"""The rerankers a sweep can name (`rerank.method`), by name.

The built-ins (`none`, `mmr`, `llm`, `cross_encoder`) are registered in rag_core/retrieval/rerank.py, which
runs them with what they need (the embeddings, an LLM, a device). A plug-in registers under the entry-point
group `rag_sweep.rerankers`: a function `order(query, texts, k, model) -> [index, ...]`, the candidates'
indices best first (its docstring's first line describes it), or a `Reranker`. `model` is the sweep's
`rerank.model` (None when unset); `k` is how many the context keeps. Indices it does not list keep their
retrieval order after the listed ones, as an LLM's ordering does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_core.common.registry import Registry, function_or

MODEL_USE = ("none", "optional", "required")  # whether `rerank.model` names something the reranker uses


@dataclass(frozen=True)
class Reranker:
    name: str
    description: str
    # a plug-in's (query, texts, k, model) -> candidate indices, best first; None: a built-in run by rerank.py
    order: Callable[[str, list[str], int, str | None], Sequence[int]] | None = None
    model: str = "optional"  # one of MODEL_USE
    calls_llm: bool = False  # rerank.model is a litellm model it calls (its endpoint joins the fingerprint)
    local_model: bool = False  # rerank.model is a local folder (its version joins the fingerprint)
    key_name: str | None = None  # its name in partition keys, when shorter than `name`

    @property
    def key(self) -> str:
        return self.key_name or self.name


RERANKERS = Registry(
    "reranker",
    "rag_sweep.rerankers",
    modules=("rag_core.retrieval.rerank",),
    adapt=function_or(Reranker, "order", "order(query, texts, k, model)"),
)


def reranker(method: str) -> Reranker:
    return RERANKERS.get(method)

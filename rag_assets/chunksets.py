"""Chunksets: the corpus split by one chunking setting."""

from __future__ import annotations

import polars as pl

from rag_assets.stage_asset import StageLogic, StageRun
from rag_core.chunking.chunkers import chunk_corpus, semantic_breakpoints, sentence_spans


class Chunksets(StageLogic):
    description = "Chunks of every document (chunk_id, doc_id, text, character span, index_text)."
    resources = ("embedder",)

    def compute(self, run: StageRun) -> pl.DataFrame:
        cfg, embedder = run.config.chunking, run.resources.embedder
        docs = run.read("corpus")
        tokenize, breakpoints = None, None
        if cfg.unit == "tokens":

            def tokenize(texts: list[str]):
                return embedder.token_offsets(cfg.model, texts)

        if cfg.semantic:
            # embed every sentence once (cached), then cut where adjacent sentences drift apart
            texts = docs["text"].to_list()
            spans = [sentence_spans(t) for t in texts]
            sentences = [[t[s.start : s.end] for s in sp] for t, sp in zip(texts, spans, strict=True)]
            unique = list(dict.fromkeys(s for doc in sentences for s in doc))
            vec = dict(zip(unique, embedder.embed(cfg.model, unique)[0], strict=True)) if unique else {}
            breakpoints = semantic_breakpoints(
                spans, [[vec[s] for s in doc] for doc in sentences], cfg.semantic_percentile
            )
        return chunk_corpus(
            docs, cfg.method, cfg.chunk_size, cfg.chunk_overlap, tokenize=tokenize, breakpoints=breakpoints
        )

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        lengths = frame["text"].str.len_chars()
        return {
            "dagster/row_count": frame.height,
            "chunks_per_doc": float(frame.height / max(frame["doc_id"].n_unique(), 1)),
            "chars_mean": float(lengths.mean()),
            "chars_min": int(lengths.min()),
            "chars_max": int(lengths.max()),
            "unique_texts": frame["index_text"].n_unique(),
            **{f"config/{k}": v for k, v in run.config.chunking.model_dump().items() if v is not None},
        }

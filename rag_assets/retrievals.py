"""Retrievals: the top fetch_k chunks of every question (rag_core/retrieval/retrieve.py)."""

from __future__ import annotations

import dagster as dg
import polars as pl

from rag_assets.stage_asset import StageLogic, StageRun
from rag_core.common.redaction import redact_url
from rag_core.common.text import UNSEGMENTED_ADVICE, unsegmented_share
from rag_core.metrics import percentile
from rag_core.retrieval.ann_recall import BUILD_FIGURES, RECALL, ann_recalls
from rag_core.retrieval.hops import loop_counts
from rag_core.retrieval.keywords import segments
from rag_core.retrieval.retrieve import retrieve


def live_index(stores, c, marker: pl.DataFrame, partition: str):
    """(the store, the collection) of config `c`'s vector index, whose marker artifact is `marker`; a
    Failure naming the vector_index `partition` to materialize again when the store no longer holds it."""
    store, collection = stores.get(c.index.store), marker["collection"][0]
    if not store.info(collection)["exists"]:
        raise dg.Failure(
            f"the vector index {collection!r} is gone from {c.index.store} (its files or server were "
            f"reset): materialize vector_index partition {partition!r} again"
        )
    return store, collection


class Retrievals(StageLogic):
    description = (
        "Per query: searched queries, ranked chunk ids, doc ids, scores and texts, and the search latency "
        "(ms of the store queries; embeddings come from the cache); with retrieval.max_hops > 1, each hop's "
        "query and new documents, why the loop stopped, and its LLM calls."
    )
    resources = ("embedder", "vector_stores", "llm")

    def compute(self, run: StageRun) -> pl.DataFrame:
        c = run.config
        marker = run.read("vector_index")
        store, collection = live_index(
            run.resources.vector_stores, c, marker, run.partition.reads["vector_index"]
        )
        qa, embed = run.read("qa_set"), run.resources.embedder.vectors_of(c.embedding.model)
        frame = retrieve(c, qa, run.read("chunksets"), store, collection, embed, run.llm)
        if c.index.ann.approximate and c.retrieval.reads_vector and qa.height:
            # what the approximate index loses: each question's vector search against the exact one, at
            # the config's depth (its vectors come from the embedder's cache)
            vectors = embed(qa["question"].to_list())
            recalls = ann_recalls(store, collection, vectors, c.fetch_k, c.retrieval.filter)
            frame = frame.with_columns(pl.Series(RECALL, recalls, pl.Float64))
        built = [pl.lit(marker[m][0]).alias(col) for m, col in BUILD_FIGURES.items() if m in marker.columns]
        return frame.with_columns(built) if built else frame

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        c, lat = run.config, frame["latency_ms"].to_list()
        keyword = {}
        if c.retrieval.reads_keywords:
            share = unsegmented_share(run.read("qa_set")["question"].to_list())
            keyword["unsegmented_question_share"] = round(share, 4)
            if share and not segments(c.index.bm25_analyzer):  # a segmenting analyzer cuts them into words
                run.context.log.warning(
                    f"{share:.0%} of the questions are written without spaces between words: {UNSEGMENTED_ADVICE}"
                )
        return {
            "dagster/row_count": frame.height,
            "latency_p50_ms": round(percentile(lat, 50), 3),
            "latency_p95_ms": round(percentile(lat, 95), 3),
            "mean_hits": float(frame["chunk_ids"].list.len().mean()),
            "fetch_k": c.fetch_k,
            "store": c.index.store,
            "ann": c.index.ann.key,
            **(
                {RECALL: round(float(frame[RECALL].drop_nulls().mean() or 0.0), 4)}
                if RECALL in frame.columns
                else {}
            ),
            "transform_fallbacks": int(frame["transform_fallback"].sum()),
            **keyword,
            **(hop_metadata(frame) if "hops" in frame.columns else {}),
            **{
                f"config/{k}": redact_url(v) if isinstance(v, str) else v  # e.g. the LLM endpoint
                for k, v in run.partition.own.items()
                if v is not None and not isinstance(v, dict)
            },
        }


def hop_metadata(frame: pl.DataFrame) -> dict:
    """An iterative retrieval's loop (rag_core/retrieval/hops.py): hops made, why it stopped, its LLM calls."""
    counts = loop_counts(frame)
    return {
        "mean_hops": round(float(frame["hops"].mean()), 4),
        "max_hops_used": int(frame["hops"].max()),
        **{
            f"stopped/{k.removeprefix('stopped_')}": n
            for k, n in counts.items()
            if k.startswith("stopped_") and n  # the reasons that ended some question
        },
        "hop_llm_calls": counts["llm_calls"],
        "hop_fallbacks": counts["fallbacks"],
    }

"""Vector index of one chunkset + embedding model in one store (the plan names the store of every index
partition). Several stores over one embeddings partition reuse its vectors. The artifact is a one-row
marker (collection, store, count); the index itself lives in the store."""

from __future__ import annotations

import dagster as dg
import polars as pl

from rag_assets.stage_asset import Check, StageLogic, StageRun
from rag_core.common.peak_memory import measured
from resources.embedders import vectors_from_column


def collection_name(partition_key: str, fp: str) -> str:
    """A valid Weaviate class name (letter first, [A-Za-z0-9_]) that stays readable and changes with the
    content."""
    readable = "".join(ch if ch.isalnum() else "_" for ch in partition_key)[:60]
    return f"Rag_{readable}_{fp[:10]}"


def index_present(store, partition_key: str, ref) -> bool:
    """Whether `store` holds the whole index the marker `ref` records: the store's files can be lost
    while the marker stays."""
    info = store.info(collection_name(partition_key, ref.fp))
    return bool(info["exists"]) and info["count"] == ref.read()["count"][0]


class VectorIndex(StageLogic):
    description = "One collection per partition holding chunk text, doc id and the precomputed vectors."
    resources = ("vector_stores",)
    checks = (Check("row_count_matches_chunkset", "The index holds one object per chunk.", True),)

    def kinds(self, plan) -> set[str]:
        return set(plan.stores)

    def _store(self, run: StageRun):
        return run.resources.vector_stores.get(run.config.index.store)

    def reusable(self, run: StageRun) -> bool:
        return super().reusable(run) and index_present(self._store(run), run.context.partition_key, run.ref)

    def compute(self, run: StageRun) -> pl.DataFrame:
        chunks, emb = run.read("chunksets"), run.read("embeddings")
        if emb["chunk_id"].to_list() != chunks["chunk_id"].to_list():
            raise dg.Failure(
                f"embeddings {run.inputs['embeddings'].fp[:12]} do not line up with their chunkset"
            )
        collection = collection_name(run.context.partition_key, run.ref.fp)
        store = self._store(run)
        rows = chunks.select("chunk_id", "doc_id", pl.col("index_text").alias("text"), "metadata").to_dicts()
        index = run.config.index
        # an approximate index is passed only to a store that builds it (the plan refused the others)
        ann = {"ann": index.ann} if index.ann.approximate else {}
        with measured() as build:
            n = store.upsert(collection, rows, vectors_from_column(emb["vector"]), index.bm25_analyzer, **ann)
        built = {}
        if index.ann.approximate:  # what the store built, said where it is not what was asked
            asked, trained = index.ann.settings(), store.trained_ann(index.ann, n)
            changed = {k: (asked[k], trained.get(k)) for k in asked if trained.get(k) != asked[k]}
            if changed:
                run.context.log.warning(
                    f"{store.backend} built {index.ann.type} over {n} chunks with "
                    + ", ".join(f"{k} {got} (asked {want})" for k, (want, got) in changed.items())
                    + ": the board's index_ann_partitions and this index's metadata say what was built"
                )
            if trained.get("num_partitions") is not None:
                built["ann_partitions"] = [int(trained["num_partitions"])]
        return pl.DataFrame(
            {
                "collection": [collection],
                "store": [store.backend],
                "count": [n],
                "build_s": [round(build.seconds, 4)],
                "build_peak_mb": [round(build.peak_mb, 2)],
                **built,
            }
        )

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        built = {
            c: float(frame[c][0])
            for c in ("build_s", "build_peak_mb", "ann_partitions")
            if c in frame.columns
        }
        return {
            "collection": frame["collection"][0],
            "store": frame["store"][0],
            "bm25_analyzer": run.config.index.bm25_analyzer,
            "ann": run.config.index.ann.key,
            "dagster/row_count": int(frame["count"][0]),
            **built,  # markers written before build figures were kept have none
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        info = self._store(run).info(frame["collection"][0])
        chunks = run.read("chunksets").height
        return [
            dg.AssetCheckResult(
                check_name="row_count_matches_chunkset",
                passed=bool(info["exists"]) and info["count"] == chunks,
                metadata={"index_rows": int(info["count"]), "chunkset_rows": chunks},
            )
        ]

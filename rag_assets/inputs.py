"""The sweep's inputs. The corpus and QA files are observable source assets whose data version is their
content hash; `corpus` and `qa_set` snapshot them (validated, normalized to Parquet). Every downstream
stage reads the snapshot, never the file, so editing a file changes nothing until it is snapshotted again."""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg
import polars as pl

from rag_assets.stage_asset import Check, StageLogic, StageRun, asset_key
from rag_core.datasets import load_corpus, load_qa
from rag_core.fingerprint import file_hash

# The automation sensor observes the files every 15 minutes; a changed hash re-snapshots the input, and
# the eager conditions downstream follow. An unchanged hash starts nothing.
warnings.filterwarnings("ignore", message="Function `observable_source_asset`", category=dg.BetaWarning)
OBSERVE = dg.AutomationCondition.cron_tick_passed("*/15 * * * *") & ~dg.AutomationCondition.in_progress()


def source_files(prefix: str, corpus: Path, qa: Path) -> list[dg.SourceAsset]:
    def observable(name: str, path: Path, what: str):
        @dg.observable_source_asset(
            key=asset_key(prefix, name),
            group_name=prefix,
            description=f"The {what} file {path}; its data version is the SHA-256 of its bytes.",
            metadata={"path": dg.MetadataValue.path(str(path))},
            automation_condition=OBSERVE,
        )
        def _observe() -> dg.DataVersion:
            return dg.DataVersion(file_hash(path))

        return _observe

    return [observable("corpus_file", corpus, "corpus"), observable("qa_file", qa, "QA set")]


class Corpus(StageLogic):
    description = (
        "The corpus snapshot: documents (doc_id, title, text, metadata) as read from the corpus file."
    )
    deps = ("corpus_file",)

    def identity(self, run: StageRun) -> str:
        return file_hash(run.plan.sweep.corpus_path)

    def compute(self, run: StageRun) -> pl.DataFrame:
        return load_corpus(run.plan.sweep.corpus_path)

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        return {
            "source": dg.MetadataValue.path(str(run.plan.sweep.corpus_path)),
            "dagster/row_count": frame.height,
            "total_chars": int(frame["text"].str.len_chars().sum()),
        }


class QASet(StageLogic):
    description = "The QA set snapshot: questions, gold answers and gold doc ids, checked against the corpus."
    deps = ("qa_file",)
    checks = (
        Check("gold_docs_in_corpus", "Every gold doc id of the QA set is a document of the corpus.", True),
    )

    def identity(self, run: StageRun) -> tuple:
        return file_hash(run.plan.sweep.qa_path), run.plan.sweep.max_queries

    def compute(self, run: StageRun) -> pl.DataFrame:
        docs = set(run.read("corpus")["doc_id"].to_list())
        return load_qa(run.plan.sweep.qa_path, docs, run.plan.sweep.max_queries)

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        return {
            "source": dg.MetadataValue.path(str(run.plan.sweep.qa_path)),
            "dagster/row_count": frame.height,
            "queries_without_gold_docs": int((frame["relevant_doc_ids"].list.len() == 0).sum()),
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        docs = set(run.read("corpus")["doc_id"].to_list())
        missing = sorted({d for ids in frame["relevant_doc_ids"].to_list() for d in ids} - docs)
        return [
            dg.AssetCheckResult(
                check_name="gold_docs_in_corpus",
                passed=not missing,
                metadata={"missing_doc_ids": len(missing), "examples": ", ".join(missing[:5])},
            )
        ]

"""The sweep's inputs. The corpus and QA files are observable source assets whose data version is their
content hash; `corpus` and `qa_set` snapshot them (validated, normalized to Parquet). Every downstream
stage reads the snapshot, never the file, so editing a file changes nothing until it is snapshotted again."""

import warnings
from pathlib import Path

import dagster as dg
import polars as pl

from rag_assets.stage_asset import Check, StageLogic, StageRun, asset_key, queue_tags
from rag_core.common.fingerprint import file_hash
from rag_core.data.datasets import DataWarning, load_corpus
from rag_core.data.qa.checks import MIN_ANSWER_IN_GOLD, qa_quality
from rag_core.data.qa.generation import (
    DEDUPE_MODEL,
    QAGeneration,
    generate_qa,
    generation_metadata,
    write_generated,
)
from rag_core.planning.inputs import corpus_identity, load_sweep_qa, named_field, qa_identity
from resources.embedders import EmbeddingService
from resources.llm import LLMClient

# The automation sensor observes the files every 15 minutes; a changed hash re-snapshots the input, and
# the eager conditions downstream follow. An unchanged hash starts nothing.
warnings.filterwarnings("ignore", message="Function `observable_source_asset`", category=dg.BetaWarning)
OBSERVE = dg.AutomationCondition.cron_tick_passed("*/15 * * * *") & ~dg.AutomationCondition.in_progress()


def source_files(plan) -> list:
    """The observed input files; with `qa_generation`, the QA file is an asset that writes it from the
    corpus."""
    corpus, qa, generation = plan.sweep.corpus_path, plan.sweep.qa_path, plan.sweep.qa_generation

    def observable(name: str, path: Path, what: str):
        @dg.observable_source_asset(
            key=asset_key(plan, name),
            group_name=plan.prefix,
            description=f"The {what} file {path}; its data version is the SHA-256 of its bytes.",
            metadata={"path": dg.MetadataValue.path(str(path))},
            automation_condition=OBSERVE,
        )
        def _observe() -> dg.DataVersion:
            return dg.DataVersion(file_hash(path))

        return _observe

    corpus_file = observable("corpus_file", corpus, "corpus")
    if generation is None:
        return [corpus_file, observable("qa_file", qa, "QA set")]
    return [corpus_file, generated_qa_file(plan, corpus, qa, generation)]


class GenerateQAConfig(dg.Config):
    regenerate: bool = False  # replace the file even when it exists (a reviewed copy is kept otherwise)


def generated_qa_file(plan, corpus: Path, qa: Path, settings: QAGeneration) -> dg.AssetsDefinition:
    """The QA set written by an LLM from the corpus (rag_core/data/qa/generation.py). Materialized on request
    only (it costs LLM calls): an existing file is a reviewed copy and is used as is unless `regenerate`."""

    @dg.asset(
        key=asset_key(plan, "qa_file"),
        group_name=plan.prefix,
        deps=[asset_key(plan, "corpus_file")],
        description=f"The QA set {qa}, generated from the corpus by {settings.model} when it does not exist "
        "(review and edit it: an existing file is used as is); its data version is the SHA-256 of its bytes.",
        metadata={"path": dg.MetadataValue.path(str(qa)), "generator_model": settings.model},
        pool="llm",
        op_tags=queue_tags(plan, "qa_file"),
    )
    def qa_file(
        context: dg.AssetExecutionContext,
        config: GenerateQAConfig,
        llm: LLMClient,
        embedder: EmbeddingService,
    ):
        if qa.exists() and not config.regenerate:
            context.log.info(f"{qa} exists: used as is (materialize with regenerate: true to replace it)")
            return dg.MaterializeResult(
                data_version=dg.DataVersion(file_hash(qa)),
                metadata={"generated": False, **_generated(qa)},
            )
        docs = load_corpus(corpus)

        def progress(kept: int, wanted: int, calls: int) -> None:
            context.log.info(f"{kept}/{wanted} questions kept, {calls} LLM calls so far")

        frame, report = generate_qa(
            docs,
            settings,
            llm,
            embed=lambda texts: embedder.embed(DEDUPE_MODEL, texts)[0],
            progress=progress,
        )
        if frame.height == 0:
            raise dg.Failure(
                f"no question was kept ({report.calls} calls, {report.failed_calls} failed, "
                f"{report.malformed_replies} malformed, rejected {dict(report.rejected)}); nothing written"
            )
        if frame.height < settings.questions:
            context.log.warning(f"{frame.height} of {settings.questions} questions kept (see the metadata)")
        write_generated(frame, report, qa)
        return dg.MaterializeResult(
            data_version=dg.DataVersion(file_hash(qa)),
            metadata={"generated": True, "dagster/row_count": frame.height, **_generated(qa)},
        )

    return qa_file


class Corpus(StageLogic):
    description = (
        "The corpus snapshot: documents (doc_id, title, text, metadata) as read from the corpus file."
    )
    deps = ("corpus_file",)

    def identity(self, run: StageRun) -> str:
        return corpus_identity(run.plan.sweep)

    def compute(self, run: StageRun) -> pl.DataFrame:
        with named_field(run.plan.sweep, "data.corpus"):
            return load_corpus(run.plan.sweep.corpus_path)

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        return {
            "source": dg.MetadataValue.path(str(run.plan.sweep.corpus_path)),
            "dagster/row_count": frame.height,
            "total_chars": int(frame["text"].str.len_chars().sum()),
        }


def _generated(qa_path: Path) -> dict:
    """Metadata of a generated QA set (its sidecar): generator model, seed, prompt versions and counts."""
    meta = generation_metadata(qa_path)
    if meta is None:
        return {}
    return {
        "generator_model": meta.get("generator_model", ""),
        "generation_seed": meta.get("seed", 0),
        "prompt_versions": dg.MetadataValue.json(meta.get("prompt_versions") or {}),
        "generation": dg.MetadataValue.json(
            {k: meta.get(k) for k in ("kept", "rejected", "calls", "failed_calls", "tokens", "cost_usd")}
        ),
    }


class QASet(StageLogic):
    description = "The QA set snapshot: questions, gold answers and gold doc ids, checked against the corpus."
    deps = ("qa_file",)
    checks = (
        Check("gold_docs_in_corpus", "Every gold doc id of the QA set is a document of the corpus.", True),
        Check("unique_questions", "No question is asked twice (case, punctuation and articles aside)."),
        Check(
            "queries_with_gold_docs",
            "Every query has a gold document; those without are left out of the retrieval metrics.",
        ),
        Check(
            "answers_in_gold_passages",
            f"At least {MIN_ANSWER_IN_GOLD:.0%} of the reference answers appear in their gold passages "
            "(lexical): a low rate means answers or gold ids that do not belong together.",
        ),
    )

    def identity(self, run: StageRun) -> tuple:
        return qa_identity(run.plan.sweep)

    def compute(self, run: StageRun) -> pl.DataFrame:
        corpus = run.read("corpus")
        sweep = run.plan.sweep
        with warnings.catch_warnings(record=True) as dropped:  # what the loader could not use, counted
            warnings.simplefilter("always", DataWarning)
            with named_field(sweep, "data.qa"):
                frame = load_sweep_qa(sweep, corpus)
        for w in dropped:
            if issubclass(w.category, DataWarning):
                run.context.log.warning(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return frame

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        return {
            "source": dg.MetadataValue.path(str(run.plan.sweep.qa_path)),
            "dagster/row_count": frame.height,
            "queries_without_gold_docs": int((frame["relevant_doc_ids"].list.len() == 0).sum()),
            "queries_without_answers": int((frame["answers"].list.len() == 0).sum()),
            **_generated(run.plan.sweep.qa_path),
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        q = qa_quality(frame, run.read("corpus"))
        warn = dg.AssetCheckSeverity.WARN
        rate = q.answer_in_gold
        return [
            dg.AssetCheckResult(
                check_name="gold_docs_in_corpus",
                passed=not q.missing_gold_ids,
                metadata={
                    "missing_doc_ids": len(q.missing_gold_ids),
                    "examples": ", ".join(q.missing_gold_ids[:5]),
                },
            ),
            dg.AssetCheckResult(
                check_name="unique_questions",
                passed=not q.duplicate_questions,
                severity=warn,
                metadata={
                    "duplicate_questions": len(q.duplicate_questions),
                    "examples": " | ".join(q.duplicate_questions[:3]),
                },
            ),
            dg.AssetCheckResult(
                check_name="queries_with_gold_docs",
                passed=q.without_gold == 0,
                severity=warn,
                metadata={
                    "queries_without_gold_docs": q.without_gold,
                    "share": round(q.without_gold_share, 4),
                },
            ),
            dg.AssetCheckResult(
                check_name="answers_in_gold_passages",
                passed=rate is None or rate >= MIN_ANSWER_IN_GOLD,
                severity=warn,
                metadata={
                    "rate": round(rate, 4) if rate is not None else "undefined (no query has both)",
                    "queries_judged": q.answer_in_gold_of,
                },
            ),
        ]

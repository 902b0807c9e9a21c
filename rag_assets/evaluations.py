"""Evaluations: step-level metrics of one config over the QA set (rag_core/evaluation/evaluate.py), tracked as an
MLflow run (params = the flattened config; tags: sweep, config key, Dagster run id, partition key).

The artifact is the one-row summary (config params + metric means + counts); the per-query metrics are its
side table `<fp>.per_query.parquet`."""

from __future__ import annotations

import threading

import dagster as dg
import polars as pl

from rag_assets.devices import devices_of
from rag_assets.stage_asset import Check, StageLogic, StageRun, forced
from rag_core.data.qa.generation import generation_params
from rag_core.decision.drift import compare
from rag_core.decision.holdout import is_holdout_key
from rag_core.decision.qualification import judge_is_weighted
from rag_core.evaluation.evaluate import (
    chunk_quality,
    evaluate,
    judge,
    language_slices,
    per_question_table,
    variance_split,
)
from rag_core.metrics import embedded_texts
from rag_core.retrieval.ann_recall import index_figures
from resources.artifacts import Artifact, QuestionSubset
from resources.embedders import chunk_vectors

PLOTTED_METRICS = (
    "recall_at_k",
    "ndcg_at_k",
    "exact_match",
    "token_f1",
    "faithfulness",
    "retrieval_p95_ms",
    "generation_p95_ms",
    "cost_usd",
    "ann_recall_at_k",  # an approximate index's (rag_core/retrieval/ann_recall.py)
)


_QUALITY: dict[tuple, dict[str, float]] = {}
_QUALITY_LOCK = threading.Lock()
# the embedder's model and file cache, used by one evaluation at a time when a batch judges configs side by
# side (`side_by_side`); the judge's calls are not held by it
_EMBEDDER = threading.Lock()


class Evaluations(StageLogic):
    description = "Retrieval, generation, latency and cost metrics of one config (see docs/metrics.md)."
    resources = ("embedder", "llm", "tracking")
    checks = (Check("judge_failures", "Every LLM-judge verdict parsed (only with evaluation.judge_model)."),)

    def kinds(self, plan) -> set[str]:
        return {"parquet", "mlflow"}

    def side_by_side(self, sweep, config) -> bool:
        # with an LLM judge, its calls are most of an evaluation's time: configs are judged side by side,
        # each one's use of the embedder (its model and file cache) one at a time (_EMBEDDER)
        return sweep.judge_model is not None

    def before_batch(self, runs: list[StageRun], log) -> None:
        # the texts answer metrics embed (answers, questions, gold answers), of every config of the batch
        # in one call per embedding model: one pass of full batches instead of a small one per config;
        # each config's own call then finds its vectors in the embedder's cache
        by_model: dict[str, list[str]] = {}
        for run in runs:
            texts = embedded_texts(run.read("qa_set"), run.read("answers"))
            by_model.setdefault(run.config.embedding.model, []).extend(texts)
        embedder = runs[0].resources.embedder
        for model, texts in by_model.items():
            with _EMBEDDER:
                _, stats = embedder.embed(model, list(dict.fromkeys(texts)))
            log.info(
                f"answer metrics of {len(runs)} configs: {stats.unique} texts embedded with {model} in one "
                f"call ({stats.embedded} new, {stats.seconds:.1f} s)"
            )

    def compute(self, run: StageRun) -> Artifact:
        c, sweep = run.config, run.plan.sweep
        embedder, llm = run.resources.embedder, run.llm
        qa, ret, ans = run.read("qa_set"), run.read("rerankings"), run.read("answers")
        model, chunks = c.embedding.model, run.read("chunksets")

        def embed(texts: list[str]):
            with _EMBEDDER:
                return embedder.embed(model, texts)[0]

        def token_counts(texts: list[str]) -> list[int]:
            with _EMBEDDER:
                return embedder.token_counts(model, texts)

        with _EMBEDDER:
            max_tokens = embedder.max_tokens(model)
        # the chunkset's metrics, once per chunkset, model and QA set in this process (keyed by content)
        shared = (run.inputs["chunksets"].fp, run.inputs["qa_set"].fp, model, max_tokens)
        with _QUALITY_LOCK:  # two configs side by side on one chunkset: computed once
            if shared not in _QUALITY:
                _QUALITY[shared] = chunk_quality(chunks, qa, embed, token_counts, max_tokens)
        per_query, metrics = evaluate(
            c,
            qa,
            ret,
            ans,
            chunks,
            embed=embed,
            chunk_vectors=chunk_vectors(run.read("embeddings")),
            token_counts=token_counts,
            max_tokens=max_tokens,
            quality=_QUALITY[shared],
            judged=(lambda answers: judge(llm, sweep.judge_model, qa, ret, answers, sweep.judge.prompt))
            if sweep.judge_model
            else None,
            language=sweep.language,
        )
        metrics |= index_figures(ret)  # ann_recall_at_k of an approximate index, the build's time and memory
        metrics |= variance_split(per_query, sweep.weights) or {}  # several answers per question
        metrics |= language_slices(per_query, qa, sweep.weights, sweep.language)  # a QA set in several
        if forced(run.context) and run.ref.intact():  # re-evaluated (the nightly): what changed since
            metrics |= compare(run.ref.read("per_query"), per_query, sweep.weights) or {}
        summary = {
            "config_key": run.context.partition_key,
            "fingerprint": run.ref.fp,
            **c.flat_params(),
            **metrics,
        }
        undefined = {k: pl.Float64 for k, v in metrics.items() if v is None}  # a float column, null
        return Artifact(
            run.ref, pl.DataFrame([summary], schema_overrides=undefined), {"per_query": per_query}
        )

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        metrics = _metrics(frame)
        qa = run.inputs["qa_set"]
        rung = {"questions": f"{qa.n}/{qa.source.read().height}"} if isinstance(qa, QuestionSubset) else {}
        plotted = (
            set(run.plan.sweep.weights)
            | set(PLOTTED_METRICS)
            | {m for m in metrics if m.startswith("score_lang_")}
        )
        key = run.context.partition_key
        run.context.log.info(
            f"{key}: "
            + ", ".join(
                f"{m}={metrics[m]:.3f}" if m in metrics else f"{m} undefined"
                for m in ("recall_at_k", "token_f1")
            )
        )
        return {
            **({"split": "holdout"} if is_holdout_key(key) else rung),
            # the metrics that decide (weighted, or what a team reads first) as numbers the UI plots over
            # partitions; the rest in one table-like JSON, not as ~30 more plots per config
            **{k: dg.MetadataValue.float(float(v)) for k, v in metrics.items() if k in plotted},
            "all_metrics": dg.MetadataValue.json({k: round(float(v), 6) for k, v in metrics.items()}),
            **llm_failure_metadata(frame.row(0, named=True), judge_is_weighted(run.plan.sweep.weights)),
        }

    def publish(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        """The config's MLflow run (a finalist on the holdout has none: the confirmation puts its holdout
        figures on the config's run)."""
        key, tracking = run.context.partition_key, run.resources.tracking
        if is_holdout_key(key):
            return {}
        summary, metrics = frame.to_dicts()[0], _metrics(frame)
        qa = run.inputs["qa_set"]
        rung = {"questions": f"{qa.n}/{qa.source.read().height}"} if isinstance(qa, QuestionSubset) else {}
        label = run.plan.labels.get(key, key)  # the full key is tag config_key
        per_query = run.part("per_query")
        run_id = tracking.ensure_run(
            experiment=run.plan.sweep.name,
            run_name=f"{label} ({rung['questions']} questions)" if rung else label,
            fingerprint=summary["fingerprint"],
            params={
                **{k: v for k, v in summary.items() if "." in k},
                **generation_params(run.plan.sweep.qa_path),  # a generated QA set: its generator
            },
            metrics=metrics,
            tags={
                # every run of the experiment says what it is: config, leaderboard, champion, gate,
                # prompt_optimization (the MLflow UI's filter `tags.kind = 'config'` lists the configs alone)
                "kind": "config",
                "sweep": run.plan.sweep.name,
                "config_key": key,
                **where_models_ran(run),
                "dagster_run_id": run.context.run.run_id,
                "partition_key": key,
                **rung,  # a halving rung: evaluated on a share of the QA set
            },
            per_query=per_query,
            # built only when the run is logged (an unchanged rerun reads no retrievals for it)
            per_question=lambda: per_question_table(per_query, run.read("qa_set"), run.read("rerankings")),
            force=not reused,
        )
        return {
            "mlflow_run_id": run_id or "",
            **({"mlflow_run": dg.MetadataValue.url(url)} if (url := tracking.run_url(run_id)) else {}),
            "mlflow_tracking_uri": tracking.display_uri(),
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        failures = int(frame["n_judge_failures"][0]) if "n_judge_failures" in frame.columns else 0
        return [
            dg.AssetCheckResult(
                check_name="judge_failures",
                passed=failures == 0,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"judge_failures": failures, "judge_model": run.plan.sweep.judge_model or ""},
            )
        ]


def llm_failure_metadata(summary: dict, count_judge: bool = True) -> dict:
    """Each LLM-backed stage the config calls: its failed or fallen-back calls and its calls, and the stages
    over the threshold that keeps it off the tiers (rag_core/decision/qualification.py; the judge's where
    the sweep weights its metric: the board, having measured the judge against labels, may not)."""
    from rag_core.decision.qualification import LLM_STAGES, describe, failed_stages

    stages = {
        stage: {"failed": int(summary.get(failed) or 0), "calls": int(summary.get(calls) or 0)}
        for stage, (failed, calls) in LLM_STAGES.items()
        if summary.get(calls) or summary.get(failed)
    }
    over = failed_stages(summary, count_judge)
    return {
        "llm_calls": dg.MetadataValue.json(stages),
        "too_many_errors": bool(over),
        **({"failed_stages": describe(over)} if over else {}),
    }


def where_models_ran(run: StageRun) -> dict[str, str]:
    """MLflow tags: where the config's embeddings and cross-encoder scores were computed, as their artifacts
    record it (rag_assets/devices.py); none for an artifact that does not say."""
    tags = {"embedded_on": devices_of(run.inputs["embeddings"])}
    if run.config.rerank.method == "cross_encoder":
        tags["cross_encoder_device"] = devices_of(run.inputs["rerankings"])
    return {k: v for k, v in tags.items() if v}


def _metrics(frame: pl.DataFrame) -> dict[str, float]:
    """The evaluation summary's metrics (its settings are the columns with a dot)."""
    return {k: v for k, v in frame.to_dicts()[0].items() if isinstance(v, float) and "." not in k}

"""Evaluations: step-level metrics of one config over the QA set, tracked as an MLflow run.

Writes the per-query metrics and a one-row summary (config params + metric means + counts) and logs
both to MLflow (params = the flattened config; tags: sweep, config key, Dagster run id, partition key).
"""

import dagster as dg
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.metrics import evaluate_queries, summarize
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore
from resources.tracking import MlflowTracking


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.configs,
        deps=[
            "answers",
            dg.AssetDep("retrievals", partition_mapping=parts.retrieval_to_config),
            "qa_set",
        ],
        group_name="evaluation",
        kinds={"parquet", "mlflow"},
        automation_condition=EAGER,
        description="Retrieval, generation, latency and cost metrics of one config (see rag_core/metrics.py).",
    )
    def evaluations(
        context: dg.AssetExecutionContext, artifacts: ArtifactStore, tracking: MlflowTracking
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("config_key", context.partition_key)
        fp = lineage.evaluation_fp(c)
        reused = artifacts.exists("evaluation_summaries", fp) and not forced(context)
        if reused:
            per_query = artifacts.read("evaluations", fp, "evaluations")
            summary = artifacts.read("evaluation_summaries", fp, "evaluation summary").to_dicts()[0]
        else:
            qa = artifacts.read("qa", lineage.qa_fp, "qa_set")
            ret = artifacts.read("retrievals", lineage.retrieval_fp(c), f"retrievals {c.retrieval_key}")
            ans = artifacts.read("answers", lineage.answers_fp(c), f"answers {c.config_key}")
            chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
            per_query = evaluate_queries(qa, ret, ans, c.retrieval.top_k)
            metrics = summarize(per_query)
            lengths = chunks["text"].str.len_chars()
            metrics |= {
                "chunk_count": float(chunks.height),
                "chunk_chars_mean": float(lengths.mean()),
                "cost_usd": float(ans["cost_usd"].sum()),
                "tokens": float(ans["prompt_tokens"].sum() + ans["completion_tokens"].sum()),
            }
            summary = {"config_key": c.config_key, "fingerprint": fp, **c.flat_params(), **metrics}
            artifacts.write("evaluations", fp, per_query)
            artifacts.write("evaluation_summaries", fp, pl.DataFrame([summary]))
        metrics = {k: v for k, v in summary.items() if isinstance(v, float) and "." not in k}
        run_id = tracking.ensure_run(
            experiment=sweep.name,
            run_name=c.config_key,
            fingerprint=fp,
            params=c.flat_params(),
            metrics=metrics,
            tags={
                "sweep": sweep.name,
                "config_key": c.config_key,
                "dagster_run_id": context.run.run_id,
                "partition_key": context.partition_key,
            },
            per_query=per_query,
            force=not reused,
        )
        context.log.info(
            f"{c.config_key}: " + ", ".join(f"{k}={metrics[k]:.3f}" for k in ("recall_at_k", "token_f1"))
        )
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("evaluations", fp), reused),
                **{k: dg.MetadataValue.float(float(v)) for k, v in metrics.items()},
                "mlflow_run_id": run_id or "",
                "mlflow_tracking_uri": tracking.resolved_uri(),
            },
            data_version=dg.DataVersion(fp),
        )

    return evaluations

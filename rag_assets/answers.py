"""Answers: one per question, from the extractive reader or any litellm model (partitioned by config).

A failed LLM call is retried by the LLM resource, then recorded (error kept, empty answer) and counted;
the batch always completes with one row per question.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.generation import build_prompt, extractive_answer, format_context
from rag_core.metrics import percentile
from rag_core.spec import GenerationConfig, Sweep
from resources.artifacts import ArtifactStore
from resources.llm import Completion, LLMClient

ANSWER_SCHEMA = {
    "query_id": pl.String,
    "answer": pl.String,
    "error": pl.String,
    "attempts": pl.Int64,
    "latency_ms": pl.Float64,
    "prompt_tokens": pl.Int64,
    "completion_tokens": pl.Int64,
    "cost_usd": pl.Float64,
}


def generate(
    gen: GenerationConfig, question: str, titles: list[str], texts: list[str], llm: LLMClient
) -> Completion:
    if gen.is_extractive:
        t0 = time.perf_counter()
        text = extractive_answer(question, texts)
        return Completion(text=text, error=None, attempts=1, latency_ms=(time.perf_counter() - t0) * 1000)
    prompt = build_prompt(gen.prompt_template, question, format_context(texts, titles))
    return llm.complete(gen.model, prompt, gen.temperature, gen.max_tokens)


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.configs,
        deps=[dg.AssetDep("retrievals", partition_mapping=parts.retrieval_to_config), "qa_set"],
        group_name="evaluation",
        kinds={"parquet"},
        pool="llm",  # dagster.yaml caps concurrent LLM-calling steps
        automation_condition=EAGER,
        description="Per query: the answer, any error after retries, attempts, latency, tokens and cost.",
    )
    def answers(
        context: dg.AssetExecutionContext, artifacts: ArtifactStore, llm: LLMClient
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("config_key", context.partition_key)
        fp = lineage.answers_fp(c)
        reused = artifacts.exists("answers", fp) and not forced(context)
        if reused:
            df = artifacts.read("answers", fp, "answers")
        else:
            qa = artifacts.read("qa", lineage.qa_fp, "qa_set")
            ret = artifacts.read("retrievals", lineage.retrieval_fp(c), f"retrievals {c.retrieval_key}")
            joined = qa.select("query_id", "question").join(ret, on="query_id", how="left")
            items = list(joined.iter_rows(named=True))

            def one(row: dict) -> Completion:
                return generate(c.generation, row["question"], row["titles"] or [], row["texts"] or [], llm)

            workers = 1 if c.generation.is_extractive else llm.max_concurrency
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(one, items))
            df = pl.DataFrame(
                [
                    {
                        "query_id": row["query_id"],
                        "answer": res.text,
                        "error": res.error,
                        "attempts": res.attempts,
                        "latency_ms": res.latency_ms,
                        "prompt_tokens": res.prompt_tokens,
                        "completion_tokens": res.completion_tokens,
                        "cost_usd": res.cost_usd,
                    }
                    for row, res in zip(items, results, strict=True)
                ],
                schema=ANSWER_SCHEMA,
            )
            artifacts.write("answers", fp, df)
            errors = df["error"].drop_nulls().len()
            if errors:
                context.log.warning(f"{errors}/{df.height} generations failed after retries (kept as errors)")
        lat = df["latency_ms"].to_list()
        return dg.MaterializeResult(
            metadata={
                **base_metadata(fp, artifacts.path("answers", fp), reused),
                "dagster/row_count": df.height,
                "model": c.generation.model,
                "errors": int(df["error"].drop_nulls().len()),
                "latency_p50_ms": round(percentile(lat, 50), 3),
                "latency_p95_ms": round(percentile(lat, 95), 3),
                "cost_usd": float(df["cost_usd"].sum()),
                "tokens": int(df["prompt_tokens"].sum() + df["completion_tokens"].sum()),
            },
            data_version=dg.DataVersion(fp),
        )

    return answers

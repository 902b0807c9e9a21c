"""Evaluations: step-level metrics of one config over the QA set, tracked as an MLflow run.

Writes the per-query metrics and a one-row summary (config params + metric means + counts) and logs
both to MLflow (params = the flattened config; tags: sweep, config key, Dagster run id, partition key).
"""

from concurrent.futures import ThreadPoolExecutor

import dagster as dg
import polars as pl

from rag_assets.common import EAGER, base_metadata, forced
from rag_assets.embeddings import chunk_vectors
from rag_assets.lineage import Lineage
from rag_assets.partitions import SweepPartitions
from rag_core.chunking import split_sentences
from rag_core.generation import format_context
from rag_core.judge import judge_prompt, parse_verdict
from rag_core.metrics import evaluate_queries, metric_columns, percentile, summarize
from rag_core.metrics.chunking import answer_coverage, cohesion_separation, length_stats
from rag_core.metrics.stats import bootstrap_ci
from rag_core.spec import Sweep
from resources.artifacts import ArtifactStore
from resources.embedders import EmbeddingService
from resources.llm import NO_USAGE, LLMClient, usage
from resources.tracking import MlflowTracking


def stage_costs(ret: pl.DataFrame, ans: pl.DataFrame, judge_usage: dict) -> dict[str, float]:
    """Tokens and cost (litellm's usage and cost table; 0 for local models) of every LLM-calling stage,
    their totals, and p50/p95 latency of the query transformation, reranking and context synthesis."""
    stages = {
        "query_transform": (ret["transform_tokens"].sum(), ret["transform_cost_usd"].sum()),
        "rerank": (ret["rerank_tokens"].sum(), ret["rerank_cost_usd"].sum()),
        "context": (ans["context_tokens"].sum(), ans["context_cost_usd"].sum()),
        "generation": (ans["prompt_tokens"].sum() + ans["completion_tokens"].sum(), ans["cost_usd"].sum()),
        "judge": (judge_usage["tokens"], judge_usage["cost_usd"]),
    }
    out = {}
    for name, (tokens, cost) in stages.items():
        out[f"tokens_{name}"], out[f"cost_usd_{name}"] = float(tokens), float(cost)
    out["tokens"] = sum(out[f"tokens_{n}"] for n in stages)
    out["cost_usd"] = sum(out[f"cost_usd_{n}"] for n in stages)
    for name, col, frame in (
        ("query_transform", "transform_ms", ret),
        ("rerank", "rerank_ms", ret),
        ("context", "context_ms", ans),
    ):
        values = frame[col].to_list()
        out[f"{name}_p50_ms"], out[f"{name}_p95_ms"] = percentile(values, 50), percentile(values, 95)
    return out


COHESION_SAMPLE = 300  # chunks (whole documents, in corpus order) used for cohesion/separation


def chunk_cohesion_separation(chunks: pl.DataFrame, embed) -> tuple[float, float]:
    """Cohesion and separation (rag_core/metrics/chunking.py) on the chunks of the first documents of
    the chunkset, up to COHESION_SAMPLE chunks, so the cost stays bounded on a large corpus."""
    blocks, sentences = [], []
    for _, doc in chunks.group_by("doc_id", maintain_order=True):
        if len(blocks) >= COHESION_SAMPLE:
            break
        for text in doc["text"]:
            sents = split_sentences(text)
            blocks.append(sents)
            sentences += sents
        blocks.append(None)
    unique = list(dict.fromkeys(sentences))
    vec = dict(zip(unique, embed(unique), strict=True)) if unique else {}
    return cohesion_separation([None if b is None else [vec[s] for s in b] for b in blocks if b != []])


def judge(
    llm: LLMClient, model: str, qa: pl.DataFrame, ret: pl.DataFrame, ans: pl.DataFrame
) -> tuple[dict, dict]:
    """LLM-judged faithfulness per query: None when the call failed or the verdict did not parse (counted
    as `n_judge_failures`); an empty answer scores 0 without a call, as in the lexical variant. Also returns
    the judge's total tokens, cost and milliseconds."""
    rows = list(
        qa.select("query_id", "question")
        .join(ret, on="query_id")
        .join(ans, on="query_id")
        .iter_rows(named=True)
    )

    def one(r: dict) -> tuple[float | None, dict]:
        if not (r["answer"] or "").strip():
            return 0.0, NO_USAGE
        if r.get("context_texts") is not None:  # what the generator saw, after context synthesis
            context = format_context(r["context_texts"])
        else:
            context = format_context(r["texts"] or [], r["titles"] or [])
        prompt = judge_prompt(r["question"], r["answer"], context)
        out = llm.complete(model, prompt, temperature=0.0, max_tokens=8)
        return (None if out.error else parse_verdict(out.text)), usage(out)

    with ThreadPoolExecutor(max_workers=llm.max_concurrency) as pool:
        results = list(pool.map(one, rows))
    scores = {r["query_id"]: score for r, (score, _) in zip(rows, results, strict=True)}
    spent = {k: sum(u[k] for _, u in results) for k in NO_USAGE}
    return scores, spent


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.configs,
        deps=[
            "answers",
            dg.AssetDep("rerankings", partition_mapping=parts.rerank_to_config),
            "qa_set",
        ],
        group_name="evaluation",
        kinds={"parquet", "mlflow"},
        pool="llm" if sweep.judge_model else None,
        automation_condition=EAGER,
        description="Retrieval, generation, latency and cost metrics of one config (see rag_core/metrics.py).",
    )
    def evaluations(
        context: dg.AssetExecutionContext,
        artifacts: ArtifactStore,
        tracking: MlflowTracking,
        embedder: EmbeddingService,
        llm: LLMClient,
    ) -> dg.MaterializeResult:
        lineage = Lineage(sweep, backend)
        c = sweep.first("config_key", context.partition_key)
        # the store actually used, also when the config leaves it to the deployment
        params = {**c.flat_params(), "index.store": lineage.backend_of(c)}
        fp = lineage.evaluation_fp(c)
        reused = artifacts.exists("evaluation_summaries", fp) and not forced(context)
        if reused:
            per_query = artifacts.read("evaluations", fp, "evaluations")
            summary = artifacts.read("evaluation_summaries", fp, "evaluation summary").to_dicts()[0]
        else:
            qa = artifacts.read("qa", lineage.qa_fp, "qa_set")
            ret = artifacts.read("rerankings", lineage.rerank_fp(c), f"rerankings {c.rerank_key}")
            ans = artifacts.read("answers", lineage.answers_fp(c), f"answers {c.config_key}")
            chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
            model = c.embedding.model
            judged = judge(llm, sweep.judge_model, qa, ret, ans) if sweep.judge_model else None
            per_query = evaluate_queries(
                qa,
                ret,
                ans,
                c.retrieval.top_k,
                embed=lambda texts: embedder.embed(model, texts)[0],
                chunk_vectors=chunk_vectors(artifacts, lineage, c),
                judge_scores=judged[0] if judged else None,
            )
            metrics = summarize(per_query)
            for m in metric_columns(per_query):  # 95% bootstrap interval of each mean over queries
                metrics[f"{m}_ci_low"], metrics[f"{m}_ci_high"] = bootstrap_ci(
                    per_query[m].fill_null(float("nan")).to_numpy()
                )
            lengths = chunks["text"].str.len_chars()
            metrics |= {
                "chunk_count": float(chunks.height),
                "chunk_chars_mean": float(lengths.mean()),
                **length_stats(embedder.token_counts(model, chunks["index_text"].to_list())),
                "answer_coverage": answer_coverage(chunks["text"].to_list(), qa["answers"].to_list()),
                **dict(
                    zip(
                        ("chunk_cohesion", "chunk_separation"),
                        chunk_cohesion_separation(chunks, lambda texts: embedder.embed(model, texts)[0]),
                        strict=True,
                    )
                ),
                **stage_costs(ret, ans, judged[1] if judged else NO_USAGE),
                "generation_prompt_tokens": float(ans["prompt_tokens"].sum()),
                "generation_completion_tokens": float(ans["completion_tokens"].sum()),
                "n_query_transform_fallbacks": float(ret["transform_fallback"].sum()),
                "n_rerank_fallbacks": float(ret["rerank_fallback"].sum()),
                "n_context_compression_fallbacks": float(ans["context_fallbacks"].sum()),
            }
            summary = {"config_key": c.config_key, "fingerprint": fp, **params, **metrics}
            artifacts.write("evaluations", fp, per_query)
            artifacts.write("evaluation_summaries", fp, pl.DataFrame([summary]))
        metrics = {k: v for k, v in summary.items() if isinstance(v, float) and "." not in k}
        run_id = tracking.ensure_run(
            experiment=sweep.name,
            run_name=c.config_key,
            fingerprint=fp,
            params=params,
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

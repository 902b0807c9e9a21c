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
from rag_core.context import apply_budget, compress_prompt, parent_spans, parse_compressed, word_count
from rag_core.generation import build_prompt, extractive_answer, format_context
from rag_core.metrics import percentile
from rag_core.metrics.generation import citations
from rag_core.spec import GenerationConfig, Sweep
from resources.artifacts import ArtifactStore
from resources.llm import NO_USAGE, Completion, LLMClient, usage

ANSWER_SCHEMA = {
    "query_id": pl.String,
    "answer": pl.String,
    "error": pl.String,
    "context_doc_ids": pl.List(pl.String),  # the blocks the generator saw, in [n] order
    "context_texts": pl.List(pl.String),
    "citations": pl.List(pl.String),  # doc ids of the [n] markers in the answer
    "context_fallbacks": pl.Int64,  # blocks kept uncompressed because compression failed
    "context_tokens": pl.Int64,
    "context_cost_usd": pl.Float64,
    "context_ms": pl.Float64,
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


def synthesize(
    gen: GenerationConfig,
    question: str,
    titles: list[str],
    texts: list[str],
    doc_ids: list[str],
    llm: LLMClient,
) -> tuple[list[str], list[str], list[str], int]:
    """Context synthesis (rag_core/context.py): (titles, texts, doc_ids, compression fallbacks, usage)."""
    blocks = list(zip(titles, texts, doc_ids, strict=True))
    fallbacks = 0
    spent = dict(NO_USAGE)
    if gen.context == "compress":
        kept = []
        for title, text, doc in blocks:
            out = llm.complete(gen.context_model, compress_prompt(question, text), max_tokens=256)
            spent = {k: spent[k] + v for k, v in usage(out).items()}
            short = None if out.error else parse_compressed(out.text)
            if short is None:
                fallbacks += 1
                kept.append((title, text, doc))
            elif short:
                kept.append((title, short, doc))
        blocks = kept
    if gen.context_max_tokens:
        if gen.is_extractive:
            count = word_count
        else:
            import litellm

            def count(t: str) -> int:
                return litellm.token_counter(model=gen.model, text=t)

        fitted = apply_budget([t for _, t, _ in blocks], gen.context_max_tokens, count)
        blocks = [(title, text, doc) for (title, _, doc), text in zip(blocks, fitted, strict=False)]
    return [b[0] for b in blocks], [b[1] for b in blocks], [b[2] for b in blocks], fallbacks, spent


def expand_to_parents(items: list[dict], artifacts: ArtifactStore, lineage: Lineage, c) -> list[dict]:
    """Replace each retrieved chunk by its parent section (rag_core.context.parent_spans), in rank order,
    each parent once."""
    chunks = artifacts.read("chunksets", lineage.chunk_fp(c), f"chunkset {c.chunk_key}")
    corpus = artifacts.read("corpus", lineage.corpus_fp, "corpus")
    doc_text = dict(zip(corpus["doc_id"].to_list(), corpus["text"].to_list(), strict=True))
    parents = parent_spans(chunks)
    out = []
    for row in items:
        seen, titles, texts, docs = set(), [], [], []
        for cid, title, doc in zip(
            row["chunk_ids"] or [], row["titles"] or [], row["doc_ids"] or [], strict=True
        ):
            pid, start, end = parents[cid]
            if pid in seen:
                continue
            seen.add(pid)
            titles.append(title)
            texts.append(doc_text[doc][start:end])
            docs.append(doc)
        out.append({**row, "titles": titles, "texts": texts, "doc_ids": docs})
    return out


def build(sweep: Sweep, parts: SweepPartitions, backend: str) -> dg.AssetsDefinition:
    @dg.asset(
        partitions_def=parts.configs,
        deps=[dg.AssetDep("rerankings", partition_mapping=parts.rerank_to_config), "qa_set"],
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
            ret = artifacts.read("rerankings", lineage.rerank_fp(c), f"rerankings {c.rerank_key}")
            joined = qa.select("query_id", "question").join(ret, on="query_id", how="left")
            items = list(joined.iter_rows(named=True))
            if c.generation.context_expand == "parent":
                items = expand_to_parents(items, artifacts, lineage, c)

            def one(row: dict) -> tuple:
                titles, texts, docs, fallbacks, spent = synthesize(
                    c.generation,
                    row["question"],
                    row["titles"] or [],
                    row["texts"] or [],
                    row["doc_ids"] or [],
                    llm,
                )
                return (
                    generate(c.generation, row["question"], titles, texts, llm),
                    texts,
                    docs,
                    fallbacks,
                    spent,
                )

            workers = 1 if c.generation.is_extractive else llm.max_concurrency
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results = list(pool.map(one, items))
            df = pl.DataFrame(
                [
                    {
                        "query_id": row["query_id"],
                        "answer": res.text,
                        "error": res.error,
                        "context_doc_ids": docs,
                        "context_texts": texts,
                        "citations": [
                            docs[n - 1] if 1 <= n <= len(docs) else f"[{n}]?" for n in citations(res.text)
                        ],
                        "context_fallbacks": fallbacks,
                        "context_tokens": spent["tokens"],
                        "context_cost_usd": spent["cost_usd"],
                        "context_ms": spent["ms"],
                        "attempts": res.attempts,
                        "latency_ms": res.latency_ms,
                        "prompt_tokens": res.prompt_tokens,
                        "completion_tokens": res.completion_tokens,
                        "cost_usd": res.cost_usd,
                    }
                    for row, (res, texts, docs, fallbacks, spent) in zip(items, results, strict=True)
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
                "context_compression_fallbacks": int(df["context_fallbacks"].sum()),
                "latency_p50_ms": round(percentile(lat, 50), 3),
                "latency_p95_ms": round(percentile(lat, 95), 3),
                "cost_usd": float(df["cost_usd"].sum()),
                "tokens": int(df["prompt_tokens"].sum() + df["completion_tokens"].sum()),
            },
            data_version=dg.DataVersion(fp),
        )

    return answers

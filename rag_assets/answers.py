"""Answers: one per question, from the extractive reader or any litellm model (rag_core/generation/answering.py)."""

from __future__ import annotations

import dagster as dg
import polars as pl

from rag_assets.stage_asset import Check, StageLogic, StageRun
from rag_core.common.completion import failure_summary
from rag_core.decision.qualification import MAX_ERROR_SHARE
from rag_core.generation.answering import answer
from rag_core.metrics import percentile


class Answers(StageLogic):
    description = "Per query: the answer, any error after retries, attempts, latency, tokens and cost."
    resources = ("llm",)
    checks = (
        Check(
            "error_rate",
            f"No generation failed after retries (an error above {MAX_ERROR_SHARE:.0%} of the queries: the "
            "config is ranked last, marked 'too many errors'; the other configs go on).",
        ),
    )

    def side_by_side(self, sweep, config) -> bool:
        # an LLM generator shares nothing with the other configs' but the client (a reader is a local model)
        return not config.generation.is_reader

    def compute(self, run: StageRun) -> pl.DataFrame:
        gen = run.config.generation

        def count_tokens(text: str) -> int:
            import litellm

            return litellm.token_counter(model=gen.model, text=text)

        df = answer(
            run.config,
            run.read("qa_set"),
            run.read("rerankings"),
            run.llm,
            count_tokens,
            parents=lambda: (run.read("chunksets"), run.read("corpus")),
        )
        errors = df["error"].drop_nulls().len()
        if errors:
            run.context.log.warning(
                f"{errors}/{df.height} generations failed after retries (kept as errors): "
                + failure_summary(df["error"])
            )
        return df

    def report(self, run: StageRun, frame: pl.DataFrame, reused: bool) -> dict:
        lat = frame["latency_ms"].to_list()
        gen = run.config.generation
        # the LLM client's one-time start-up in this process: apart from every question's latency
        startup = (
            None if gen.is_reader or reused else getattr(run.llm, "startup_ms", lambda m: None)(gen.model)
        )
        return {
            **({"llm_startup_ms": round(startup, 1)} if startup is not None else {}),
            "dagster/row_count": frame.height,
            "model": run.config.generation.model,
            "errors": int(frame["error"].drop_nulls().len()),
            "context_compression_fallbacks": int(frame["context_fallbacks"].sum()),
            "latency_p50_ms": round(percentile(lat, 50), 3),
            "latency_p95_ms": round(percentile(lat, 95), 3),
            "cost_usd": float(frame["cost_usd"].sum()),
            "tokens": int(frame["prompt_tokens"].sum() + frame["completion_tokens"].sum()),
        }

    def check(self, run: StageRun, frame: pl.DataFrame) -> list[dg.AssetCheckResult]:
        errors = int(frame["error"].drop_nulls().len())
        rate = errors / max(frame.height, 1)
        return [
            dg.AssetCheckResult(
                check_name="error_rate",
                passed=errors == 0,
                severity=dg.AssetCheckSeverity.ERROR
                if rate > MAX_ERROR_SHARE
                else dg.AssetCheckSeverity.WARN,
                metadata={"errors": errors, "error_rate": rate},
            )
        ]

"""What a sweep would do, before it runs: the bill (rag_core/planning/bill.py) of what a run would compute
on a data dir, its data loaded as a run would (rag_sweep/runner/inputs_check.py)."""

from __future__ import annotations

import polars as pl

from rag_assets.orchestration.plans import load_plan
from rag_core.chunking.chunkers import chunk_corpus
from rag_core.common.local_models import is_local, model_version
from rag_core.planning.bill import LLM_SECONDS, Bill, estimate
from rag_core.planning.inputs import snapshot_fingerprints
from rag_core.planning.plan import Plan
from rag_sweep.runner.inputs_check import load_data, qa_generation_line, require_extras, selection_questions
from resources.artifacts import ArtifactRef
from resources.devices import ASSUMED_CPU_CHARS, measured_rate
from resources.embedders import EmbeddingService
from resources.environment import default_data_dir, device_setting, text
from resources.llm import price
from resources.storage import data_root


def bill(spec: str, data_dir: str | None = None, store: str | None = None) -> tuple[Plan, Bill]:
    """What a run would compute for this sweep and data dir, from the files as they are now: nothing is
    materialized."""
    data = data_root(data_dir or default_data_dir())
    plan = load_plan(spec, store, data)
    require_extras(plan)
    sweep = plan.sweep
    corpus, qa = load_data(sweep)  # a missing or bad file is an error naming its field
    inputs = snapshot_fingerprints(sweep)
    if qa is not None:
        n_queries = qa.height
    else:  # to be generated: nothing downstream of it can exist yet
        print(qa_generation_line(sweep.qa_generation, corpus, sweep.qa_path))
        n_queries, inputs["qa_set"] = sweep.qa_generation.questions, "to-be-generated"
    expected = plan.fingerprints(inputs)
    done = {(s, k) for (s, k), fp in expected.items() if ArtifactRef(data, s, fp).intact()}
    if plan.optimizable_keys:  # optimizations already complete for these inputs
        from rag_assets.prompt_optimization import optimization_due

        done |= {
            ("prompt_optimizations", k)
            for k in plan.optimizable_keys
            if not optimization_due(plan, k, data, inputs, expected)
        }
    embedder = EmbeddingService(cache_dir=str(data / "embedding_cache"), device=device_setting())
    rates = embedding_rates(plan, embedder)

    def chunks_of(key: str) -> pl.DataFrame:
        ref = ArtifactRef(data, "chunksets", expected[("chunksets", key)])
        if ref.intact():
            return ref.read()
        cfg = plan.partition("chunksets", key).config.chunking
        tokenize = (lambda texts: embedder.token_offsets(cfg.model, texts)) if cfg.unit == "tokens" else None
        # a semantic chunker's cuts need the embeddings: the estimate packs sentences instead
        method = "sentence" if cfg.semantic else cfg.method
        return chunk_corpus(corpus, method, cfg.chunk_size, cfg.chunk_overlap, tokenize=tokenize)

    speeds = LLMSpeeds(data)
    held = 0
    if plan.holdout and qa is not None:  # the selection's questions; the holdout's are the finalists'
        held = qa.height - selection_questions(sweep, qa.height)
    out = estimate(
        plan,
        done,
        chunks_of,
        embedder.cached_hashes,
        n_queries - held,
        price,
        chars_per_second=lambda model: rates[model][0],
        seconds_per_call=speeds.seconds,
        concurrency=speeds.concurrency,
        holdout_questions=held,
    )
    out.embedding_speeds = [line for _, line in rates.values()]
    out.llm_speeds = [speeds.line(model) for model in sorted(out.llm_models)]
    if qa is not None:
        out.context_lines = context_lines(plan, chunks_of, qa["question"].to_list())
    return plan, out


class LLMSpeeds:
    """An LLM call's time for the bill: the median latency of the model's latest calls paid for in this
    data dir (its call ledger, resources/llm_cache.py), else LLM_SECONDS assumed; the calls in flight at
    once are the client's ($RAG_LLM_MAX_CONCURRENCY). A local model on a CPU takes seconds a call where a
    hosted one takes one: what it measured here is what the estimate uses."""

    def __init__(self, data):
        from resources.environment import env_number
        from resources.llm_cache import open_cache

        try:
            self.cache = open_cache(data / "llm_cache.sqlite")
        except Exception:  # a data dir on object storage without the deployment's database: none measured
            self.cache = None
        self.concurrency = max(1, env_number("RAG_LLM_MAX_CONCURRENCY", 4, int))
        self.measured: dict[str, tuple[int, float] | None] = {}

    def _measured(self, model: str) -> tuple[int, float] | None:
        if model not in self.measured:
            self.measured[model] = self.cache.latencies(model) if self.cache is not None else None
        return self.measured[model]

    def seconds(self, model: str) -> float:
        found = self._measured(model)
        return found[1] if found else LLM_SECONDS

    def line(self, model: str) -> str:
        found = self._measured(model)
        how = (
            f"~{found[1]:.1f} s a call measured here (the median of its latest {found[0]} calls)"
            if found
            else f"~{LLM_SECONDS:g} s a call assumed (no call to it recorded in this data dir yet)"
        )
        return f"{model}: {how}, {self.concurrency} at once"


def context_lines(plan: Plan, chunks_of, questions: list[str]) -> list[str]:
    """What `plan` says of prompts past their model's context (rag_core/planning/context_fit.py): a warning
    per stage and model, and the models whose context nobody says."""
    from rag_core.planning.context_fit import past_context
    from resources.llm_context import ModelContext

    if not (plan.calls_llm("answers") or plan.sweep.judge is not None):
        return []
    endpoint = ModelContext(text("RAG_LLM_API_BASE"), text("RAG_LLM_API_KEY"))
    where: dict[str, str] = {}

    def window(model: str) -> int | None:
        tokens, where[model] = endpoint.window(model)
        return tokens

    found = past_context(plan, chunks_of, questions, endpoint.count, window)
    labels = plan.labels
    lines = []
    for p in found:
        what = "the judge's" if p.stage == "evaluations" else "the generator's"
        some = ", ".join(labels.get(k, k) for k in p.configs[:3]) + (
            f" and {len(p.configs) - 3} more" if len(p.configs) > 3 else ""
        )
        lines.append(
            f"warning: {what} longest prompt with its reply is {p.tokens:,} tokens, past the {p.window:,} "
            f"that {p.model} reads ({where[p.model]}), in {len(p.configs)} config(s): {some}. Such calls "
            "fail, each counted as a failed call; fewer or shorter chunks (top_k, chunk_size), "
            "generation.context_max_tokens or a longer context fit them."
        )
    unknown = sorted(m for m, how in where.items() if not how)
    if unknown:
        lines.append(
            f"  the context of {', '.join(unknown)} is unknown (litellm has no entry; the endpoint does not say): "
            "its prompts were not checked against it"
        )
    return lines


def embedding_rates(plan: Plan, embedder: EmbeddingService) -> dict[str, tuple[float, str]]:
    """model -> (characters/s, a line saying where and how known) for each embedding model of the plan: the
    rate last measured on this machine's device ($RAG_DEVICE; `cuda` where there is none is an error here,
    before any work), else the CPU's assumed rate."""
    models = sorted({plan.partition("embeddings", k).config.embedding.model for k in plan.keys("embeddings")})
    device = embedder.local_device() if any(map(is_local, models)) else None
    out = {}
    for model in models:
        if not is_local(model):
            out[model] = (
                ASSUMED_CPU_CHARS,
                f"{model}: an API; ~{ASSUMED_CPU_CHARS:,.0f} characters/s assumed",
            )
            continue
        measured = measured_rate(model_version(model) or model, device)
        if measured and measured.get("chars_per_second"):
            rate = measured["chars_per_second"]
            how = f"measured here ({measured['engine']}, {measured['texts']} texts)"
        else:
            rate, how = ASSUMED_CPU_CHARS, "assumed: not measured on this machine yet (a run measures it)"
        out[model] = (rate, f"{model} on {device.label}: ~{rate:,.0f} characters/s {how}")
    return out

"""The bill of a sweep before it runs: per stage, the partitions that exist and the ones a run would
compute; the texts it would embed (chunk texts no cache holds); the LLM calls, tokens and cost per stage
(litellm's prices; an upper bound: completions at max_tokens); a rough time. Pure: the caller says what
is done, how a chunkset chunks, what the cache holds and what a model costs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from rag_core.common.fingerprint import text_hash
from rag_core.metrics.judge import JUDGE_PROMPT
from rag_core.planning.plan import Plan
from rag_core.planning.stages import PARTITIONED
from rag_core.search.cost import Cost, CostModel

CHARS_PER_TOKEN = 4  # for prompt sizes: the chunk texts' characters / 4
LLM_SECONDS = 1.0  # a call's time where none of its model was measured, before the client's concurrency
# per partition, work aside: measured when each partition was a Dagster run of its own (an unchanged rerun of
# the example: 14 steps in 8 s); a stage's partitions now share a run, so this errs long
STEP_SECONDS = 0.6


@dataclass
class Bill:
    partitions: dict[str, tuple[int, int]]  # stage -> (already materialized, to compute)
    texts_to_embed: int
    llm_calls: dict[str, int] = field(default_factory=dict)  # stage -> calls
    llm_tokens: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    unpriced: set[str] = field(default_factory=set)  # models litellm has no price for
    seconds: float = 0.0
    holdout_questions: int = 0  # set aside: the finalists answer them after the selection
    selection_questions: int = 0  # the questions the configs are chosen on
    embedding_speeds: list[str] = field(default_factory=list)  # per model: the device and the rate assumed
    cost_model: CostModel | None = None  # each config's steps and their costs (an adaptive search's)
    context_lines: list[str] = field(default_factory=list)  # prompts past their model's context
    llm_models: set[str] = field(default_factory=set)  # the models the calls go to
    llm_speeds: list[str] = field(default_factory=list)  # per model: the seconds a call taken, and whence

    def lines(self) -> list[str]:
        out = [f"  {'stage':14} {'done':>6} {'to run':>7}"]
        out += [f"  {s:14} {d:6d} {n:7d}" for s, (d, n) in self.partitions.items()]
        out.append(f"  texts to embed: {self.texts_to_embed}")
        out += [f"    {line}" for line in self.embedding_speeds]
        if self.llm_calls:
            out += [
                f"  LLM calls, {s}: {c} (~{self.llm_tokens.get(s, 0):,} tokens)"
                for s, c in self.llm_calls.items()
            ]
        cost = f"${self.cost_usd:.4f}" + (
            f" + unpriced models {sorted(self.unpriced)}" if self.unpriced else ""
        )
        out.append(f"  estimated LLM cost: up to {cost}")
        out += [f"    {line}" for line in self.llm_speeds]
        out += self.context_lines
        if "prompt_optimizations" in self.llm_calls:
            out.append(
                "  prompt optimization: at most the budget's questions scored and a reflection per iteration, "
                "per config it starts from (optimize.configs: one is counted for the recommendation; the top "
                "tier may hold more); then the optimized config answers as any config"
            )
        if self.holdout_questions:
            out.append(
                f"  then the finalists on {self.holdout_questions} holdout questions (their calls above, "
                "in proportion; the top tier and the recommendation decide how many)"
            )
        out.append(
            f"  estimated time: ~{self.seconds / 60:.1f} min (embedding, LLM calls and each partition's "
            "bookkeeping; more on first use)"
        )
        return out


def estimate(
    plan: Plan,
    done: set[tuple[str, str]],
    chunks_of: Callable[[str], pl.DataFrame],
    cached: Callable[[str], set[str]],
    n_queries: int,
    price: Callable[[str, int, int], float | None],
    chars_per_second: Callable[[str], float] = lambda model: 23.0 * 680,
    seconds_per_call: Callable[[str], float] = lambda model: LLM_SECONDS,
    concurrency: int = 4,
    holdout_questions: int = 0,
) -> Bill:
    """`n_queries`: the questions the selection sees (the holdout's: `holdout_questions`); `done`: (stage,
    key) partitions whose artifact for these inputs exists; `chunks_of(chunkset key)`:
    its chunks; `cached(model)`: text hashes the embedding cache holds; `price(model, prompt tokens,
    completion tokens)`: USD, None when unknown; `chars_per_second(model)`: how fast the model embeds
    where the run would embed (a model's time follows its texts' length); `seconds_per_call(model)`: an LLM
    call's time, `concurrency` of them at once."""
    partitions = {}
    for s in PARTITIONED:
        keys = plan.keys(s.name)
        new = [k for k in keys if (s.name, k) not in done]
        partitions[s.name] = (len(keys) - len(new), len(new))
    texts: dict[tuple[str, str], int] = {}  # (model, text hash) to embed, each once -> its characters
    chunk_tokens: dict[str, float] = {}
    for key in plan.keys("embeddings"):
        p = plan.partition("embeddings", key)
        chunk_key = p.reads["chunksets"]
        chunks = chunks_of(chunk_key)
        chunk_tokens[chunk_key] = float(chunks["text"].str.len_chars().mean() or 0) / CHARS_PER_TOKEN
        if ("embeddings", key) in done:
            continue
        model = p.config.embedding.model
        have = cached(model)
        for text in chunks["index_text"].to_list():
            if (h := text_hash(text)) not in have:
                texts[(model, h)] = len(text)
    bill = Bill(partitions, len(texts), holdout_questions=holdout_questions, selection_questions=n_queries)
    llm_seconds = 0.0
    for stage_name, calls in _llm_calls(plan, done, chunk_tokens, n_queries).items():
        for model, (n, prompt, completion) in calls.items():
            bill.llm_models.add(model)
            llm_seconds += n * seconds_per_call(model)
            bill.llm_calls[stage_name] = bill.llm_calls.get(stage_name, 0) + n
            bill.llm_tokens[stage_name] = bill.llm_tokens.get(stage_name, 0) + prompt + completion
            cost = price(model, prompt, completion)
            if cost is None:
                bill.unpriced.add(model)
            else:
                bill.cost_usd += cost
    bill.cost_model = cost_model(plan, done, n_queries, chunk_tokens, price)
    steps = sum(new for _, new in partitions.values())
    bill.seconds = (
        sum(chars / chars_per_second(model) for (model, _), chars in texts.items())
        + llm_seconds / max(1, concurrency)
        + steps * STEP_SECONDS
    )
    return bill


def _llm_calls(plan: Plan, done, chunk_tokens: dict[str, float], n: int) -> dict[str, dict[str, tuple]]:
    """stage -> model -> (calls, prompt tokens, completion tokens) of the partitions a run would compute."""
    out: dict[str, dict[str, list[int]]] = {}

    def add(stage_name: str, model: str, calls: int, prompt: float, completion: float) -> None:
        row = out.setdefault(stage_name, {}).setdefault(model, [0, 0, 0])
        row[0] += calls
        row[1] += int(calls * prompt)
        row[2] += int(calls * completion)

    for stage_name in ("retrievals", "rerankings", "answers", "evaluations"):
        for key in plan.keys(stage_name):
            if (stage_name, key) in done:
                continue
            for model, calls, prompt, completion in partition_calls(plan, stage_name, key, chunk_tokens, n):
                add(stage_name, model, calls, prompt, completion)
    opt = plan.sweep.optimize
    starts = _optimization_starts(plan)
    for key in starts:
        if ("prompt_optimizations", key) in done:
            continue
        c = plan.config(key)
        tokens = chunk_tokens.get(plan.key_of(c, "chunksets"), 0.0)
        r, g = c.retrieval, c.generation
        calls = opt.budget.max_metric_calls  # questions scored (the seed's are the sweep's answers, cached)
        rr, rerun = c.rerank, opt.rerun_stages
        for questions in (calls, n):  # the optimization's, then the optimized config's own stages
            if "retrievals" in rerun and r.query_transform != "none":
                add("prompt_optimizations", r.query_model, questions, 64, 128)
            if "rerankings" in rerun and rr.method == "llm":
                add("prompt_optimizations", rr.model, questions, 64 + rr.candidates * tokens, 64)
        add("prompt_optimizations", g.model, calls * g.samples, 96 + r.top_k * tokens, g.max_tokens)
        # one reflection per iteration (two minibatches): its prompt shows the minibatch's snippets
        reflections = max(1, calls // (2 * opt.minibatch))
        add("prompt_optimizations", opt.reflection_model, reflections, 400 + opt.minibatch * 300, 400)
        # the optimized config then answers the selection questions as any config does
        add("prompt_optimizations", g.model, n * g.samples, 96 + r.top_k * tokens, g.max_tokens)
    return {s: {m: tuple(v) for m, v in models.items()} for s, models in out.items()}


def _optimization_starts(plan: Plan) -> list[str]:
    """The configs an optimization would start from: those named, else one (the recommendation, or each
    of the top tier: unknown before the leaderboard, so the costliest config that can be optimized)."""
    if plan.sweep.optimize is None or not plan.optimizable_keys:
        return []
    if isinstance(plan.sweep.optimize.configs, list):
        return plan.named_optimization_starts()
    able = [plan.config(k) for k in plan.optimizable_keys]
    costliest = max(able, key=lambda c: (c.generation.samples, c.retrieval.top_k, c.generation.max_tokens))
    return [plan.key_of(costliest)]


LLM_STAGES = ("retrievals", "rerankings", "answers", "evaluations")


def partition_calls(
    plan: Plan, stage_name: str, key: str, chunk_tokens: dict[str, float], n: int
) -> list[tuple[str, int, float, float]]:
    """(model, calls, prompt tokens per call, completion tokens per call) of computing one partition on
    `n` questions (an upper bound: completions at max_tokens)."""
    out: list[tuple[str, int, float, float]] = []

    def add(model: str, calls: int, prompt: float, completion: float) -> None:
        out.append((model, calls, prompt, completion))

    c = plan.partition(stage_name, key).config
    tokens = chunk_tokens.get(plan.key_of(c, "chunksets"), 0.0)
    r, rr, g = c.retrieval, c.rerank, c.generation
    if stage_name == "retrievals" and (r.query_transform != "none" or r.hop_policy == "llm"):
        if r.query_transform != "none":
            add(r.query_model, n, 64, 128)
        if r.iterates and r.hop_policy == "llm":  # at most: a sufficiency and a query per later hop
            passages = 64 + r.max_hops * c.fetch_k * tokens
            add(r.hop_model, n * (r.max_hops - 1), passages, 4)
            add(r.hop_model, n * (r.max_hops - 1), passages, 32)
    elif stage_name == "rerankings" and rr.method == "llm":
        add(rr.model, n, 64 + rr.candidates * tokens, 64)
    elif stage_name == "answers" and not g.is_reader:  # each sample its own call
        add(g.model, n * g.samples, 96 + r.top_k * tokens, g.max_tokens)
        if g.context == "compress":
            add(g.context_model, n * r.top_k, 64 + tokens, tokens)
    elif stage_name == "evaluations" and plan.sweep.judge_model:
        prompt = 160 + max(0, len(plan.sweep.judge.prompt) - len(JUDGE_PROMPT)) // 4  # an aligned one
        add(plan.sweep.judge_model, n * g.samples, prompt + r.top_k * tokens, 8)
    return out


def cost_model(
    plan: Plan,
    done: set[tuple[str, str]],
    n: int,
    chunk_tokens: dict[str, float] | None = None,
    price: Callable[[str, int, int], float | None] | None = None,
) -> CostModel:
    """Each config's steps, (stage, partition key) from chunkset to evaluation, with what computing each
    costs on `n` questions: an embeddings partition is an index build (a corpus embedded), a stage's LLM
    calls and their USD (where priced) are `partition_calls`'s, as the bill counts them; `done` is built.
    Keyed by config key."""
    tokens = chunk_tokens or {}
    steps = {}
    for config_key in plan.config_keys:
        c = plan.config(config_key)
        chain = []
        for s in PARTITIONED:
            key = plan.key_of(c, s.name)
            cost = Cost(index_builds=float(s.name == "embeddings"))
            if s.name in LLM_STAGES:
                for model, calls, prompt, completion in partition_calls(plan, s.name, key, tokens, n):
                    usd = price(model, int(calls * prompt), int(calls * completion)) if price else None
                    cost = cost + Cost(llm_calls=float(calls), usd=usd or 0.0)
            chain.append(((s.name, key), cost))
        steps[config_key] = tuple(chain)
    return CostModel(steps, set(done))

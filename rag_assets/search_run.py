"""Adaptive search in a `rag-sweep run`: the plan holds every config of the sweep as partitions, and the
strategy (rag_core/search) decides which configs to materialize, one at a time, learning from each
evaluation. Each chosen config is an ordinary set of partitions with its artifacts and MLflow run (Dagster
runs the UI shows); partitions another config already built are reused. A stopped search resumes: every
config already evaluated is told to the strategy first, never evaluated again.

bayesian: `run_search` (Optuna's TPE, reuse-aware). halving: `run_halving` (successive halving over
questions): a rung materializes a config's partitions in a run tagged `rag/questions=N`, whose stages see
the QA set's first N questions (their artifacts get their own fingerprints); a question a config already
answered is answered from the LLM call cache when its set grows, never paid for twice.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from rag_core.metrics import overall_score
from rag_core.plan import Plan
from rag_core.search import Halving, Space, make
from rag_core.search.halving import question_scores
from rag_core.spec import RagConfig
from rag_core.stages import CONFIG_STAGE, PARTITIONED, stage

# The stages whose settings make a config; the first three decide the index (the expensive part).
DIMENSIONS = ("chunksets", "embeddings", "vector_index", "retrievals", "rerankings", "answers")
EXPENSIVE = ("chunksets", "embeddings", "vector_index")


def adaptive(plan: Plan) -> bool:
    """Whether `rag-sweep run` chooses the configs to evaluate as it goes (else it evaluates them all)."""
    return plan.sweep.search.adaptive


def trial_budget(plan: Plan) -> int:
    """How many configs an adaptive search evaluates (halving: starts with)."""
    return min(plan.sweep.search.budget.max_configs or len(plan.config_keys), len(plan.config_keys))


Spent = Callable[[], tuple[int, float]]  # (LLM calls, USD) this search has paid for so far


def over_budget(plan: Plan, spent: Spent) -> str | None:
    """Which of the search's LLM budgets is used up, if any."""
    budget = plan.sweep.search.budget
    calls, usd = spent()
    if budget.max_llm_calls is not None and calls >= budget.max_llm_calls:
        return "max_llm_calls"
    if budget.max_cost_usd is not None and usd >= budget.max_cost_usd:
        return "max_cost_usd"
    return None


def own_setting(plan: Plan, config_key: str, stage_name: str) -> str:
    """A config's own part of a stage's partition key (the key minus its upstream's key)."""
    c = plan.config(config_key)
    key, up = plan.key_of(c, stage_name), stage(stage_name).upstream
    return key[len(plan.key_of(c, up)) + 2 :] if up else key


def generation_usd(c: RagConfig) -> float:
    """A rough LLM price per query of a config's generator from litellm's table: its prompt (top_k
    passages of ~200 tokens) and a completion at max_tokens; 0 when extractive or unpriced. It only
    orders equally promising candidates, so rough is enough."""
    if c.generation.is_extractive:
        return 0.0
    import litellm

    try:
        prompt, completion = litellm.cost_per_token(
            model=c.generation.model,
            prompt_tokens=200 * c.retrieval.top_k + 50,
            completion_tokens=c.generation.max_tokens,
        )
        return float(prompt + completion)
    except Exception:  # a local or custom model litellm has no price for
        return 0.0


def space_of(plan: Plan) -> tuple[Space, dict[tuple, str]]:
    """The plan's configs as a search space (reuse-aware: index builds, then LLM price), and candidate
    key -> config key."""
    candidates = [{d: own_setting(plan, k, d) for d in DIMENSIONS} for k in plan.config_keys]
    space = Space.of(candidates, expensive=EXPENSIVE)
    keys = {space.key(c): k for c, k in zip(candidates, plan.config_keys, strict=True)}
    space.llm_usd = {ck: generation_usd(plan.config(k)) for ck, k in keys.items()}
    return space, keys


@dataclass
class SearchReport:
    evaluated: list[str]  # config keys, in the order they were evaluated (resumed ones first)
    resumed: int  # of them, evaluated by an earlier run
    index_builds: int  # new vector_index partitions this run materialized
    llm_calls: int  # LLM calls this search paid for (answers from the call cache are free)
    llm_cost_usd: float  # what they cost
    stopped_by: str  # "max_configs", "max_cost_usd", "max_llm_calls", "space" (all evaluated), "halving"
    dropped: dict[str, int] | None = None  # halving: config -> questions it answered when dropped


DIRECTIONS = {"overall_score": "maximize", "p95_latency_ms": "minimize", "cost_per_1k_queries": "minimize"}


def objective_values(summary: dict, weights: dict[str, float], objectives: list[str]) -> tuple[float, ...]:
    """A config's objectives from its evaluation summary (p95 latency: retrieval + generation p95s)."""
    values = {
        "overall_score": overall_score(summary, weights),
        "p95_latency_ms": summary["retrieval_p95_ms"] + summary["generation_p95_ms"],
        "cost_per_1k_queries": summary["cost_usd"] / max(summary["n_queries"], 1) * 1000,
    }
    return tuple(values[o] for o in objectives)


def run_search(
    plan: Plan,
    todo: list[tuple[str, str | None]],
    materialize: Callable[[str, str], None],
    summary_of: Callable[[str], dict | None],
    spent: Spent,
    progress: Callable[[str], None] = lambda _: None,
    resume: bool = True,
) -> SearchReport:
    """Evaluate up to `budget.max_configs` configs chosen by the sweep's strategy. `todo` holds the (stage,
    key) steps that are not complete yet (a chosen config's evaluation always runs); `summary_of(config
    key)` is that config's evaluation summary, or None when it has none that these inputs give; `spent`
    reads the LLM call ledger."""
    search = plan.sweep.search
    space, key_of = space_of(plan)
    directions = [DIRECTIONS[o] for o in search.objectives]
    strategy = make(search.strategy, space, seed=search.seed, pool=search.pool, directions=directions)
    budget = trial_budget(plan)
    pending = set(todo)
    evaluated, builds = [], 0

    def observe(key: str, summary: dict) -> None:
        c = next(c for c in space.all() if key_of[space.key(c)] == key)
        strategy.observe(c, objective_values(summary, plan.sweep.weights, search.objectives))
        evaluated.append(key)

    for key in plan.config_keys if resume else ():  # what an earlier run evaluated is known, not redone
        if (summary := summary_of(key)) is not None:
            observe(key, summary)
    resumed = len(evaluated)
    stopped_by = "space"
    while True:
        if len(evaluated) >= budget:
            stopped_by = "max_configs" if budget < len(plan.config_keys) else "space"
            break
        if reason := over_budget(plan, spent):
            stopped_by = reason
            break
        if (c := strategy.propose()) is None:
            break
        key = key_of[space.key(c)]
        config = plan.config(key)
        progress(f"trial {len(evaluated) + 1}/{budget}: {key}")
        for name in (s.name for s in PARTITIONED):
            step = (name, plan.key_of(config, name))
            if step in pending or name == CONFIG_STAGE:
                materialize(*step)
                pending.discard(step)
                builds += name == "vector_index"
        observe(key, summary_of(key))
    return SearchReport(evaluated, resumed, builds, *spent(), stopped_by)


def run_halving(
    plan: Plan,
    question_ids: list[str],
    materialize: Callable[[str, str, int | None], bool],
    per_query_of: Callable[[str, int | None], pl.DataFrame],
    spent: Spent,
    progress: Callable[[str], None] = lambda _: None,
) -> SearchReport:
    """Successive halving over questions (rag_core/search/halving.py) across the plan's configs (a seeded
    sample of `budget.max_configs` of them). `materialize(stage, key, n)` brings a partition to rung `n`
    (None: the full QA set) and says whether it had to compute it; `per_query_of(config key, n)` is that
    evaluation's per-query table. The survivors end evaluated on the full set, as ordinary configs, unless
    an LLM budget stops the search first. Rerun, every completed rung is read back, nothing asked twice."""
    search, total = plan.sweep.search, len(question_ids)
    keys = list(plan.config_keys)
    if trial_budget(plan) < len(keys):
        keys = sorted(random.Random(search.seed).sample(keys, trial_budget(plan)), key=keys.index)
    h = Halving(
        [{"config": k} for k in keys],
        question_ids,
        start=search.start_questions,
        growth=search.growth,
        alpha=plan.sweep.decision.alpha,
        seed=search.seed,
    )
    builds, evaluated, fresh = 0, [], set()

    def evaluate(key: str, n: int | None) -> pl.DataFrame:
        nonlocal builds
        config = plan.config(key)
        for name in (s.name for s in PARTITIONED):
            computed = materialize(name, plan.key_of(config, name), n)
            builds += computed and name == "vector_index"
            if computed and name == CONFIG_STAGE:
                fresh.add(key)
        if key not in evaluated:
            evaluated.append(key)
        return per_query_of(key, n)

    stopped_by = "halving"
    while (proposal := h.propose()) is not None:
        if reason := over_budget(plan, spent):
            stopped_by = reason
            break
        c, _ = proposal
        n = h.size if h.size < total else None
        progress(f"rung {h.size}/{total} questions, {len(h.alive)} configs left: {c['config']}")
        h.observe(c, question_scores(evaluate(c["config"], n), plan.sweep.weights))
    if stopped_by == "halving":  # the survivors, on the whole QA set (what the leaderboard ranks)
        for i in sorted(h.alive):
            if over_budget(plan, spent):
                break
            progress(f"full set, {len(h.alive)} configs left: {keys[i]}")
            evaluate(keys[i], None)
    dropped = {keys[i]: n for i, n in h.dropped.items()}
    resumed = len([k for k in evaluated if k not in fresh])  # every rung of it read back
    return SearchReport(evaluated, resumed, builds, *spent(), stopped_by, dropped)

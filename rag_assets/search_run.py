"""Adaptive search in a `rag-sweep run`: the plan holds every config of the sweep as partitions, and the
strategy (rag_core/search) decides which configs to materialize, one at a time, learning from each
evaluation. Each chosen config is an ordinary set of partitions with its artifacts and MLflow run (Dagster
runs the UI shows); partitions another config already built are reused. A stopped search resumes: every
config already evaluated is told to the strategy first, never evaluated again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rag_core.metrics import overall_score
from rag_core.plan import Plan
from rag_core.search import Space, make
from rag_core.stages import CONFIG_STAGE, PARTITIONED, stage

# The stages whose settings make a config; the first three decide the index (the expensive part).
DIMENSIONS = ("chunksets", "embeddings", "vector_index", "retrievals", "rerankings", "answers")
EXPENSIVE = ("chunksets", "embeddings", "vector_index")


def adaptive(plan: Plan) -> bool:
    """Whether `rag-sweep run` chooses the configs to evaluate as it goes (else it evaluates them all)."""
    return plan.sweep.search.strategy == "bayesian"


def trial_budget(plan: Plan) -> int:
    """How many configs an adaptive search evaluates."""
    return min(plan.sweep.search.max_trials or len(plan.config_keys), len(plan.config_keys))


def own_setting(plan: Plan, config_key: str, stage_name: str) -> str:
    """A config's own part of a stage's partition key (the key minus its upstream's key)."""
    c = plan.config(config_key)
    key, up = plan.key_of(c, stage_name), stage(stage_name).upstream
    return key[len(plan.key_of(c, up)) + 2 :] if up else key


def space_of(plan: Plan) -> tuple[Space, dict[tuple, str]]:
    """The plan's configs as a search space, and candidate key -> config key."""
    candidates = [{d: own_setting(plan, k, d) for d in DIMENSIONS} for k in plan.config_keys]
    space = Space.of(candidates, expensive=EXPENSIVE)
    return space, {space.key(c): k for c, k in zip(candidates, plan.config_keys, strict=True)}


@dataclass
class SearchReport:
    evaluated: list[str]  # config keys, in the order they were evaluated (resumed ones first)
    resumed: int  # of them, evaluated by an earlier run
    index_builds: int  # new vector_index partitions this run materialized
    llm_cost_usd: float  # what the evaluated configs' LLM calls cost
    stopped_by: str  # "max_trials", "max_cost_usd" or "space" (every config evaluated)


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
    progress: Callable[[str], None] = lambda _: None,
    resume: bool = True,
) -> SearchReport:
    """Evaluate up to `search.max_trials` configs chosen by the sweep's strategy. `todo` holds the (stage,
    key) steps that are not complete yet (a chosen config's evaluation always runs); `summary_of(config
    key)` is that config's evaluation summary, or None when it has none that these inputs give."""
    search = plan.sweep.search
    space, key_of = space_of(plan)
    directions = [DIRECTIONS[o] for o in search.objectives]
    strategy = make(search.strategy, space, seed=search.seed, pool=search.pool, directions=directions)
    budget = trial_budget(plan)
    pending = set(todo)
    evaluated, cost, builds = [], 0.0, 0

    def observe(key: str, summary: dict) -> None:
        nonlocal cost
        c = next(c for c in space.all() if key_of[space.key(c)] == key)
        strategy.observe(c, objective_values(summary, plan.sweep.weights, search.objectives))
        evaluated.append(key)
        cost += float(summary.get("cost_usd", 0.0))

    for key in plan.config_keys if resume else ():  # what an earlier run evaluated is known, not redone
        if (summary := summary_of(key)) is not None:
            observe(key, summary)
    resumed = len(evaluated)
    stopped_by = "space"
    while True:
        if len(evaluated) >= budget:
            stopped_by = "max_trials" if budget < len(plan.config_keys) else "space"
            break
        if search.max_cost_usd is not None and cost >= search.max_cost_usd:
            stopped_by = "max_cost_usd"
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
    return SearchReport(evaluated, resumed, builds, cost, stopped_by)

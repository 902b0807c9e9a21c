"""Cost-aware search: the cost model counts what is built and agrees with the bill `rag-sweep plan` prints;
the `cost_aware` strategy never passes its budget in index builds or LLM calls, reaches random search's
choice for fewer builds, and runs over a sweep's plan as the CLI and the deployment run it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rag_core.planning.bill import cost_model, estimate
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError, sweep_from_dict
from rag_core.search import Cost, CostAware, CostBudget, RandomSearch, Space, make
from rag_core.search.cost import chain_model
from tests.test_search import BEST, DIMS, objective

RAW = {
    "name": "costs",
    "data": {"corpus": "c.parquet", "qa": "q.parquet"},
    "chunking": [
        {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        {"method": "recursive", "chunk_size": 300, "chunk_overlap": 0},
    ],
    "retrieval": {"mode": "vector", "top_k": [2, 5]},
    "rerank": {"method": ["none", "llm"], "model": "gpt-4o-mini", "candidates": 8},
    "generation": {"model": ["gpt-4o-mini", "extractive"], "max_tokens": 10},
}
N = 10  # questions


def _plan(**search) -> Plan:
    return Plan.resolve(
        sweep_from_dict({**RAW, **({"search": search} if search else {})}, Path("/tmp/c.yaml"))
    )


def _chain(plan: Plan, key: str) -> list[tuple[str, str]]:
    c = plan.config(key)
    return [(s, plan.key_of(c, s)) for s in plan.partitions]


def _price(model: str, prompt: int, completion: int) -> float:
    return (prompt + completion) * 1e-6


def test_the_cost_model_counts_what_is_already_built():
    plan = _plan()
    llm = next(k for k in plan.config_keys if "llm" in k and "gpt" in k)  # an LLM reranker and generator
    c = plan.config(llm)
    index = [(s, plan.key_of(c, s)) for s in ("chunksets", "embeddings", "vector_index")]
    model = cost_model(plan, set(index), N)  # its index exists
    assert model.new_cost(llm) == Cost(llm_calls=2 * N)  # a rerank and an answer per question (no judge)
    other = next(k for k in plan.config_keys if plan.key_of(plan.config(k), "embeddings") != index[1][1])
    assert model.new_cost(other).index_builds == 1  # the other chunkset's index is not built
    model.mark_built(llm)
    assert not model.new_cost(llm)  # evaluated: nothing left to pay
    # the same retrieval and reranking, an extractive reader: only its own (free) stages are new
    sibling = next(
        k
        for k in plan.config_keys
        if k != llm and plan.key_of(plan.config(k), "rerankings") == plan.key_of(c, "rerankings")
    )
    assert model.new_cost(sibling) == Cost()
    assert model.full_cost(sibling) == Cost(index_builds=1, llm_calls=N)  # with nothing built: the rerank


def test_the_cost_model_agrees_with_the_bill():
    plan = _plan()
    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})
    done = set(_chain(plan, plan.config_keys[0])[:3])  # one index exists
    bill = estimate(plan, done, lambda key: chunks, lambda model: set(), N, _price)
    every = bill.cost_model.total(plan.config_keys)
    assert every.index_builds == bill.partitions["embeddings"][1] == 1
    assert every.llm_calls == sum(bill.llm_calls.values()) > 0
    assert every.usd == pytest.approx(bill.cost_usd, rel=1e-3)


def _space() -> Space:
    return Space(dict(DIMS), expensive=("chunk", "embed"))


def _llm_space() -> Space:
    """The test space with a stage graph: a new index is a build, every answer costs N LLM calls, and
    generator z's answers cost 10x (a sampled generator)."""
    space = _space()
    space.cost_model = chain_model(
        space.all(),
        [
            ("chunksets", ("chunk",), Cost()),
            ("embeddings", ("embed",), Cost(index_builds=1)),
            ("retrievals", ("top_k",), Cost()),
            ("answers", ("gen",), lambda c: Cost(llm_calls=N * (10 if c["gen"] == "z" else 1))),
        ],
        key=space.key,
    )
    return space


def _spend(strategy, space: Space, most: int = 1000) -> tuple[Cost, int]:
    """Run to the end (or `most` evaluations): (what it paid, evaluations)."""
    spent, n = Cost(), 0
    while n < most and (c := strategy.propose()) is not None:
        spent = spent + space.costs().new_cost(space.key(c))
        strategy.observe(c, objective(c))
        n += 1
    return spent, n


@pytest.mark.parametrize("builds, calls", [(1, None), (2, None), (4, None), (None, 55), (3, 200)])
def test_a_budget_in_cost_units_is_never_exceeded(builds, calls):
    for seed in range(5):
        space = _llm_space()
        strategy = CostAware(space, seed, budget=CostBudget(index_builds=builds, llm_calls=calls))
        spent, n = _spend(strategy, space)
        assert spent.index_builds <= (builds or 99) and spent.llm_calls <= (calls or 1e9)
        assert len(space.built) == spent.index_builds  # what the space saw built is what was paid for
        assert strategy.exhausted in ("index_builds", "llm_calls") and n < len(space)


def test_a_larger_budget_continues_the_same_search_until_the_smaller_one_bound_it():
    """A search replayed with a larger budget (a rerun, the deployment's job launched again) proposes what
    the smaller one proposed while that budget left every candidate affordable: the budget decides what may
    be proposed, never how candidates are weighed."""

    def order(builds: int) -> tuple[list, int]:
        space = _llm_space()
        strategy = CostAware(space, 3, budget=CostBudget(index_builds=builds))
        out, free = [], 0
        while strategy.spent.index_builds < builds and (c := strategy.propose()) is not None:
            free += 1  # proposed while any candidate (one build at most) still fitted
            strategy.observe(c, objective(c))
            out.append(space.key(c))
        return out, free

    small, free = order(2)
    large, _ = order(4)
    assert free >= 2 and large[:free] == small[:free]


def test_cost_aware_reaches_random_searchs_choice_for_half_its_builds():
    """On a structured space, at the same seeds: random search's 12 evaluations against cost_aware's with a
    budget of half random's index builds."""
    rnd, cheap = [], []
    for seed in range(10):
        space = _space()
        strategy = RandomSearch(space, seed)
        _spend(strategy, space, 12)
        rnd.append((BEST - objective(strategy.best()), len(space.built)))
    half = sum(b for _, b in rnd) / len(rnd) / 2
    for seed in range(10):
        space = _space()
        strategy = make("cost_aware", space, seed, budget=CostBudget(index_builds=int(half)))
        _spend(strategy, space, 12)
        cheap.append((BEST - objective(strategy.best()), len(space.built)))
    assert sum(r for r, _ in cheap) <= sum(r for r, _ in rnd)
    assert max(b for _, b in cheap) <= half


def test_among_equal_gains_the_cheaper_candidate_is_proposed():
    space = _llm_space()
    strategy = CostAware(space, 0)
    first = strategy.propose()
    strategy.observe(first, objective(first))
    second = strategy.propose()  # nothing learned about the others: the built index, a cheap generator
    assert space.index_of(second) == space.index_of(first) and second["gen"] != "z"


@pytest.mark.parametrize(
    "search, field",
    [
        ({"strategy": "cost_aware", "budget": {"max_index_builds": 0}}, "search.budget.max_index_builds"),
        ({"strategy": "cost_aware", "budget": {"max_index_builds": "six"}}, "search.budget.max_index_builds"),
        ({"strategy": "cost_aware", "budget": {"max_llm_calls": -1}}, "search.budget.max_llm_calls"),
        ({"strategy": "bayesian", "budget": {"max_index_builds": 2}}, "budget.max_index_builds"),
    ],
)
def test_a_bad_budget_is_a_one_line_error_naming_its_field(search, field):
    with pytest.raises(SpecError) as e:
        _plan(**search)
    assert field in str(e.value) and "\n" not in str(e.value)


def _drive(plan: Plan):
    """run_search over the plan as the CLI's and the deployment's controller runs it: every step recorded,
    a made-up summary per evaluated config."""
    from rag_assets.orchestration.search import run_search

    done, steps = {}, []

    def materialize(stage_name: str, key: str) -> None:
        steps.append((stage_name, key))
        if stage_name == "evaluations":
            c = plan.config(key)
            done[key] = {
                "recall_at_k": 0.5 + 0.1 * (c.retrieval.top_k == 5) + 0.1 * (c.rerank.method == "llm"),
                "token_f1": 0.3 + 0.1 * (not c.generation.is_reader),
                "ndcg_at_k": 0.4,
                "exact_match": 0.1,
                "faithfulness": 0.9,
                "cost_usd": 0.0,
                "n_queries": float(N),
                "retrieval_p95_ms": 1.0,
                "generation_p95_ms": 1.0,
            }

    todo = [(s, k) for s, keys in plan.partitions.items() for k in keys]
    report = run_search(plan, todo, materialize, done.get, lambda: (0, 0.0), n_queries=N)
    return report, steps


def test_a_cost_aware_search_over_the_plan_keeps_to_its_index_builds():
    plan = _plan(strategy="cost_aware", budget={"max_index_builds": 1, "max_llm_calls": 4 * N})
    report, steps = _drive(plan)
    assert len({k for s, k in steps if s == "embeddings"}) == 1  # one corpus embedded
    assert report.stopped_by in ("max_index_builds", "max_llm_calls")
    # the LLM calls of what it computed, as the plan bills them, within the budget
    paid = cost_model(plan, set(), N)
    once = {step: cost for k in report.evaluated for step, cost in paid.steps[k]}
    calls = sum(cost.llm_calls for step, cost in once.items() if step in set(steps))
    assert 0 < calls <= 4 * N and len(report.evaluated) >= 2


def test_the_deployments_search_job_starts_the_same_strategy_with_its_budget_in_index_builds(tmp_path):
    """The search job the UI launches takes max_index_builds as run config; the controller its sensor
    replays builds the cost_aware strategy with it (the CLI's drive_search uses the same controller), and
    the search over that plan keeps to it."""
    import dagster as dg

    from rag_assets.orchestration.search import SearchController, SearchState
    from rag_sweep.definitions import build_definitions

    plan = Plan.resolve(
        sweep_from_dict({**RAW, "search": {"strategy": "cost_aware"}}, tmp_path / "costs.yaml")
    )
    defs = build_definitions([plan], str(tmp_path))
    job = defs.get_job_def("costs__search")
    with dg.instance_for_test() as instance:
        config = {"ops": {"costs__start_search": {"config": {"max_index_builds": 1}}}}
        assert job.execute_in_process(run_config=config, instance=instance).success
        state = SearchState.load(tmp_path, "costs")
        controller = SearchController(plan, tmp_path, instance, state)
    assert state.budget == {"max_index_builds": 1} and state.built == []  # nothing existed yet
    deployed = controller.plan
    assert deployed.sweep.search.budget.in_cost_units() == CostBudget(index_builds=1)
    report, steps = _drive(deployed)
    assert len({k for s, k in steps if s == "embeddings"}) == 1 and report.stopped_by == "max_index_builds"


def test_plan_prints_what_the_search_expects_to_spend():
    from rag_sweep.printing import search_spend_line

    chunks = pl.DataFrame({"text": ["x" * 400] * 3, "index_text": ["a", "b", "a"]})

    def bill(plan):
        return estimate(plan, set(), lambda key: chunks, lambda model: set(), N, _price)

    plan = _plan(strategy="cost_aware", budget={"max_index_builds": 1, "max_configs": 3})
    line = search_spend_line(plan, bill(plan))
    every = bill(plan).cost_model.total(plan.config_keys)
    assert "at most: 1 index builds (budget 1; every config: 2)" in line
    assert f"LLM calls (no budget; every config: {every.llm_calls:,.0f})" in line
    assert search_spend_line(_plan(strategy="bayesian"), bill(_plan())) is None  # it does not weigh costs


def test_a_cost_aware_search_over_the_plan_keeps_to_its_budget_in_dollars():
    """litellm's prices of the calls each step makes (a chunk's tokens from its size before it exists)."""
    from rag_assets.orchestration.search import search_costs, space_of

    plan = _plan(strategy="cost_aware")
    space, keys = space_of(plan)
    priced = search_costs(plan, keys, set(), N)
    every = priced.total(priced.steps)
    assert every.usd > 0  # gpt-4o-mini has a price
    budget = every.usd / 3
    report, steps = _drive(_plan(strategy="cost_aware", budget={"max_cost_usd": budget}))
    once = {step: cost for ck in priced.steps for step, cost in priced.steps[ck]}
    assert 0 < sum(once[s].usd for s in set(steps)) <= budget
    assert report.stopped_by == "max_cost_usd" and len(report.evaluated) < len(plan.config_keys)


@pytest.mark.slow
def test_rag_sweep_run_keeps_a_cost_aware_search_to_its_index_builds_and_resumes(slice_data, tmp_path):
    """A real run (the CLI's controller, the example model): one index build allowed, then two."""
    import dagster as dg

    from rag_sweep.runner import run_sweep
    from tests.conftest import write_sweep

    sections = dict(
        name="costs",
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
        ],
        retrieval={"mode": ["vector", "bm25"], "top_k": [2, 5]},
    )

    def run(budget: dict):
        spec = write_sweep(
            tmp_path / "s.yaml", slice_data, search={"strategy": "cost_aware", "budget": budget}, **sections
        )
        return run_sweep(str(spec), str(tmp_path / "data"), progress=False)

    first = run({"max_index_builds": 1, "max_configs": 6})
    chunksets = {first.plan.key_of(first.plan.config(k), "chunksets") for k in first.search.evaluated}
    assert first.search.index_builds == 1 and len(chunksets) == 1
    assert first.search.stopped_by == "max_index_builds" and len(first.search.evaluated) == 4
    second = run({"max_index_builds": 2, "max_configs": 6})  # the same search, a larger budget
    assert len(second.search.evaluated) == 6 and first.search.index_builds + second.search.index_builds <= 2
    records = second.instance.fetch_materializations(dg.AssetKey(["costs", "evaluations"]), limit=100).records
    evaluations = [r.partition_key for r in records]
    assert len(evaluations) == len(set(evaluations))  # no config evaluated twice

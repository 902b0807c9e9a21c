"""Search strategies (pure): no candidate twice, TPE beats random on a structured space, the reuse-aware
pool builds fewer indexes, and successive halving drops a worse config and keeps a tied one."""

from __future__ import annotations

import numpy as np
import pytest

from rag_core.search import Bayesian, Halving, Space, make

DIMS = {"chunk": [256, 384, 512], "embed": ["a", "b", "c"], "top_k": [3, 5, 10], "gen": ["x", "y", "z"]}


def space() -> Space:
    return Space(dict(DIMS), expensive=("chunk", "embed"))


def objective(c) -> float:
    """Smooth and separable: best at chunk 384, embed b, top_k 10, gen y."""
    return (
        {256: 0.2, 384: 0.5, 512: 0.3}[c["chunk"]]
        + {"a": 0.1, "b": 0.4, "c": 0.2}[c["embed"]]
        + {3: 0.0, 5: 0.1, 10: 0.2}[c["top_k"]]
        + {"x": 0.0, "y": 0.3, "z": 0.1}[c["gen"]]
    )


BEST = 0.5 + 0.4 + 0.2 + 0.3


def run(strategy, budget: int) -> tuple[float, int]:
    """(regret of the best candidate found, index builds) after `budget` evaluations."""
    for _ in range(budget):
        c = strategy.propose()
        if c is None:
            break
        strategy.observe(c, objective(c))
    return BEST - objective(strategy.best()), len(strategy.space.built)


@pytest.mark.parametrize("name", ["grid", "random", "bayesian"])
def test_every_candidate_once_then_none(name):
    s = make(name, Space({"a": [1, 2], "b": ["x", "y", "z"]}), seed=3)
    seen = []
    while (c := s.propose()) is not None:
        seen.append((c["a"], c["b"]))
        s.observe(c, c["a"] + len(c["b"]))
    assert sorted(seen) == sorted((a, b) for a in (1, 2) for b in "xyz")


def test_tpe_finds_better_configs_than_random_at_the_same_budget():
    tpe = [run(make("bayesian", space(), seed=s), 25)[0] for s in range(12)]
    rnd = [run(make("random", space(), seed=s), 25)[0] for s in range(12)]
    assert np.mean(tpe) < np.mean(rnd)


def test_the_reuse_aware_pool_builds_fewer_indexes():
    plain = [run(Bayesian(space(), seed=s), 20)[1] for s in range(12)]
    aware = [run(Bayesian(space(), seed=s, pool=4), 20)[1] for s in range(12)]
    assert np.mean(aware) < np.mean(plain)


def test_multi_objective_search_proposes_and_learns():
    s = Bayesian(space(), seed=0, directions=("maximize", "minimize"))
    for _ in range(12):
        c = s.propose()
        s.observe(c, (objective(c), c["top_k"] * 10.0))  # quality, and a latency that grows with top_k
    assert len(s.study.best_trials) >= 1 and len(s.seen) == 12


def test_halving_drops_a_worse_config_and_keeps_a_tied_one_without_asking_twice():
    rng = np.random.default_rng(0)
    questions = [f"q{i}" for i in range(160)]
    truth = {
        "good": rng.random(160) < 0.7,
        "tied": rng.random(160) < 0.7,
        "bad": rng.random(160) < 0.2,  # worse by construction
    }
    cands = [{"name": n} for n in truth]
    h = Halving(cands, questions, start=10, seed=1)
    asked: dict[str, list[str]] = {n: [] for n in truth}
    while (step := h.propose()) is not None:
        c, qs = step
        asked[c["name"]] += qs
        h.observe(c, {q: float(truth[c["name"]][questions.index(q)]) for q in qs})
    assert {c["name"] for c in (h.candidates[i] for i in h.alive)} == {"good", "tied"}
    assert all(len(qs) == len(set(qs)) for qs in asked.values())  # no question twice for a config
    assert len(asked["bad"]) < 160 and len(asked["good"]) == len(asked["tied"]) == 160
    assert h.spent == sum(map(len, asked.values())) < 3 * 160
    assert h.best()["name"] in {"good", "tied"}


def test_halving_stops_at_its_budget():
    questions = [f"q{i}" for i in range(100)]
    h = Halving([{"n": i} for i in range(4)], questions, start=10, budget=60)
    while (step := h.propose()) is not None:
        c, qs = step
        h.observe(c, dict.fromkeys(qs, 0.5))
    assert h.spent <= 60 and h.best() is not None


def test_a_space_of_listed_candidates_proposes_only_those():
    listed = [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "x"}]  # not the 3 x 2 product
    s = make("bayesian", Space.of(listed, expensive=("a",)), seed=0, pool=2)
    got = []
    while (c := s.propose()) is not None:
        got.append(c)
        s.observe(c, c["a"])
    assert sorted(got, key=lambda c: c["a"]) == listed


def _plan(search: dict):
    from pathlib import Path

    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import sweep_from_dict

    raw = {
        "name": "s",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": [
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 0},
        ],
        "retrieval": {"mode": ["vector", "bm25", "hybrid"], "top_k": [2, 5]},
        "search": search,
    }
    return Plan.resolve(sweep_from_dict(raw, Path("/tmp/s.yaml")))


def _drive(plan, done: dict | None = None):
    """run_search with every step recorded and a made-up summary per evaluated config."""
    from rag_assets.orchestration.search import run_search

    done = dict(done or {})
    steps = []

    def materialize(stage_name: str, key: str) -> None:
        steps.append((stage_name, key))
        if stage_name == "evaluations":
            c = plan.config(key)
            done[key] = {
                "recall_at_k": 0.5 + 0.1 * (c.retrieval.mode == "hybrid") + 0.05 * (c.retrieval.top_k == 5),
                "token_f1": 0.3,
                "ndcg_at_k": 0.4,
                "exact_match": 0.1,
                "faithfulness": 0.9,
                "cost_usd": 0.3,
                "n_queries": 10.0,
                "retrieval_p95_ms": 10.0 * c.retrieval.top_k,
                "generation_p95_ms": 1.0,
            }

    todo = [
        (s, k)
        for s in (
            "chunksets",
            "embeddings",
            "vector_index",
            "retrievals",
            "rerankings",
            "answers",
            "evaluations",
        )
        for k in plan.keys(s)
    ]

    def spent() -> tuple[int, float]:  # the ledger: 10 calls per evaluated config, at its cost
        return 10 * len(done), sum(s["cost_usd"] for s in done.values())

    report = run_search(plan, todo, materialize, done.get, spent)
    return report, steps, done


def test_a_search_stops_at_its_cost_budget_and_a_rerun_resumes_it():
    plan = _plan({"strategy": "bayesian", "budget": {"max_configs": 10, "max_cost_usd": 1.0}})
    report, steps, done = _drive(plan)
    assert report.stopped_by == "max_cost_usd" and len(report.evaluated) == 4  # 4 x $0.30 >= $1
    assert len(steps) == len(set(steps))  # no partition materialized twice
    assert report.index_builds == len({plan.key_of(plan.config(k), "vector_index") for k in report.evaluated})
    again, steps2, _ = _drive(_plan({"strategy": "bayesian", "budget": {"max_configs": 6}}), done)
    assert again.resumed == 4 and len(again.evaluated) == 6 and again.stopped_by == "max_configs"
    assert not {("evaluations", k) for k in report.evaluated} & set(steps2)  # nothing evaluated twice


def test_a_multi_objective_search_runs_over_the_plan():
    plan = _plan(
        {
            "strategy": "bayesian",
            "budget": {"max_configs": 5},
            "objectives": ["overall_score", "p95_latency_ms"],
        }
    )
    report, _, _ = _drive(plan)
    assert len(report.evaluated) == 5 and report.stopped_by == "max_configs"


def test_rungs_are_nested_random_samples_with_their_own_fingerprint():
    import polars as pl

    from rag_core.search.halving import question_subset, subset_fingerprint

    qa = pl.DataFrame({"query_id": [f"q{i}" for i in range(30)], "question": ["?"] * 30})
    small, large = question_subset(qa, 5, seed=3), question_subset(qa, 12, seed=3)
    assert small.height == 5 and large.height == 12
    assert set(small["query_id"]) < set(large["query_id"])  # a larger rung holds the smaller one
    assert set(small["query_id"]) != set(qa["query_id"][:5])  # a sample, not the file's head
    assert question_subset(qa, 30, seed=3) is qa and question_subset(qa, 99, seed=3) is qa
    assert len({subset_fingerprint("qa", 5, 3), subset_fingerprint("qa", 12, 3), "qa"}) == 3


def test_a_question_scores_on_the_metrics_it_has():
    import polars as pl

    from rag_core.search.halving import question_scores

    per_query = pl.DataFrame({"query_id": ["a", "b"], "recall_at_k": [1.0, None], "token_f1": [0.0, 0.5]})
    got = question_scores(per_query, {"recall_at_k": 0.5, "token_f1": 0.5, "faithfulness": 1.0})
    assert got == {"a": 0.5, "b": 0.5}  # b has no gold docs: its recall is left out, not 0


def test_halving_over_the_plan_drops_the_worse_config_and_materializes_each_rung_once():
    """run_halving with a made-up evaluation: a bm25 config is worse by construction on every question,
    hybrid and vector are tied; the driver materializes each rung once and the survivors end on the
    full set."""
    import polars as pl

    from rag_assets.orchestration.search import run_halving

    raw = {"strategy": "halving", "start_questions": 8, "growth": 2, "seed": 1}
    plan = _plan({**raw, "budget": {"max_configs": 6}})  # a seeded sample of 6 of the 12 configs
    ids = [f"q{i:02d}" for i in range(40)]
    steps: list[tuple[str, str, int | None]] = []
    rows: dict[tuple[str, int | None], pl.DataFrame] = {}

    def materialize(stage_name: str, key: str, n: int | None) -> bool:
        if (stage_name, key, n) in steps:
            return False
        steps.append((stage_name, key, n))
        if stage_name == "evaluations":
            from rag_core.search.halving import question_order

            asked = question_order(ids, 1)[: n or len(ids)]
            mode = plan.config(key).retrieval.mode
            rng = __import__("random").Random(7)
            noise = {q: rng.random() for q in ids}
            score = [noise[q] * (0.2 if mode == "bm25" else 1.0) for q in asked]
            rows[(key, n)] = pl.DataFrame({"query_id": asked, "token_f1": score})
        return True

    spent = lambda: (0, 0.0)  # noqa: E731
    report = run_halving(plan, ids, materialize, lambda k, n: rows[(k, n)], spent)
    modes = {k: plan.config(k).retrieval.mode for k in report.evaluated}
    assert "bm25" in modes.values() and report.dropped
    assert len(report.evaluated) == 6 and report.stopped_by == "halving"
    assert {k for k in report.dropped if modes[k] == "bm25"} == {k for k in modes if modes[k] == "bm25"}
    survivors = [k for k in report.evaluated if k not in report.dropped]
    assert survivors and all(modes[k] != "bm25" for k in survivors)
    assert all(("evaluations", k, None) in steps for k in survivors)  # the full set, as ordinary configs
    assert all(n <= 16 for n in report.dropped.values())
    assert len(steps) == len(set(steps))  # every rung of a partition materialized once


def test_among_equal_index_costs_the_cheaper_llm_is_proposed_first():
    from rag_assets.orchestration.search import generation_usd, space_of

    raw = {
        "name": "s",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        "retrieval": {"mode": "bm25", "top_k": 3},
        "generation": {"model": ["gpt-4o", "gpt-4o-mini", "extractive"]},
        "search": {"strategy": "bayesian", "pool": 3},
    }
    from pathlib import Path

    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import sweep_from_dict

    plan = Plan.resolve(sweep_from_dict(raw, Path("/tmp/s.yaml")))
    prices = {plan.config(k).generation.model: generation_usd(plan.config(k)) for k in plan.config_keys}
    assert prices["gpt-4o"] > prices["gpt-4o-mini"] > prices["extractive"] == 0.0  # litellm's table
    space, key_of = space_of(plan)
    s = make("bayesian", space, seed=0, pool=3, n_startup_trials=3)
    order = []
    while (c := s.propose()) is not None:
        order.append(plan.config(key_of[space.key(c)]).generation.model)
        s.observe(c, 0.5)  # equally promising
    assert order == ["extractive", "gpt-4o-mini", "gpt-4o"]


def test_the_sign_flip_test_is_exact_and_honest_on_few_questions():
    from rag_core.metrics.stats import sign_flip_p

    rng = np.random.default_rng(0)
    assert sign_flip_p(np.ones(5), rng) == pytest.approx(2 / 32)  # 5 questions can never reach 0.05
    assert sign_flip_p(np.r_[np.ones(10)], rng) == pytest.approx(2 / 1024)
    # 4 of 10 questions differ, all the same way (a bootstrap puts this at p ~ 0.01 and drops a config
    # that the full QA set shows to be tied): only 4 signs carry evidence, p = 2/16
    assert sign_flip_p(np.r_[np.full(4, 0.1), np.zeros(6)], rng) == pytest.approx(2 / 16)
    assert sign_flip_p(np.zeros(8), rng) == 1.0
    assert sign_flip_p(np.r_[np.ones(20), -np.ones(20)], rng) > 0.9  # drawn, above 12 questions
    assert sign_flip_p(np.ones(30), rng) < 0.001

"""Prompt optimization (GEPA over the answer prompt), offline against a local OpenAI-protocol server: the
generator answers well only when its prompt carries an instruction that the scripted reflection model
proposes once it has seen failed questions. The optimized prompt beats the seed on the questions it
trained on and on questions it never saw; the budget stops it with the best so far; a rerun pays nothing;
the questions it is not given are never sent to any model."""

from __future__ import annotations

import re

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_core.optimization.adapter import PromptAdapter
from rag_core.optimization.evolve import OptimizationError, optimize, train_val_split
from rag_core.planning.spec import (
    DEFAULT_PROMPT,
    DEFAULT_WEIGHTS,
    OptimizeSpec,
    RagConfig,
    SpecError,
    sweep_from_dict,
)
from resources.llm import LLMClient
from tests.openai_stub import OpenAIStub

GENERATOR, REFLECTOR = "openai/gpt-4o-mini", "openai/gpt-4o"
INSTRUCTION = "Reply with the exact name from the context, nothing else."
CITIES = ["Paris", "Rome", "Madrid", "Berlin", "Vienna", "Lisbon", "Prague", "Warsaw", "Dublin", "Oslo"]


def _qa(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": [f"q{i:02d}" for i in range(n)],
            "question": [f"Which city hosts landmark number {i}?" for i in range(n)],
            "answers": [[CITIES[i % len(CITIES)]] for i in range(n)],
            "relevant_doc_ids": [[f"d{i}"] for i in range(n)],
        }
    )


def _reranked(qa: pl.DataFrame) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": qa["query_id"],
            "chunk_ids": [[f"d{i}#0"] for i in range(qa.height)],
            "doc_ids": [[f"d{i}"] for i in range(qa.height)],
            "titles": [[f"Landmark {i}"] for i in range(qa.height)],
            "texts": [[f"Landmark number {i} stands in {a[0]}."] for i, a in enumerate(qa["answers"])],
            "latency_ms": [1.0] * qa.height,
        }
    )


class Scripted:
    """The generator answers the gold city only when the prompt carries INSTRUCTION (else a rambling
    sentence around it); the reflection model proposes the current prompt with INSTRUCTION added, but only
    once it is shown a failed answer (feedback below a perfect score)."""

    def __init__(self, qa: pl.DataFrame):
        self.gold = dict(zip(qa["question"], [a[0] for a in qa["answers"]], strict=True))
        self.reflections = 0

    def __call__(self, prompt: str, model: str):
        if model == REFLECTOR.split("/", 1)[1]:
            self.reflections += 1
            current = re.search(r"```\n(.*?)\n```", prompt, re.S).group(1)
            if "exactly one of the gold answers" not in prompt or INSTRUCTION in current:
                return 200, f"```\n{current}\n```", 0.0  # nothing to fix: the same text
            return 200, f"```\n{INSTRUCTION}\n{current}\n```", 0.0
        question = next(q for q in self.gold if q in prompt)
        if INSTRUCTION in prompt:
            return 200, self.gold[question], 0.0
        return 200, f"I believe the answer could well be {self.gold[question]}, judging by the context", 0.0


def _config() -> RagConfig:
    return RagConfig.model_validate(
        {
            "chunking": {"method": "paragraph", "chunk_size": 512, "chunk_overlap": 0},
            "embedding": {"model": "all-MiniLM-L6-v2"},
            "index": {"store": "lancedb"},
            "retrieval": {"mode": "bm25", "top_k": 1},
            "generation": {"model": GENERATOR, "prompt_template": DEFAULT_PROMPT},
        }
    )


def _spec(**budget) -> OptimizeSpec:
    return OptimizeSpec(
        components=["answer_prompt"],
        reflection_model=REFLECTOR,
        budget={"max_metric_calls": 60, **budget},
        minibatch=3,
        seed=0,
    )


def _run(stub, tmp_path, qa, spec, cache="llm_cache.sqlite"):
    llm = LLMClient(
        api_base=stub.api_base, api_key="sk-test", max_retries=0, cache_path=str(tmp_path / cache)
    )
    return optimize(
        _config(),
        spec,
        qa,
        _reranked(qa),
        dict(DEFAULT_WEIGHTS),
        llm,
        lambda t: len(t.split()),
        run_dir=str(tmp_path / "gepa"),
    )


def test_the_optimized_prompt_answers_better_on_questions_it_never_saw_and_a_rerun_pays_nothing(tmp_path):
    whole = _qa(16)
    selection, holdout = whole.head(12), whole.tail(4)
    script = Scripted(whole)
    with OpenAIStub(script, by_model=True) as stub:
        result = _run(stub, tmp_path, selection, _spec())
        sent = [r["body"]["messages"][-1]["content"] for r in stub.requests]
        assert result.improved and INSTRUCTION in result.best["answer_prompt"]
        assert "{query}" in result.best["answer_prompt"] and "{context}" in result.best["answer_prompt"]
        seed, best = result.candidates[0], result.candidates[result.best_index]
        assert seed.prompts["answer_prompt"] == DEFAULT_PROMPT and best.val_score > seed.val_score + 0.3
        assert result.paid_calls > 0 and script.reflections >= 1
        # the holdout is never shown to any model: neither the generator nor the reflection model
        assert not any(q in p for q in holdout["question"] for p in sent)
        assert set(result.train_ids) | set(result.val_ids) == set(selection["query_id"])
        assert not set(result.train_ids) & set(result.val_ids)

        # on the questions it never saw, the optimized prompt scores better than the seed's
        llm = LLMClient(
            api_base=stub.api_base, api_key="sk-test", cache_path=str(tmp_path / "llm_cache.sqlite")
        )
        adapter = PromptAdapter(_config(), holdout, _reranked(holdout), dict(DEFAULT_WEIGHTS), llm, len)
        ids = holdout["query_id"].to_list()
        _, before = adapter.scored(ids, result.seed)
        _, after = adapter.scored(ids, result.best)
        assert min(after) > max(before)

        # a rerun resumes from GEPA's state, and the call cache answers every call: nothing is paid again
        asked = len(stub.requests)
        again = _run(stub, tmp_path, selection, _spec())
        assert len(stub.requests) == asked and again.paid_calls == 0
        assert again.best == result.best


def test_the_budget_stops_it_cleanly_with_the_best_so_far(tmp_path):
    qa = _qa(12)
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        with pytest.raises(OptimizationError, match="give at least 18"):
            _run(stub, tmp_path / "calls", qa, _spec(max_metric_calls=17))  # seed 6 + 3 + 3 + 6
        few = _run(stub, tmp_path / "calls", qa, _spec(max_metric_calls=25))
        assert few.stopped_by == "max_metric_calls" and 18 <= few.metric_calls <= 25
        assert few.best == few.candidates[few.best_index].prompts
        cheap = _run(stub, tmp_path / "cost", qa, _spec(max_metric_calls=500, max_cost_usd=1e-6))
    assert cheap.stopped_by == "max_cost_usd" and cheap.metric_calls < 500
    assert cheap.cost_usd > 0


def test_a_prompt_without_its_placeholders_scores_zero_and_says_why(tmp_path):
    qa = _qa(3)
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="sk-test")
        adapter = PromptAdapter(_config(), qa, _reranked(qa), dict(DEFAULT_WEIGHTS), llm, len)
        batch = adapter.evaluate(qa["query_id"].to_list(), {"answer_prompt": "Answer: {query}"}, True)
        assert not stub.requests  # nothing is asked of a prompt that cannot carry the context
    assert batch.scores == [0.0] * 3
    records = adapter.make_reflective_dataset({}, batch, ["answer_prompt"])["answer_prompt"]
    assert "{context}" in records[0]["Feedback"]


def test_the_reflective_dataset_shows_what_went_wrong(tmp_path):
    qa = _qa(2)
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="sk-test")
        adapter = PromptAdapter(_config(), qa, _reranked(qa), dict(DEFAULT_WEIGHTS), llm, len)
        batch = adapter.evaluate(qa["query_id"].to_list(), {"answer_prompt": DEFAULT_PROMPT}, True)
    (first, _) = adapter.make_reflective_dataset({}, batch, ["answer_prompt"])["answer_prompt"]
    assert first["Inputs"]["question"] == qa["question"][0]
    assert (
        "[1] Landmark 0: Landmark number 0 stands in Paris."
        in first["Inputs"]["retrieved context (titles and snippets)"]
    )
    assert first["Gold answers"] == "Paris" and "I believe" in first["Generated Outputs"]
    assert (
        "not exactly one of the gold answers" in first["Feedback"] and "exact_match 0.00" in first["Feedback"]
    )
    assert 0 < batch.scores[0] < 1


def test_with_texts_replaces_only_the_component():
    c = _config()
    changed = c.with_texts({"answer_prompt": "Q: {query}\nC: {context}"})
    assert changed.generation.prompt_template.startswith("Q:") and changed.retrieval == c.retrieval
    assert changed.generation.key != c.generation.key  # the prompt's hash is in the generation's key


@given(st.lists(st.text(min_size=1, max_size=8), min_size=2, max_size=40, unique=True), st.integers(0, 5))
def test_the_train_validation_split_is_seeded_disjoint_and_blind_to_order(ids, seed):
    train, val = train_val_split(ids, 0.5, seed)
    assert train and val and not set(train) & set(val) and set(train) | set(val) == set(ids)
    assert train_val_split(list(reversed(ids)), 0.5, seed) == (train, val)


def test_one_question_cannot_be_split():
    with pytest.raises(OptimizationError, match="at least 2 selection questions"):
        train_val_split(["q1"], 0.5, 0)


def _sweep(tmp_path, optimize: dict, generation=None):
    return sweep_from_dict(_raw(optimize, generation), tmp_path / "opt.yaml")


def _raw(optimize: dict, generation=None) -> dict:
    return {
        "name": "opt",
        "data": {"corpus": "c.jsonl", "qa": "q.jsonl"},
        "chunking": {"method": "paragraph", "chunk_size": 512, "chunk_overlap": 0},
        "retrieval": {"mode": "bm25", "top_k": [1, 2]},
        "generation": generation or [{"model": "extractive"}, {"model": GENERATOR}],
        "optimize": optimize,
    }


def test_the_optimize_section_is_checked_on_load(tmp_path):
    from rag_core.planning.plan import Plan

    ok = _sweep(tmp_path, {"reflection_model": REFLECTOR})
    assert ok.optimize.components == ["answer_prompt"] and ok.optimize.configs == "recommended"
    with pytest.raises(SpecError, match="rewrite_prompt: not a config setting yet"):  # (compress_prompt is)
        _sweep(tmp_path, {"reflection_model": REFLECTOR, "components": ["rewrite_prompt"]})
    with pytest.raises(SpecError, match="no config of this sweep uses compress_prompt"):
        _sweep(tmp_path, {"reflection_model": REFLECTOR, "components": ["compress_prompt"]})
    with pytest.raises(SpecError, match="no config of this sweep uses answer_prompt"):
        _sweep(tmp_path, {"reflection_model": REFLECTOR}, generation={"model": "extractive"})
    with pytest.raises(SpecError, match="field 'optimize': not with search.strategy 'halving'"):
        sweep_from_dict(
            {**_raw({"reflection_model": REFLECTOR}), "search": {"strategy": "halving"}}, tmp_path / "o.yaml"
        )
    named = _sweep(tmp_path, {"reflection_model": REFLECTOR, "configs": ["no-such-config"]})
    with pytest.raises(SpecError, match="no config 'no-such-config'"):
        Plan.resolve(named)
    extractive = next(k for k in Plan.resolve(ok).config_keys if "extractive" in k)
    with pytest.raises(SpecError, match=f"config '{re.escape(extractive)}' does not use answer_prompt"):
        Plan.resolve(_sweep(tmp_path, {"reflection_model": REFLECTOR, "configs": [extractive]}))


def _optimize_in_child(api_base: str, folder: str) -> None:
    import os

    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    qa = _qa(12)
    llm = LLMClient(
        api_base=api_base,
        api_key="sk-test",
        max_retries=0,
        max_concurrency=1,
        cache_path=f"{folder}/llm_cache.sqlite",
    )
    optimize(_config(), _spec(), qa, _reranked(qa), dict(DEFAULT_WEIGHTS), llm, len, run_dir=f"{folder}/gepa")


def test_a_killed_optimization_resumes_without_paying_for_a_call_twice(tmp_path):
    """Killed while waiting for its 15th call (validating its first proposal) (one call at a time), rerun on the same state and call cache:
    the one call it never got an answer for is the only one asked twice."""
    import multiprocessing
    import threading
    import time

    qa = _qa(12)
    script, stall = Scripted(qa), threading.Event()
    arrived = []

    def respond(prompt: str, model: str):
        arrived.append((model, prompt))
        if len(arrived) == 15 and not stall.is_set():
            stall.set()
            return 200, "late", 20.0  # the killed process never reads this one
        return script(prompt, model)

    with OpenAIStub(respond, by_model=True) as stub:
        child = multiprocessing.get_context("spawn").Process(
            target=_optimize_in_child, args=(stub.api_base, str(tmp_path))
        )
        child.start()
        deadline = time.monotonic() + 180
        while not stall.is_set() and child.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stall.is_set(), f"the optimization ended before its 15th call (exit code {child.exitcode})"
        child.kill()
        child.join()
        assert (tmp_path / "gepa" / "gepa_state.bin").exists()  # GEPA saved its state as it went
        killed = list(arrived)
        llm = LLMClient(
            api_base=stub.api_base,
            api_key="sk-test",
            max_retries=0,
            max_concurrency=1,
            cache_path=str(tmp_path / "llm_cache.sqlite"),
        )
        result = optimize(
            _config(),
            _spec(),
            qa,
            _reranked(qa),
            dict(DEFAULT_WEIGHTS),
            llm,
            len,
            run_dir=str(tmp_path / "gepa"),
        )
    resumed = arrived[len(killed) :]
    assert result.improved
    asked_twice = {r for r in resumed if r in set(killed)}
    assert asked_twice == {killed[-1]}  # only the call that was in flight when it was killed


def test_the_optimized_config_joins_the_plan_and_its_answers_follow_the_optimization(tmp_path):
    import dagster as dg

    from rag_assets.sweep_assets import stage_assets
    from rag_core.planning.plan import Plan

    sweep = _sweep(tmp_path, {"reflection_model": REFLECTOR}, generation={"model": GENERATOR})
    plain = Plan.resolve(sweep)
    base = plain.config_keys[0]
    better = {"answer_prompt": f"{INSTRUCTION}\n{DEFAULT_PROMPT}"}
    plan = Plan.resolve(
        sweep, optimized={base: better, "gone-config": better}
    )  # a config since removed: skipped
    (optimized,) = plan.optimized_from
    assert (
        plan.config_keys == [*plain.config_keys, optimized]
        and plan.labels[optimized] == plan.labels[base] + "·optimized"
    )
    assert plan.optimizable_keys == plain.config_keys  # an optimized config is never optimized again
    assert plan.keys("rerankings") == plain.keys("rerankings")  # nothing before the answers is new
    assert plan.optimization_starts({"recommended": optimized}) == [base]  # it stands for its start
    from resources import build_resources

    defs = dg.Definitions(assets=stage_assets(plan), resources=build_resources(str(tmp_path)))
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    answers = dg.AssetKey(["opt", "answers"])
    assert dg.AssetKey(["opt", "prompt_optimizations"]) in graph.get(answers).parent_keys


KEEP = "Keep every sentence that names a city."


class ScriptedCompression:
    """The compression model keeps a passage only when its prompt says to keep sentences naming a city
    (else NONE); the generator answers the city when the context still holds it; the reflection model adds
    that instruction to the compression prompt once it sees failed answers."""

    def __init__(self, qa: pl.DataFrame):
        self.gold = dict(zip(qa["question"], [a[0] for a in qa["answers"]], strict=True))

    def __call__(self, prompt: str, model: str):
        if model == "reflector":
            current = re.search(r"```\n(.*?)\n```", prompt, re.S).group(1)
            if "exactly one of the gold answers" not in prompt or KEEP in current:
                return 200, f"```\n{current}\n```", 0.0
            return 200, f"```\n{KEEP}\n{current}\n```", 0.0
        if model == "compressor":
            passage = prompt.split("PASSAGE: ", 1)[1].split("\n")[0]
            return 200, (passage if KEEP in prompt else "NONE"), 0.0
        question = next(q for q in self.gold if q in prompt)
        city = self.gold[question]
        return 200, (city if f"stands in {city}" in prompt else "unknown"), 0.0


def test_the_compression_prompt_is_optimized_as_a_component(tmp_path):
    from rag_core.planning.spec import DEFAULT_COMPRESS_PROMPT

    qa = _qa(12)
    config = _config().with_texts({})  # the default compression prompt, unset
    config = config.model_copy(
        update={
            "generation": config.generation.model_copy(
                update={
                    "context": "compress",
                    "context_model": "openai/compressor",
                    "model": "openai/generator",
                }
            )
        }
    )
    assert (
        config.generation.context_prompt is None and config.text("compress_prompt") == DEFAULT_COMPRESS_PROMPT
    )
    spec = OptimizeSpec(
        components=["compress_prompt"], reflection_model="openai/reflector", budget={"max_metric_calls": 60}
    )
    with OpenAIStub(ScriptedCompression(qa), by_model=True) as stub:
        llm = LLMClient(
            api_base=stub.api_base, api_key="sk-test", max_retries=0, cache_path=str(tmp_path / "c.sqlite")
        )
        result = optimize(
            config, spec, qa, _reranked(qa), dict(DEFAULT_WEIGHTS), llm, len, run_dir=str(tmp_path / "g")
        )
    assert result.improved and KEEP in result.best["compress_prompt"]
    assert result.candidates[result.best_index].val_score > result.candidates[0].val_score + 0.5
    optimized = config.with_texts(result.best)
    assert optimized.generation.key != config.generation.key and "-cp" in optimized.generation.key
    assert optimized.generation.prompt_template == config.generation.prompt_template
    # the built-in text written back is the unset setting again: the same key as before
    assert (
        config.with_texts({"compress_prompt": DEFAULT_COMPRESS_PROMPT}).generation.key
        == config.generation.key
    )

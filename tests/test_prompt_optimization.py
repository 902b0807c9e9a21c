"""Prompt optimization (GEPA over the answer, compression, query transformation and reranking prompts), offline against a local OpenAI-protocol server: the
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
from rag_core.optimization.contexts import Contexts
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


def _contexts(qa: pl.DataFrame) -> Contexts:
    return Contexts(reranked=_reranked(qa))


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
        _contexts(qa),
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
        adapter = PromptAdapter(_config(), holdout, _contexts(holdout), dict(DEFAULT_WEIGHTS), llm, len)
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
        adapter = PromptAdapter(_config(), qa, _contexts(qa), dict(DEFAULT_WEIGHTS), llm, len)
        batch = adapter.evaluate(qa["query_id"].to_list(), {"answer_prompt": "Answer: {query}"}, True)
        assert not stub.requests  # nothing is asked of a prompt that cannot carry the context
    assert batch.scores == [0.0] * 3
    records = adapter.make_reflective_dataset({}, batch, ["answer_prompt"])["answer_prompt"]
    assert "{context}" in records[0]["Feedback"]


def test_the_reflective_dataset_shows_what_went_wrong(tmp_path):
    qa = _qa(2)
    with OpenAIStub(Scripted(qa), by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="sk-test")
        adapter = PromptAdapter(_config(), qa, _contexts(qa), dict(DEFAULT_WEIGHTS), llm, len)
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
    with pytest.raises(
        SpecError, match=r"no config of this sweep uses rewrite_prompt \(retrieval.query_prompt"
    ):
        _sweep(tmp_path, {"reflection_model": REFLECTOR, "components": ["rewrite_prompt"]})
    with pytest.raises(
        SpecError, match=r"uses rerank_prompt \(rerank.prompt: read only with rerank.method llm"
    ):
        _sweep(tmp_path, {"reflection_model": REFLECTOR, "components": ["rerank_prompt"]})
    with pytest.raises(SpecError, match="unknown component"):
        _sweep(tmp_path, {"reflection_model": REFLECTOR, "components": ["summary_prompt"]})
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
    optimize(_config(), _spec(), qa, _contexts(qa), dict(DEFAULT_WEIGHTS), llm, len, run_dir=f"{folder}/gepa")


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
            _contexts(qa),
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
            config, spec, qa, _contexts(qa), dict(DEFAULT_WEIGHTS), llm, len, run_dir=str(tmp_path / "g")
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


# ---- the prompts before the answers: query transformation and LLM reranking -----------------------------

HINT = "Search for the tower's code: Kx, then its number, then q."
RANK = "Put first the passage whose tower code holds the question's number."


def _towers(n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(qa, chunks): question i asks for tower number i, whose passage names it only by its code Kx{i}q,
    so a keyword search for the question itself cannot tell the towers apart."""
    qa = pl.DataFrame(
        {
            "query_id": [f"q{i:02d}" for i in range(n)],
            "question": [f"Which city hosts tower number {i}?" for i in range(n)],
            "answers": [[CITIES[i % len(CITIES)]] for i in range(n)],
            "relevant_doc_ids": [[f"d{i:02d}"] for i in range(n)],
        }
    )
    chunks = pl.DataFrame(
        {
            "chunk_id": [f"d{i:02d}#0" for i in range(n)],
            "doc_id": [f"d{i:02d}" for i in range(n)],
            "title": [f"Tower {chr(65 + i)}" for i in range(n)],
            "text": [f"The tower Kx{i}q stands in {CITIES[i % len(CITIES)]}." for i in range(n)],
        }
    )
    return qa, chunks


class ScriptedTowers:
    """The query writer searches for the tower's code only when its prompt says so (else the question as it
    is); the reranker puts the passage with the question's code first only when its prompt says so (else it
    keeps the order); the generator answers the city of the first passage it is shown; the reflection
    model adds the hint of the component it is shown (HINT when no gold document was retrieved, RANK when
    the reranking dropped the gold one)."""

    def __call__(self, prompt: str, model: str):
        if model == "reflector":
            current = re.search(r"```\n(.*?)\n```", prompt, re.S).group(1)
            if "of the 1 kept, 0 of 1 gold" in prompt and RANK not in current:
                return 200, f"```\n{RANK}\n{current}\n```", 0.0
            if "## Retrieval\nof the 1 retrieved, 0 of 1 gold" in prompt and HINT not in current:
                return 200, f"```\n{HINT}\n{current}\n```", 0.0
            return 200, f"```\n{current}\n```", 0.0
        number = re.search(r"tower number (\d+)", prompt).group(1)
        if model == "writer":
            return (
                200,
                (f"Kx{number}q" if HINT in prompt else f"Which city hosts tower number {number}?"),
                0.0,
            )
        if model == "reranker":
            passages = re.findall(r"^\[(\d+)\] (.*)$", prompt, re.M)
            first = [p for p, text in passages if f"Kx{number}q" in text] if RANK in prompt else []
            return 200, ", ".join([*first, *(p for p, _ in passages if p not in first)]), 0.0
        city = re.search(r"stands in (\w+)", prompt)
        return 200, city.group(1) if city else "unknown", 0.0


def _tower_config(**sections) -> RagConfig:
    raw = _config().model_dump()
    raw["generation"].update(model="openai/generator")
    for name, update in sections.items():
        raw[name].update(update)
    return RagConfig.model_validate(raw)


def _search_store(tmp_path, chunks: pl.DataFrame):
    import numpy as np

    from resources.vector_stores.lancedb_store import LanceDBStore

    store = LanceDBStore(uri=str(tmp_path / "lance"))
    rows = [
        {"chunk_id": r["chunk_id"], "doc_id": r["doc_id"], "text": r["text"], "metadata": "{}"}
        for r in chunks.iter_rows(named=True)
    ]
    store.upsert("towers", rows, np.random.default_rng(0).random((chunks.height, 4), dtype=np.float32))
    return store


def _rerank(c, retrieved, qa, llm):
    from rag_core.retrieval.rerank import rerank

    return rerank(c, retrieved, qa, llm, chunk_vectors=dict, embed=None)


def _optimize_towers(tmp_path, config, component, contexts, qa):
    spec = OptimizeSpec(
        components=[component], reflection_model="openai/reflector", budget={"max_metric_calls": 60}
    )
    with OpenAIStub(ScriptedTowers(), by_model=True) as stub:
        llm = LLMClient(
            api_base=stub.api_base, api_key="sk-test", max_retries=0, cache_path=str(tmp_path / "c.sqlite")
        )
        result = optimize(
            config, spec, qa, contexts, dict(DEFAULT_WEIGHTS), llm, len, run_dir=str(tmp_path / "g")
        )
        asked = len(stub.requests)
        again = optimize(
            config, spec, qa, contexts, dict(DEFAULT_WEIGHTS), llm, len, run_dir=str(tmp_path / "g")
        )
        assert len(stub.requests) == asked and again.paid_calls == 0 and again.best == result.best
    return result


def test_the_query_rewrite_prompt_is_optimized_by_searching_again(tmp_path):
    """The query transformation prompt is evolved by running the config's retrieval (a real LanceDB
    keyword search) and reranking again with each candidate's prompt, then its answers."""
    from rag_core.optimization.contexts import Contexts
    from rag_core.planning.prompts import QUERY_PROMPTS
    from rag_core.retrieval.retrieve import retrieve

    qa, chunks = _towers(12)
    store = _search_store(tmp_path, chunks)
    config = _tower_config(retrieval={"query_transform": "rewrite", "query_model": "openai/writer"})
    assert config.retrieval.query_prompt is None and config.text("rewrite_prompt") == QUERY_PROMPTS["rewrite"]

    def search(c, questions, llm):
        return retrieve(c, questions, chunks, store, "towers", None, llm)

    contexts = Contexts("retrievals", retrieve=search, rerank=_rerank)
    result = _optimize_towers(tmp_path, config, "rewrite_prompt", contexts, qa)
    assert (
        result.improved
        and HINT in result.best["rewrite_prompt"]
        and "{query}" in result.best["rewrite_prompt"]
    )
    seed, best = result.candidates[0], result.candidates[result.best_index]
    assert seed.val_score < 0.5 < best.val_score
    optimized = config.with_texts(result.best)
    assert optimized.retrieval.key != config.retrieval.key and "-qp" in optimized.retrieval.key
    assert (optimized.chunking, optimized.embedding, optimized.index) == (
        config.chunking,
        config.embedding,
        config.index,
    )


def test_the_llm_rerank_prompt_is_optimized_on_the_configs_own_candidates(tmp_path):
    """The reranking prompt is evolved by reranking the config's retrieved candidates again with each
    candidate prompt; the reflection model is shown where the gold passage was and whether it was kept."""
    from rag_core.optimization.contexts import Contexts
    from rag_core.planning.prompts import RERANK_PROMPT

    qa, chunks = _towers(12)
    n = qa.height
    order = [[(i + j) % n for j in (1, 2, 0)] for i in range(n)]  # the gold passage third of three
    retrieved = pl.DataFrame(
        {
            "query_id": qa["query_id"],
            "chunk_ids": [[chunks["chunk_id"][j] for j in o] for o in order],
            "doc_ids": [[chunks["doc_id"][j] for j in o] for o in order],
            "scores": [[3.0, 2.0, 1.0]] * n,
            "titles": [[chunks["title"][j] for j in o] for o in order],
            "texts": [[chunks["text"][j] for j in o] for o in order],
            "latency_ms": [1.0] * n,
        }
    )
    config = _tower_config(rerank={"method": "llm", "model": "openai/reranker", "candidates": 3})
    assert config.text("rerank_prompt") == RERANK_PROMPT and "-rp" not in config.rerank.key
    contexts = Contexts("rerankings", retrieved=retrieved, rerank=_rerank)
    result = _optimize_towers(tmp_path, config, "rerank_prompt", contexts, qa)
    assert result.improved and RANK in result.best["rerank_prompt"]
    assert result.candidates[0].val_score < 0.5 < result.candidates[result.best_index].val_score
    optimized = config.with_texts(result.best)
    assert "-rp" in optimized.rerank.key and optimized.retrieval == config.retrieval


def test_an_unset_prompt_setting_keeps_every_fingerprint_and_key():
    """The query and rerank prompts became settings: unset (or set to the built-in text) they leave the
    retrievals' and rerankings' keys and fingerprints as they were, so no artifact or cached call is lost."""
    from rag_core.planning.prompts import QUERY_PROMPTS, RERANK_PROMPT
    from rag_core.planning.stages import stage

    c = _tower_config(
        retrieval={"query_transform": "hyde", "query_model": "openai/writer"},
        rerank={"method": "llm", "model": "openai/reranker"},
    )
    assert "query_prompt" not in stage("retrievals").own(c, None)
    assert "prompt" not in stage("rerankings").own(c, None)
    same = c.with_texts({"rewrite_prompt": QUERY_PROMPTS["hyde"], "rerank_prompt": RERANK_PROMPT})
    assert same == c
    other = c.with_texts(
        {"rewrite_prompt": "Describe {query}", "rerank_prompt": "{query}\n{passages}\nOrder:"}
    )
    assert stage("retrievals").own(other, None)["query_prompt"] == "Describe {query}"
    assert other.retrieval.key != c.retrieval.key and other.rerank.key != c.rerank.key
    with pytest.raises(ValueError, match=r"prompt must contain \{passages\}"):
        _tower_config(rerank={"method": "llm", "model": "m", "prompt": "Rank for {query}"})
    # a prompt the transformation does not use is dropped, not a new key
    plain = _tower_config(retrieval={"query_prompt": "Search {query}"}).retrieval.effective()
    assert plain.query_prompt is None


def test_a_rewrite_optimization_reads_the_index_and_feeds_the_optimized_retrievals(tmp_path):
    import dagster as dg

    from rag_assets.sweep_assets import stage_assets
    from rag_core.planning.plan import Plan
    from resources import build_resources

    raw = _raw(
        {"reflection_model": REFLECTOR, "components": ["rewrite_prompt", "answer_prompt"]},
        generation={"model": GENERATOR},
    )
    raw["retrieval"] = {"mode": "bm25", "top_k": 1, "query_transform": "rewrite", "query_model": GENERATOR}
    sweep = sweep_from_dict(raw, tmp_path / "opt.yaml")
    assert sweep.optimize.first_stage == "retrievals"
    (base,) = Plan.resolve(sweep).config_keys
    plan = Plan.resolve(sweep, optimized={base: {"rewrite_prompt": f"{HINT}\n{{query}}"}})
    (optimized,) = plan.optimized_from
    c, o = plan.config(base), plan.config(optimized)
    for shared in ("chunksets", "embeddings", "vector_index"):
        assert plan.key_of(o, shared) == plan.key_of(c, shared)
    assert plan.key_of(o, "retrievals") != plan.key_of(c, "retrievals")
    defs = dg.Definitions(assets=stage_assets(plan), resources=build_resources(str(tmp_path)))
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    optimization = dg.AssetKey(["opt", "prompt_optimizations"])
    assert dg.AssetKey(["opt", "vector_index"]) in graph.get(optimization).parent_keys
    assert dg.AssetKey(["opt", "retrievals"]) not in graph.get(optimization).parent_keys
    assert optimization in graph.get(dg.AssetKey(["opt", "retrievals"])).parent_keys
    assert optimization not in graph.get(dg.AssetKey(["opt", "answers"])).parent_keys  # via retrievals


def test_an_optimized_config_begins_its_own_work_where_its_prompts_first_differ(tmp_path):
    """GEPA may keep a component's seed text: an optimized config whose rerank prompt stayed the seed's
    shares the rerankings, and its answers (not the shared rerankings) follow the optimization. A pointer
    left by an earlier `optimize:` section with other components adds nothing."""
    import dagster as dg

    from rag_assets.prompt_optimization import identity
    from rag_assets.sweep_assets import stage_assets
    from rag_core.planning.plan import Plan
    from resources import build_resources

    raw = _raw(
        {"reflection_model": REFLECTOR, "components": ["rerank_prompt", "answer_prompt"]},
        generation={"model": GENERATOR},
    )
    raw["retrieval"] = {"mode": "bm25", "top_k": 1}
    raw["rerank"] = {"method": "llm", "model": GENERATOR, "candidates": 3}
    sweep = sweep_from_dict(raw, tmp_path / "opt.yaml")
    assert sweep.optimize.first_stage == "rerankings"
    (base,) = Plan.resolve(sweep).config_keys
    seed = Plan.resolve(sweep).config(base)
    assert "prompt" not in identity(Plan.resolve(sweep), base)["config"]["rerank"]  # unset: as before
    found = {"rerank_prompt": seed.text("rerank_prompt"), "answer_prompt": f"{INSTRUCTION}\n{DEFAULT_PROMPT}"}
    plan = Plan.resolve(sweep, optimized={base: found})
    (optimized,) = plan.optimized_from
    assert plan.key_of(plan.config(optimized), "rerankings") == plan.key_of(seed, "rerankings")
    assert plan.first_changed_stage(optimized) == "answers"
    defs = dg.Definitions(assets=stage_assets(plan), resources=build_resources(str(tmp_path)))
    graph = defs.resolve_asset_graph()
    optimization = dg.AssetKey(["opt", "prompt_optimizations"])
    assert dg.AssetKey(["opt", "retrievals"]) in graph.get(optimization).parent_keys
    assert optimization in graph.get(dg.AssetKey(["opt", "answers"])).parent_keys
    assert optimization not in graph.get(dg.AssetKey(["opt", "rerankings"])).parent_keys
    stale = Plan.resolve(sweep, optimized={base: {"rewrite_prompt": "Search {query}"}})
    assert not stale.optimized_from


def test_a_custom_query_prompt_serves_every_transformation():
    """multi_query's `{n}` is filled when the prompt has it and optional when not; a brace that is not a
    placeholder (a JSON example) stays as it is; the built-in prompts come out as str.format made them."""
    from rag_core.planning.prompts import QUERY_PROMPTS, RERANK_PROMPT
    from rag_core.retrieval.query_transform import prompt_for
    from rag_core.retrieval.rerank import llm_rerank_prompt

    assert prompt_for("List {n} searches for {query}", "Who?", 4) == "List 4 searches for Who?"
    assert prompt_for("Searches for {query}", "Who?", 4) == "Searches for Who?"
    assert prompt_for('Reply {"q": "..."} for {query}', "{passages}?") == 'Reply {"q": "..."} for {passages}?'
    for transform, template in QUERY_PROMPTS.items():
        assert prompt_for(template, "Who?", 3) == template.format(query="Who?", n=3), transform
    assert llm_rerank_prompt("Who?", ["a", "b"]) == RERANK_PROMPT.format(
        query="Who?", passages="[1] a\n\n[2] b"
    )
    hyde = _tower_config(
        retrieval={"query_transform": "hyde", "query_model": "m", "query_prompt": "Imagine {query}"}
    )
    assert (
        hyde.retrieval.query_template == "Imagine {query}"
        and hyde.text("rewrite_prompt") == "Imagine {query}"
    )
    with pytest.raises(ValueError, match="does not use rewrite_prompt"):
        _tower_config().text("rewrite_prompt")

"""`rag-sweep plan` finds the prompts past their model's context before the run (rag_core/planning/context_fit.py):
each generator's and the judge's longest prompt, built as the run builds it, against what the model reads."""

from __future__ import annotations

import polars as pl

from rag_assets.orchestration.plans import load_plan
from rag_core.planning.context_fit import TEMPLATE_TOKENS, past_context
from tests.conftest import write_sweep

CHUNKS = pl.DataFrame(
    {
        "title": ["A", "B", "C"],
        "text": [" ".join(["word"] * n) for n in (300, 200, 10)],
    }
)


def words(model: str, text: str) -> int:  # a tokenizer of one token a word
    return len(text.split())


def _plan(tmp_path, slice_data, **sections):
    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        **sections,
    )
    return load_plan(str(spec), "lancedb", tmp_path / "data")


def test_a_generators_longest_prompt_is_its_top_k_longest_chunks_and_the_longest_question(
    tmp_path, slice_data
):
    plan = _plan(
        tmp_path,
        slice_data,
        retrieval={"mode": "bm25", "top_k": [1, 2]},
        generation=[{"model": "extractive"}, {"model": "openai/small", "max_tokens": 20}],
    )
    questions = ["short?", "a much longer question with nine words in it?"]
    found = past_context(plan, lambda key: CHUNKS, questions, words, lambda model: 400)
    # top_k 2: 300 + 200 words of chunks, the question, the template and the reply: past 400; top_k 1: not
    assert len(found) == 1 and found[0].stage == "answers" and found[0].model == "openai/small"
    (key,) = found[0].configs
    assert plan.config(key).retrieval.top_k == 2 and plan.config(key).generation.model == "openai/small"
    assert 500 + 9 + TEMPLATE_TOKENS + 20 < found[0].tokens < 600 and found[0].window == 400
    # a context that reads more, or whose size nobody knows, warns of nothing
    assert past_context(plan, lambda key: CHUNKS, questions, words, lambda model: 4000) == []
    assert past_context(plan, lambda key: CHUNKS, questions, words, lambda model: None) == []


def test_a_context_budget_fits_the_prompt_and_the_judge_is_held_to_its_own_model(tmp_path, slice_data):
    plan = _plan(
        tmp_path,
        slice_data,
        retrieval={"mode": "bm25", "top_k": 2},
        generation={"model": "openai/small", "max_tokens": 20, "context_max_tokens": 250},
        evaluation={"judge_model": "openai/judge"},
    )
    windows = {"openai/small": 400, "openai/judge": 300}
    found = past_context(plan, lambda key: CHUNKS, ["why?"], words, windows.get)
    # the budget cuts the context to 250 words: the generator fits; the judge reads 300 and is sent more
    assert [(p.stage, p.model) for p in found] == [("evaluations", "openai/judge")]
    assert found[0].tokens > 300

"""A sweep's inputs checked before any work, as a run would load them: an extra it needs that is not
installed, a missing or bad corpus or QA file (errors name the sweep file's field, then the file, row and
field), a setting the QA set's size rules out. Dagster-free: `rag-sweep validate` pays no Dagster import."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from rag_core.common.extras import missing_for
from rag_core.data.datasets import load_corpus
from rag_core.decision.holdout import holdout_size
from rag_core.planning.inputs import load_sweep_qa, named_field
from rag_core.planning.plan import Plan
from rag_core.planning.spec import SpecError, check_optimize_budget


def require_extras(plan: Plan) -> None:
    """A sweep that names a component of an extra not installed here (a store, the cross-encoder, a
    segmenting language, $RAG_EXECUTOR=celery ...): one line naming it and the command that installs it,
    before any work."""
    if line := missing_for(plan.configs, plan.sweep.language, dict(os.environ)):
        raise SpecError(f"{plan.sweep.path}: {line}")


def load_data(sweep) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Load the corpus and QA set as a run would (cheap next to a run): a missing or bad file is an error
    naming its field of the sweep file, then the file, row and field; so is a setting the QA set's size
    rules out (a prompt optimization's budget). The QA set is None when the run is to generate it."""
    with named_field(sweep, "data.corpus"):
        corpus = load_corpus(sweep.corpus_path)
    if sweep.qa_generation is not None and not sweep.qa_path.exists():  # the run writes it first
        n = min(sweep.qa_generation.questions, sweep.max_queries or sweep.qa_generation.questions)
        check_optimize_budget(sweep, selection_questions(sweep, n), f"the QA set to generate ({n} questions)")
        return corpus, None
    with named_field(sweep, "data.qa"):
        qa = load_sweep_qa(sweep, corpus)
    check_optimize_budget(sweep, selection_questions(sweep, qa.height), f"the QA set ({qa.height} questions)")
    return corpus, qa


def selection_questions(sweep, questions: int) -> int:
    """Of a QA set's questions, those the selection sees (the configs are chosen, prompts optimized on)."""
    return questions - holdout_size(questions, sweep.decision.holdout)


def qa_generation_line(settings, corpus, out: Path) -> str:
    """What generating the set will ask of the LLM, before any call (validate, plan, generate-qa)."""
    from rag_core.data.qa.generation import estimate_calls
    from resources.llm import price  # litellm's price table: only where a QA set is to be generated

    calls = estimate_calls(settings)
    mean_chars = int(corpus["text"].str.len_chars().mean() or 0)
    prompt_tokens = min(mean_chars, settings.passage_chars) // 4 + 150
    each = price(settings.model, prompt_tokens, 40)
    cost = (
        f"${each * calls:.4f}" if each is not None else f"unknown (litellm has no price for {settings.model})"
    )
    types = ", ".join(f"{n} {t}" for t, n in settings.targets().items())
    cap = f"; capped at {settings.max_calls}" if settings.max_calls else ""
    return (
        f"QA set {out}: {settings.questions} questions ({types}) to generate from {corpus.height} documents "
        f"with {settings.model}, seed {settings.seed}\n"
        f"  estimated: ~{calls} LLM calls (more when questions are rejected{cap}), "
        f"~{calls * (prompt_tokens + 40):,} tokens, cost {cost}"
    )

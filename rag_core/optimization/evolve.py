"""One prompt optimization: GEPA (the `gepa` library's reflective evolution, arXiv:2507.19457) over a
config's text components, on the selection split's questions only, within a budget of scored questions
and of money; a killed run resumes from GEPA's saved state in `run_dir`, and with the project's call cache
nothing already paid for is paid again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from rag_core.common.completion import Completer, Completion
from rag_core.common.fingerprint import fingerprint
from rag_core.optimization.adapter import PromptAdapter, seed_candidate
from rag_core.optimization.contexts import Contexts
from rag_core.planning.spec import MIN_OPTIMIZE_QUESTIONS, OptimizeSpec, RagConfig, split_sizes


class OptimizationError(ValueError):
    """An optimization that cannot start (too few questions, a component the config does not have)."""


class Metered:
    """A Completer that counts what its calls cost: those the provider answered (paid) apart from those
    the call cache answered (free). The budget's `max_cost_usd` reads it."""

    def __init__(self, llm: Completer):
        self.llm, self.paid, self.cached, self.failed, self.cost_usd = llm, 0, 0, 0, 0.0
        self._lock = threading.Lock()

    @property
    def max_concurrency(self) -> int:
        return self.llm.max_concurrency

    def complete(
        self, model: str, prompt: str, temperature: float = 0.0, max_tokens: int = 128, **kw
    ) -> Completion:
        out = self.llm.complete(model, prompt, temperature, max_tokens, **kw)
        with self._lock:
            if out.cached:
                self.cached += 1
            else:
                self.paid += 1
                self.cost_usd += out.cost_usd or 0.0
            self.failed += bool(out.error)
        return out


class ReflectionFailed(RuntimeError):
    """The reflection model's call failed: GEPA skips that proposal and goes on."""


def reflection_lm(llm: Completer, model: str, max_tokens: int = 2048) -> Callable[[str], str]:
    """The reflection model as GEPA calls it (a prompt in, a reply out), through the project's client."""

    def ask(prompt: str) -> str:
        out = llm.complete(model, prompt, 0.0, max_tokens)
        if out.error:
            raise ReflectionFailed(out.error)
        return out.text

    return ask


def train_val_split(query_ids: list[str], val_share: float, seed: int) -> tuple[list[str], list[str]]:
    """(train, validation) question ids: a seeded order of each id alone (any row order splits the same),
    at least one question on each side (rag_core/planning/spec.py `split_sizes`)."""
    if len(query_ids) < MIN_OPTIMIZE_QUESTIONS:
        raise OptimizationError(
            f"prompt optimization needs at least {MIN_OPTIMIZE_QUESTIONS} selection questions (a train and a "
            f"validation one); it has {len(query_ids)}"
        )
    order = sorted(query_ids, key=lambda q: (fingerprint("gepa-split", seed, q), q))
    _, n_val = split_sizes(len(order), val_share)
    return sorted(order[n_val:]), sorted(order[:n_val])


@dataclass
class Candidate:
    index: int
    prompts: dict[str, str]
    val_score: float  # mean per-question overall score on the validation questions
    parents: list[int]
    found_after_metric_calls: int
    val_scores: dict[str, float] = field(default_factory=dict)  # query id -> score


@dataclass
class Optimized:
    """What an optimization found: every accepted candidate (the seed is candidate 0) and the best."""

    seed: dict[str, str]
    best: dict[str, str]
    best_index: int
    candidates: list[Candidate]
    train_ids: list[str]
    val_ids: list[str]
    metric_calls: int  # questions answered and scored, as GEPA counts them
    paid_calls: int  # LLM calls the provider answered in this process (the cache answered the others)
    cached_calls: int
    cost_usd: float
    stopped_by: str  # max_metric_calls, max_cost_usd, or done (nothing left to try)

    @property
    def improved(self) -> bool:
        return self.best_index != 0


class _CostStopper:
    def __init__(self, metered: Metered, limit: float | None):
        self.metered, self.limit = metered, limit

    def __call__(self, state) -> bool:
        return self.limit is not None and self.metered.cost_usd >= self.limit


class _Log:
    """GEPA's log lines to a callback (GEPA would otherwise redirect stdout and stderr to its run_dir)."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def log(self, message: str) -> None:
        self.say(message)


def optimize(
    config: RagConfig,
    spec: OptimizeSpec,
    qa: pl.DataFrame,
    contexts: Contexts,
    weights: dict[str, float],
    llm: Completer,
    count_tokens: Callable[[str], int],
    run_dir: str,
    parents: Callable[[], tuple[pl.DataFrame, pl.DataFrame]] = lambda: (None, None),
    say: Callable[[str], None] = lambda message: None,
    callbacks: list | None = None,
    language: str | None = None,
) -> Optimized:
    """Evolve `spec.components` of `config` on `qa` (the selection split: the caller never passes the
    holdout), running the config's stages from the first one an optimized component changes (`contexts`:
    the config's rerankings, else its retrieval and reranking run again), then its answers. `llm`: the
    project's client (call cache and ledger, rate limit); `run_dir`: GEPA's state, from which a killed run
    resumes."""
    import gepa

    ids = qa["query_id"].to_list()
    train, val = train_val_split(ids, spec.val_share, spec.seed)
    metered = Metered(llm)
    adapter = PromptAdapter(config, qa, contexts, weights, metered, count_tokens, parents, language)
    seed = seed_candidate(config, spec.components)
    cost = _CostStopper(metered, spec.budget.max_cost_usd)
    # GEPA checks its budget between iterations, and an iteration scores two minibatches and, when its
    # proposal is accepted, the validation questions: keep room for one, so the budget is never passed.
    # GEPA starts an iteration while its count is below the limit: the seed's validation leaves it at
    # len(val), so at the smallest budget (min_metric_calls) the limit must be len(val) + 1, not len(val)
    # (which ran no iteration at all), and an iteration begun at limit - 1 still ends within the budget.
    # A run refuses a smaller budget before any step (check_optimize_budget); this guards other callers
    minibatch = min(spec.minibatch, len(train))
    limit = spec.budget.max_metric_calls - (2 * minibatch + len(val)) + 1
    if spec.budget.max_metric_calls < spec.min_metric_calls(len(ids)):
        raise OptimizationError(
            f"optimize.budget.max_metric_calls {spec.budget.max_metric_calls} cannot hold the seed's "
            f"validation ({len(val)} questions) and one iteration: give at least {spec.min_metric_calls(len(ids))}"
        )
    result = gepa.optimize(
        seed_candidate=seed,
        trainset=train,
        valset=val,
        adapter=adapter,
        reflection_lm=reflection_lm(metered, spec.reflection_model),
        max_metric_calls=limit,
        stop_callbacks=[cost],
        reflection_minibatch_size=minibatch,
        run_dir=run_dir,
        logger=_Log(say),
        callbacks=callbacks,
        seed=spec.seed,
        display_progress_bar=False,
        raise_on_exception=True,  # a failed question scores 0 inside evaluate; anything else is a bug
    )
    candidates = [
        Candidate(
            index=i,
            prompts=dict(prompts),
            val_score=float(result.val_aggregate_scores[i]),
            parents=[p for p in result.parents[i] if p is not None],
            found_after_metric_calls=int(result.discovery_eval_counts[i]),
            val_scores={val[int(k)]: float(v) for k, v in result.val_subscores[i].items()},
        )
        for i, prompts in enumerate(result.candidates)
    ]
    if result.total_metric_calls >= limit:
        stopped = "max_metric_calls"
    elif cost(None):
        stopped = "max_cost_usd"
    else:
        stopped = "done"
    return Optimized(
        seed=seed,
        best=dict(result.best_candidate),
        best_index=int(result.best_idx),
        candidates=candidates,
        train_ids=train,
        val_ids=val,
        metric_calls=int(result.total_metric_calls),
        paid_calls=metered.paid,
        cached_calls=metered.cached,
        cost_usd=metered.cost_usd,
        stopped_by=stopped,
    )

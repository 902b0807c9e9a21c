"""A sweep file's sweep-wide sections, each read as written (no expansion): `data`, `evaluation`,
`decision`, `gate`, `search`, `optimize`, and the default weights. rag_core/planning/spec.py reads the file
into them and the configs."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from rag_core.planning.config_settings import (
    COMPONENT_STAGES,
    OPTIMIZABLE_STAGES,
    PROMPT_COMPONENTS,
    Strict,
)

# Default weights: 0.3 on retrieval, 0.7 on generation (the `weights` setting: docs/reference/settings.md).
DEFAULT_WEIGHTS = {
    "recall_at_k": 0.15,
    "ndcg_at_k": 0.15,
    "exact_match": 0.2,
    "token_f1": 0.35,
    "faithfulness": 0.15,
}


class DataSpec(Strict):
    corpus: str
    """The corpus: Parquet or JSONL with `doc_id`, `text` (`title`, `metadata` optional), a folder of
    `.txt`/`.md` files, or a BEIR dataset's folder; relative to the sweep file."""
    qa: str
    """The QA set: Parquet or JSONL with `query_id`, `question`, `answers`, `relevant_doc_ids`, or a BEIR,
    Ragas or MLflow evaluation dataset; relative to the sweep file."""
    max_queries: int | None = Field(default=None, gt=0)
    """Use only the first N questions."""
    # the QA set's language (en, zh, de-CH): answers are normalized as MLQA's script does for it
    # (rag_core/metrics/languages.py); `auto`: each question's is detected; unset: SQuAD's English
    # normalization. A `language` column per question overrides it.
    language: str | None = None
    """The QA set's language, a tag (`en`, `zh`, `de-CH`) or `auto`: its answers are normalized as MLQA's
    evaluation does for it (Japanese and Thai cut into words by a segmenter, Korean per character; see the
    metrics page, Other languages); a `language` column per question wins. `auto`: each question without
    one gets the language detected from its gold documents' text, else its answers', else the question's
    (py3langid, offline, deterministic; below 0.3 confidence a question is scored without a language).
    Unset: SQuAD v1.1's English normalization."""

    @field_validator("language")
    @classmethod
    def _language_tag(cls, v: str | None) -> str | None:
        from rag_core.data.datasets import language_code

        return None if v is None else "auto" if v.lower() == "auto" else language_code(v)


class EvaluationSpec(Strict):
    judge_model: str | None = None
    """A litellm model that adds `faithfulness_judge`: it grades each answer's support in its context
    (versioned prompt `faithfulness-v1`, parsed numeric verdict; failures counted in `n_judge_failures`)."""
    # people's labels of answers (question, answer, context, supported; rag_core/metrics/judge_agreement.py):
    # the judge is measured against them with each leaderboard, and a judge whose Cohen's kappa is below
    # min_kappa (or undefined) is reported but not weighted into the overall score
    judge_labels: str | None = None
    """People's labels of answers (`question`, `answer`, `context`, `supported`; needs `judge_model`): each
    leaderboard measures the judge against them, and a judge whose Cohen's kappa is below `min_kappa` (or
    undefined) is reported but not weighted."""
    # a file holding the judge's prompt ({question}, {answer}, {context}), e.g. the aligned prompt
    # `rag-sweep calibrate-judge --align --aligned-out` writes; None: the built-in one (rag_core/metrics/judge.py)
    judge_prompt: str | None = None
    """A file holding the judge's prompt instead of `faithfulness-v1` (needs `judge_model`), e.g. the
    aligned one `calibrate-judge --align --aligned-out` writes; its content is in the evaluations'
    fingerprint."""
    min_kappa: float = Field(default=0.6, ge=-1.0, le=1.0)
    """The kappa on `judge_labels` a judge needs for `faithfulness_judge` to be weighted into the overall
    score."""
    judge_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    """A judge score at or above it counts as "supported"."""
    # answers per question of a generator with temperature > 0: a question's scores are their mean
    samples: int = Field(default=1, ge=1, le=50)
    """Answers per question of a generator with temperature > 0 (each its own call-cache entry): a
    question's metrics are the mean of its samples, and the evaluation splits the score's variance between
    questions and within them."""


def metric_values(v: dict[str, float], what: str) -> dict[str, float]:
    """A mapping of metric -> number (weights, floors): installed weightable metrics and finite numbers."""
    from rag_core.metrics.registry import METRICS, weightable_metrics

    allowed = weightable_metrics()
    unknown = sorted(set(v) - set(METRICS.names()))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose from {allowed}")
    other = sorted(set(v) - set(allowed))
    if other:
        raise ValueError(
            f"{what}: metric(s) {other} are reported only (not a score in [0, 1], higher better)"
        )
    bad = sorted(k for k, x in v.items() if not math.isfinite(x))
    if bad:
        raise ValueError(f"{what} must be finite numbers (not nan or inf): {bad}")
    return v


class DecisionSpec(Strict):
    """What the team can ship: limits a recommended config must meet, and which of the top tier to prefer."""

    max_p95_latency_ms: float | None = Field(default=None, gt=0)
    """The recommended config's p95 of retrieval + generation time per query may not exceed it."""
    max_cost_per_1k_queries: float | None = Field(default=None, ge=0)
    """The recommended config's cost per 1,000 queries in USD (litellm's prices; 0 for local models) may
    not exceed it."""
    min: dict[str, float] = Field(default_factory=dict)
    """Metric floors the recommended config must meet, e.g. `{recall_at_k: 0.8}`."""
    prefer: Literal["cheapest", "fastest", "best"] = "cheapest"
    """Which config of the best qualifying tier to recommend: `cheapest`, `fastest` or `best` (then the
    other of cheapest/fastest)."""
    alpha: float = Field(default=0.05, gt=0, lt=1)
    """Family-wise error rate of the tier tests (Holm)."""
    # the share of the QA set set aside before anything is chosen, on which the finalists are confirmed
    # (rag_core/decision/holdout.py); 0 turns it off. The split is seeded: the same on every run.
    holdout: float = Field(default=0.3, ge=0, lt=1)
    """The share of questions set aside before anything is chosen, on which the finalists are confirmed; 0
    turns it off."""
    holdout_seed: int = 0
    """The seed of the holdout split (the same split on every run)."""

    @field_validator("min")
    @classmethod
    def _known_metrics(cls, v: dict[str, float]) -> dict[str, float]:
        return metric_values(v, "metric floors")


class GateSpec(Strict):
    """`rag-sweep gate` (rag_core/decision/gate.py): a candidate passes when a paired one-sided test shows
    it not worse than the baseline by `margin` or more in overall score (and each metric of
    `metric_margins` by its own); with `equivalence`, when it shows the difference within ±margin."""

    margin: float = Field(default=0.02, gt=0, lt=1)
    """`rag-sweep gate`: how far below the baseline's overall score a candidate may be and still pass."""
    metric_margins: dict[str, float] = Field(default_factory=dict)
    """Metrics tested against margins of their own too, e.g. `{recall_at_k: 0.02}`."""
    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    """Family-wise error rate (Holm over the candidates)."""
    power: float = Field(default=0.8, gt=0, lt=1)
    """The power of the test whose size an inconclusive verdict reports."""
    equivalence: bool = False
    """Two one-sided tests: pass only when shown within ±margin."""

    @field_validator("metric_margins")
    @classmethod
    def _known_metrics(cls, v: dict[str, float]) -> dict[str, float]:
        metric_values(v, "metric margins")
        if bad := sorted(k for k, x in v.items() if not 0 < x < 1):
            raise ValueError(f"metric margins must be between 0 and 1: {bad}")
        return v


class SearchBudget(Strict):
    """Where an adaptive search stops (it keeps what it found so far). max_configs also caps grid/random."""

    max_configs: int | None = Field(default=None, gt=0)
    """grid: the first N configs; random: N sampled with `search.seed`; bayesian: N configs evaluated by
    `rag-sweep run`; halving: N sampled configs to start with."""
    max_index_builds: int | None = Field(default=None, gt=0)
    """cost_aware: corpora embedded (index builds) the search may pay for; never passed."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """bayesian, halving, cost_aware: stop once the search's LLM calls cost this much (litellm's prices)."""
    max_llm_calls: int | None = Field(default=None, gt=0)
    """bayesian, halving, cost_aware: stop once the search has paid for this many LLM calls (answers from
    the call cache are free)."""

    def in_cost_units(self):
        """The caps a strategy that weighs costs keeps to (rag_core/search/cost.py)."""
        from rag_core.search.cost import CostBudget

        return CostBudget(
            index_builds=self.max_index_builds, llm_calls=self.max_llm_calls, usd=self.max_cost_usd
        )


class SearchSpec(Strict):
    """grid/random: the configs are chosen on load (the first `budget.max_configs`, or a seeded sample).
    bayesian: the plan holds every config; `rag-sweep run` evaluates `max_configs` of them, one at a time,
    chosen by Optuna's TPE from the results so far, preferring (among `pool` open suggestions) the one
    that reuses an existing index (rag_core/search). halving: every config answers `start_questions`
    questions; a paired test drops those worse than the leader, the rest answer `growth` times more.
    cost_aware: like bayesian, one config at a time, the one with the most expected improvement per unit of
    the cost it adds (index builds, LLM calls, USD, given what is built), never past budget.max_index_builds,
    max_llm_calls or max_cost_usd (rag_core/search/cost_aware.py)."""

    strategy: str = "grid"
    """How configs are chosen: `grid`, `random`, `bayesian` (Optuna's TPE), `halving` (successive halving
    over questions), `cost_aware` (expected improvement per unit of new cost), or an installed plug-in's."""
    budget: SearchBudget = Field(default_factory=SearchBudget)
    """Where a search stops (it keeps what it found so far)."""
    seed: int = 0
    """The seed of random sampling and of the TPE sampler."""
    pool: int = Field(default=4, ge=1, le=32)
    """bayesian: open TPE suggestions to choose the cheapest from (1: plain TPE)."""
    # bayesian: what TPE optimizes; several make it multi-objective (lower latency and cost are better)
    objectives: list[Literal["overall_score", "p95_latency_ms", "cost_per_1k_queries"]] = Field(
        default_factory=lambda: ["overall_score"], min_length=1
    )
    """bayesian: what TPE optimizes; several make it multi-objective (latency and cost minimized)."""
    start_questions: int = Field(default=10, ge=2)
    """halving: the first rung's questions."""
    growth: float = Field(default=2.0, gt=1)
    """halving: the factor each rung's questions grow by."""

    @field_validator("strategy")
    @classmethod
    def _strategy_installed(cls, v: str) -> str:
        from rag_core.search.strategies import STRATEGIES

        STRATEGIES.get(v)  # UnknownComponent names the installed strategies
        return v

    @model_validator(mode="after")
    def _budget_in_builds_kept(self) -> SearchSpec:
        import inspect

        from rag_core.search.strategies import STRATEGIES

        factory = STRATEGIES.get(self.strategy).factory
        if self.budget.max_index_builds is not None and (
            factory is None or "budget" not in inspect.signature(factory).parameters
        ):
            raise ValueError(
                f"budget.max_index_builds: search.strategy {self.strategy!r} cannot keep to a budget in index "
                "builds (cost_aware does)"
            )
        return self

    @property
    def how(self) -> str:
        """upfront (grid, random: chosen on load), sequential (bayesian, a plug-in's) or halving."""
        from rag_core.search.strategies import STRATEGIES

        return STRATEGIES.get(self.strategy).how

    @property
    def adaptive(self) -> bool:
        """Whether `rag-sweep run` chooses what to evaluate as it goes (the plan holds the whole space)."""
        return self.how != "upfront"

    @property
    def sequential(self) -> bool:
        """One config at a time, each chosen from the results so far (bayesian, a plug-in's strategy)."""
        return self.how == "sequential"


MIN_OPTIMIZE_QUESTIONS = 2  # selection questions a prompt optimization needs: a train and a validation one


def split_sizes(questions: int, val_share: float) -> tuple[int, int]:
    """(train, validation) sizes of GEPA's split of `questions` selection questions: at least one question
    on each side (rag_core/optimization/evolve.py `train_val_split`)."""
    val = min(max(round(val_share * questions), 1), questions - 1)
    return questions - val, val


class OptimizeBudget(Strict):
    """Where a prompt optimization stops, keeping the best prompts found so far. GEPA checks both between
    its iterations: the calls are kept within max_metric_calls (room for one iteration is kept), while the
    spend may pass max_cost_usd by one iteration's calls."""

    max_metric_calls: int = Field(default=300, gt=0)
    """Questions answered and scored, the seed's included."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """The provider's price of the calls the optimization paid for (may be passed by one iteration's
    calls)."""


class OptimizeSpec(Strict):
    """Prompt optimization (GEPA, reflective prompt evolution): the `components` of each config in
    `configs` evolve on the selection split's questions (train and validation, never the holdout); the best
    prompts become a new config, evaluated like every other."""

    components: list[str] = Field(default_factory=lambda: ["answer_prompt"], min_length=1)
    """The text components GEPA evolves: `answer_prompt`, `compress_prompt`, `rerank_prompt`,
    `rewrite_prompt`, `sufficiency_prompt`, `refine_prompt`; a component no config uses is an error."""
    reflection_model: str = Field(min_length=1)
    """A litellm model that reads failed answers and proposes new prompts."""
    # which configs start an optimization: the recommendation among the sweep's own configs, its top tier,
    # or config keys / labels
    configs: Literal["recommended", "top_tier"] | list[str] = "recommended"
    """The configs an optimization starts from, among the sweep's own: `recommended`, `top_tier`, or a list
    of config keys or labels."""
    budget: OptimizeBudget = Field(default_factory=OptimizeBudget)
    """Where an optimization stops, keeping the best prompts found so far."""
    val_share: float = Field(default=0.5, gt=0, lt=1)
    """The share of the selection questions GEPA validates on."""
    minibatch: int = Field(default=3, ge=1, le=50)
    """Questions a proposal is tried on before validation."""
    seed: int = 0
    """The seed of GEPA's split and sampling."""

    @field_validator("components")
    @classmethod
    def _known_components(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in PROMPT_COMPONENTS]
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; choose from {sorted(PROMPT_COMPONENTS)}")
        if len(set(v)) != len(v):
            raise ValueError("a component is listed twice")
        return v

    @field_validator("configs")
    @classmethod
    def _some_configs(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("an empty list optimizes nothing: name config keys, 'recommended' or 'top_tier'")
        return v

    def split_sizes(self, questions: int) -> tuple[int, int]:
        return split_sizes(questions, self.val_share)

    def min_metric_calls(self, questions: int) -> int:
        """The smallest budget.max_metric_calls an optimization on `questions` selection questions runs
        with: GEPA scores the seed on the validation questions, then checks its budget between iterations,
        so room for one iteration is kept: two minibatches and, when its proposal is accepted, the
        validation questions again."""
        train, val = self.split_sizes(questions)
        return 2 * val + 2 * min(self.minibatch, train)

    @property
    def first_stage(self) -> str:
        """The earliest stage an optimized component changes: an optimization reruns the config's stages from
        there on each question it scores, and an optimized config shares every partition before it."""
        return min((COMPONENT_STAGES[c] for c in self.components), key=OPTIMIZABLE_STAGES.index)

    @property
    def rerun_stages(self) -> tuple[str, ...]:
        """The stages an optimization runs again on each question it scores: the first one on."""
        return OPTIMIZABLE_STAGES[OPTIMIZABLE_STAGES.index(self.first_stage) :]

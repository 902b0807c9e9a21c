"""Adaptive search over a sweep's plan: the plan holds every config as partitions, and the strategy
(rag_core/search) decides which configs to materialize, learning from each evaluation. Each chosen config is
an ordinary set of partitions with its artifacts and MLflow run; partitions another config already built are
reused.

bayesian: `run_search` (Optuna's TPE, reuse-aware). halving: `run_halving` (successive halving over
questions): a rung materializes a config's partitions in a run tagged `rag/questions=N`, whose stages see
the QA set's first N questions (their artifacts get their own fingerprints); a question a config already
answered is answered from the LLM call cache when its set grows, never paid for twice.

`SearchController` drives either loop without holding it in a process: the search's state (its id, start,
budget) is a file in the data dir, and each `advance()` replays the loop from the start against what is
complete, returning the steps it needs next (the frontier) or the final report. The CLI materializes the
frontier in process; on a deployment a sensor requests it as ordinary runs (sensors/search.py). The loops
are deterministic given the evaluations, so a replay retraces every decision and never evaluates a config
twice; a search restarted after its process or the daemon died continues where it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import polars as pl

from rag_assets.orchestration.todo import Complete, completed, input_fingerprints
from rag_core.metrics import overall_score
from rag_core.planning.bill import CHARS_PER_TOKEN, cost_model
from rag_core.planning.plan import Plan
from rag_core.planning.spec import RagConfig
from rag_core.planning.stages import CONFIG_STAGE, PARTITIONED, stage
from rag_core.search import CostModel, Halving, Space, make
from rag_core.search.halving import question_scores
from rag_core.search.strategies import STRATEGIES
from resources.artifacts import ArtifactRef
from resources.llm_cache import open_cache
from resources.storage import atomic_write_bytes, data_root

# The stages whose settings make a config; the first three decide the index (the expensive part).
DIMENSIONS = ("chunksets", "embeddings", "vector_index", "retrievals", "rerankings", "answers")
EXPENSIVE = ("chunksets", "embeddings", "vector_index")


SEARCH_TAG = "rag/search"  # the search (its id) that requested a run
# the step a search's run materializes: JSON [stage, key, questions]; a batch's: a list of those
STEP_TAG = "rag/step"
RungStep = tuple[str, str | None, int | None]  # (stage, partition, halving rung: its questions; None: all)


class Pending(Exception):  # noqa: N818 (a signal, not an error)
    """A replayed search reached steps that are not complete: what it needs next."""

    def __init__(self, steps: list[RungStep]):
        super().__init__(f"{len(steps)} step(s) to run")
        self.steps = steps


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


@contextlib.contextmanager
def rest_of_chain(plan: Plan, config: RagConfig, name: str, n: int | None):
    """A config's step of stage `name` that is not complete (Pending) needs the config's steps of every
    later stage too (they read it): Pending names them all, so that one run computes them in order (the
    search's chain) instead of a run per stage, each waiting for the one before."""
    try:
        yield
    except Pending as p:
        names = [s.name for s in PARTITIONED]
        later = [(s, plan.key_of(config, s), n) for s in names[names.index(name) + 1 :]]
        raise Pending(list(dict.fromkeys([*p.steps, *later]))) from None


def generation_usd(c: RagConfig) -> float:
    """A rough LLM price per query of a config's generator from litellm's table: its prompt (top_k
    passages of ~200 tokens) and a completion at max_tokens; 0 when extractive or unpriced. It only
    orders equally promising candidates, so rough is enough."""
    if c.generation.is_reader:
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
    # "max_configs", "max_cost_usd", "max_llm_calls", "max_index_builds", "space" (all evaluated), "halving"
    stopped_by: str
    dropped: dict[str, int] | None = None  # halving: config -> questions it answered when dropped


class Admission:
    """Which (config, rung) evaluations a search has begun: one begun goes on to the end, whatever it costs;
    a new one begins only while the LLM budget lasts. Kept in memory here; `SearchController` keeps it in
    the search's state, so a replay takes the same decisions as the run it replays."""

    def __init__(self, begun: list | None = None, on_begin: Callable[[], None] = lambda: None):
        self.begun, self.on_begin = begun if begun is not None else [], on_begin

    def check(self, plan: Plan, spent: Spent, key: str, n: int | None) -> str | None:
        """The budget that is used up, if the evaluation of `key` on `n` questions may not begin."""
        if [key, n] in self.begun:
            return None
        if reason := over_budget(plan, spent):
            return reason
        self.begun.append([key, n])
        self.on_begin()
        return None


DIRECTIONS = {"overall_score": "maximize", "p95_latency_ms": "minimize", "cost_per_1k_queries": "minimize"}


def objective_values(summary: dict, weights: dict[str, float], objectives: list[str]) -> tuple[float, ...]:
    """A config's objectives from its evaluation summary (p95 latency: retrieval + generation p95s)."""
    values = {
        "overall_score": overall_score(summary, weights),
        "p95_latency_ms": summary["retrieval_p95_ms"] + summary["generation_p95_ms"],
        "cost_per_1k_queries": summary["cost_usd"] / max(summary["n_queries"], 1) * 1000,
    }
    return tuple(values[o] for o in objectives)


COST_UNITS = {"index_builds": "max_index_builds", "llm_calls": "max_llm_calls", "usd": "max_cost_usd"}


def search_costs(plan: Plan, keys: dict[tuple, str], built: set, n_queries: int) -> CostModel:
    """The plan's cost model (rag_core/planning/bill.py, as `rag-sweep plan` bills it) keyed by candidate,
    `built`: the (stage, key) steps that existed when the search began."""
    from resources.llm import price

    # a chunk's tokens before its chunks exist: its size (characters / 4), as the bill assumes for a prompt
    tokens = {}
    for c in plan.configs:
        ch = c.chunking
        tokens[plan.key_of(c, "chunksets")] = ch.chunk_size / (1 if ch.unit == "tokens" else CHARS_PER_TOKEN)
    model = cost_model(plan, built, n_queries, tokens, price)
    return CostModel({ck: model.steps[k] for ck, k in keys.items()}, set(built))


def run_search(
    plan: Plan,
    todo: list[tuple[str, str | None]],
    materialize: Callable[[str, str], None],
    summary_of: Callable[[str], dict | None],
    spent: Spent,
    progress: Callable[[str], None] = lambda _: None,
    resume: bool = True,
    admission: Admission | None = None,
    known: list[str] | None = None,
    built: set | None = None,
    n_queries: int = 1,
) -> SearchReport:
    """Evaluate up to `budget.max_configs` configs chosen by the sweep's strategy. `todo` holds the (stage,
    key) steps that are not complete yet (a chosen config's evaluation always runs); `summary_of(config
    key)` is that config's evaluation summary, or None when it has none that these inputs give; `spent`
    reads the LLM call ledger; `admission`: which configs were let past the LLM budget already (a replay:
    no budget is asked for what is already paid); `known`: the configs to resume from (default: every config
    `summary_of` knows); `built`: the steps that existed when the search began (default: those not in
    `todo`), and `n_queries` the questions an evaluation answers, for a strategy that weighs costs."""
    search = plan.sweep.search
    space, key_of = space_of(plan)
    if built is None:
        built = {(s, k) for s, keys in plan.partitions.items() for k in keys} - set(todo)
    space.cost_model = search_costs(plan, key_of, built, n_queries)
    directions = [DIRECTIONS[o] for o in search.objectives]
    strategy = make(
        search.strategy,
        space,
        seed=search.seed,
        pool=search.pool,
        directions=directions,
        budget=search.budget.in_cost_units(),
    )
    budget = plan.trial_budget
    pending = set(todo)
    evaluated, builds = [], 0

    def observe(key: str, summary: dict) -> None:
        c = next(c for c in space.all() if key_of[space.key(c)] == key)
        strategy.observe(c, objective_values(summary, plan.sweep.weights, search.objectives))
        evaluated.append(key)

    for key in (
        (plan.config_keys if known is None else known) if resume else ()
    ):  # what an earlier run evaluated is known, not redone
        if (summary := summary_of(key)) is not None:
            observe(key, summary)
    resumed = len(evaluated)
    stopped_by = "space"
    while True:
        if len(evaluated) >= budget:
            stopped_by = "max_configs" if budget < len(plan.config_keys) else "space"
            break
        if (c := strategy.propose()) is None:
            # a strategy that knows costs stops when no candidate fits the budget
            if unit := getattr(strategy, "exhausted", None):
                stopped_by = COST_UNITS[unit]
            break
        key = key_of[space.key(c)]
        if reason := (admission or Admission()).check(plan, spent, key, None):
            stopped_by = reason
            break
        config = plan.config(key)
        progress(f"trial {len(evaluated) + 1}/{budget}: {key}")
        for name in (s.name for s in PARTITIONED):
            step = (name, plan.key_of(config, name))
            if step in pending or name == CONFIG_STAGE:
                with rest_of_chain(plan, config, name, None):
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
    admission: Admission | None = None,
) -> SearchReport:
    """Successive halving over questions (rag_core/search/halving.py) across the plan's configs (a seeded
    sample of `budget.max_configs` of them). `materialize(stage, key, n)` brings a partition to rung `n`
    (None: the full QA set) and says whether it had to compute it; `per_query_of(config key, n)` is that
    evaluation's per-query table. The survivors end evaluated on the full set, as ordinary configs, unless
    an LLM budget stops the search first. Rerun, every completed rung is read back, nothing asked twice.
    When `materialize` raises Pending (a replay reached a step not yet complete), the other configs of the
    rung are still proposed (they do not depend on it), and Pending names every step they wait for."""
    search, total = plan.sweep.search, len(question_ids)
    admission = admission or Admission()
    # the configs of a rung wait for each other only when an LLM budget must be checked between them
    together = search.budget.max_llm_calls is None and search.budget.max_cost_usd is None
    keys = list(plan.config_keys)
    if plan.trial_budget < len(keys):
        keys = sorted(random.Random(search.seed).sample(keys, plan.trial_budget), key=keys.index)
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
            with rest_of_chain(plan, config, name, n):
                computed = materialize(name, plan.key_of(config, name), n)
            builds += computed and name == "vector_index"
            if computed and name == CONFIG_STAGE:
                fresh.add(key)
        if key not in evaluated:
            evaluated.append(key)
        return per_query_of(key, n)

    stopped_by, waiting = "halving", []
    while (proposal := h.propose()) is not None:
        c, _ = proposal
        n = h.size if h.size < total else None
        if reason := admission.check(plan, spent, c["config"], n):
            stopped_by = reason
            break
        progress(f"rung {h.size}/{total} questions, {len(h.alive)} configs left: {c['config']}")
        try:
            h.observe(c, question_scores(evaluate(c["config"], n), plan.sweep.weights))
        except Pending as p:  # the rung cannot close without it: the others go on
            if not together:
                raise
            waiting += p.steps
    if waiting:
        raise Pending(waiting)
    if stopped_by == "halving":  # the survivors, on the whole QA set (what the leaderboard ranks)
        for i in sorted(h.alive):
            if admission.check(plan, spent, keys[i], None):
                break
            progress(f"full set, {len(h.alive)} configs left: {keys[i]}")
            try:
                evaluate(keys[i], None)
            except Pending as p:
                if not together:
                    raise
                waiting += p.steps
        if waiting:
            raise Pending(waiting)
    dropped = {keys[i]: n for i, n in h.dropped.items()}
    resumed = len([k for k in evaluated if k not in fresh])  # every rung of it read back
    return SearchReport(evaluated, resumed, builds, *spent(), stopped_by, dropped)


# ---- the search as state, driven from anywhere ------------------------------------------------------


@dataclass
class SearchState:
    """A sweep's search, as a file in the data dir (`searches/<sweep>.json`): what outlives the process
    that drives it. `known`: configs evaluated before it started (bayesian tells them to the strategy
    first); `budget`: overrides of the sweep's `search.budget` (the deployment's run config)."""

    path: Path
    id: str
    started: float
    force: bool = False
    known: list[str] = field(default_factory=list)
    budget: dict = field(default_factory=dict)
    status: str = "running"  # running, done, failed
    message: str = ""
    resumed: float = 0.0  # when it was last started or continued: a failure before that was retried
    begun: list = field(default_factory=list)  # [config, rung] evaluations begun (see Admission)
    built: list = field(
        default_factory=list
    )  # [stage, key] steps complete when it began (a sequential search's)

    @staticmethod
    def file(data: Path, sweep: str) -> Path:
        return data_root(data) / "searches" / f"{sweep}.json"

    @classmethod
    def load(cls, data: Path, sweep: str) -> SearchState | None:
        path = cls.file(data, sweep)
        try:
            raw = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if "id" not in raw:  # a marker of an older version: its start only (the LLM budget's origin)
            raw["id"] = uuid.uuid4().hex[:12]
        names = {f.name for f in dataclasses.fields(cls)} - {"path"}
        return cls(path=path, **{k: v for k, v in raw.items() if k in names})

    def save(self) -> None:
        state = {k: v for k, v in dataclasses.asdict(self).items() if k != "path"}
        # whole or not at all: a reader never sees half a state
        atomic_write_bytes(self.path, json.dumps(state, default=str).encode())

    def finish(self, status: str, message: str = "") -> None:
        self.status, self.message = status, message
        self.save()


def begin_search(
    plan: Plan, data: Path, complete: Complete, force: bool = False, budget: dict | None = None
) -> SearchState:
    """The sweep's search, continued (the same id, start and LLM budget: nothing evaluated again), or a new
    one when there is none or `force` (then every step is computed again). `budget` overrides the sweep's."""
    state = None if force else SearchState.load(data, plan.sweep.name)
    if state is None:
        known = (
            [k for k in plan.config_keys if complete(CONFIG_STAGE, k) is not None]
            if plan.sweep.search.sequential and not force
            else []
        )
        # what a new config would reuse, fixed at the start so that every replay weighs costs alike
        built = (
            [[s, k] for s, keys in plan.partitions.items() for k in keys if complete(s, k) is not None]
            if plan.sweep.search.sequential and not force
            else []
        )
        state = SearchState(
            SearchState.file(data, plan.sweep.name),
            uuid.uuid4().hex[:12],
            time.time(),
            force,
            known,
            built=built,
        )
    if budget is not None:
        state.budget = {k: v for k, v in budget.items() if v is not None}
    state.status, state.message, state.resumed = "running", "", time.time()
    state.save()
    return state


def with_budget(plan: Plan, budget: dict) -> Plan:
    """The plan with the search budget's fields in `budget` replaced."""
    if not budget:
        return plan
    search = plan.sweep.search
    search = search.model_copy(update={"budget": search.budget.model_copy(update=budget)})
    return dataclasses.replace(plan, sweep=plan.sweep.model_copy(update={"search": search}))


def step_tags(state: SearchState, step: RungStep) -> dict[str, str]:
    """The tags of the run that materializes a search's step."""
    from rag_assets.stage_asset import FORCE_TAG, QUESTIONS_TAG

    stage_name, key, n = step
    return {
        SEARCH_TAG: state.id,
        STEP_TAG: json.dumps([stage_name, key, n]),
        **({QUESTIONS_TAG: str(n)} if n is not None else {}),
        **({FORCE_TAG: "true"} if state.force else {}),
    }


def runs_of(instance, state: SearchState, statuses: list | None = None) -> dict[RungStep, list]:
    """The search's Dagster run records by step, oldest first (`.dagster_run`, `.create_timestamp` ...)."""
    records = instance.get_run_records(filters=dg.RunsFilter(tags={SEARCH_TAG: state.id}, statuses=statuses))
    out: dict[RungStep, list] = {}
    for r in sorted(records, key=lambda r: r.create_timestamp):
        steps = json.loads(r.dagster_run.tags[STEP_TAG])
        for s, k, n in steps if steps and isinstance(steps[0], list) else [steps]:
            out.setdefault((s, k, n), []).append(r)
    return out


def batch_tags(state: SearchState, steps: list[RungStep]) -> dict[str, str]:
    """The tags of the run that materializes several steps of one rung (a batch)."""
    return {**step_tags(state, steps[0]), STEP_TAG: json.dumps([list(step) for step in steps])}


@dataclass
class Advance:
    steps: list[RungStep]  # what the search needs next (empty once `report` is set)
    report: SearchReport | None = None


class SearchController:
    """Replays the sweep's search against what is complete (see the module's docstring). A step is done
    when a run of this search materialized it (its Dagster runs, tagged), or, unless the search is forced,
    when its artifact is complete for the current inputs; a bayesian search evaluates each chosen config
    in a run of its own (its MLflow run), unless it was `known` before the search started."""

    def __init__(self, plan: Plan, data: Path, instance, state: SearchState, stores=None):
        self.plan = with_budget(plan, state.budget)
        self.data, self.instance, self.state, self.stores = data_root(data), instance, state, stores
        self.ran: set[RungStep] = set()
        self._before: set[RungStep] | None = None  # what the search had run when this controller began
        self._rungs: dict[tuple[int | None, bool], Complete] = {}
        self._frames: dict[tuple[str, str, int | None], pl.DataFrame] = {}
        cache = open_cache(self.data / "llm_cache.sqlite")
        self.spent: Spent = lambda: cache.spent(state.started)
        self.admission = Admission(state.begun, state.save)

    def at(self, n: int | None, with_failures: bool = False) -> Complete:
        if (n, with_failures) not in self._rungs:
            self._rungs[(n, with_failures)] = completed(
                self.plan, self.instance, self.data, n, self.stores, with_failures
            )
        return self._rungs[(n, with_failures)]

    def done(self, stage_name: str, key: str, n: int | None = None) -> bool:
        if (stage_name, key, n) in self.ran:
            return True
        if self.state.force:
            return False
        if stage_name == CONFIG_STAGE and self.plan.sweep.search.sequential:
            return key in self.state.known
        return self.at(n)(stage_name, key) is not None

    def _replay_step(self, stage_name: str, key: str, n: int | None = None) -> bool:
        if self.done(stage_name, key, n):
            return False
        raise Pending([(stage_name, key, n)])

    def _read(self, stage_name: str, key: str, n: int | None, part: str | None = None) -> pl.DataFrame:
        # a step this search ran is read as it is: its failed LLM calls were asked once more (the step ran
        # again) and now count against the config, else the search would ask them forever
        ref: ArtifactRef | None = self.at(n, with_failures=(stage_name, key, n) in self.ran)(stage_name, key)
        if ref is None:  # run by this search, then superseded: the artifact of that run's fingerprint
            raise Pending([(stage_name, key, n)])
        if (ref.fp, key, part) not in self._frames:
            self._frames[(ref.fp, key, part)] = ref.read(part)
        return self._frames[(ref.fp, key, part)]

    def question_ids(self) -> list[str]:
        from rag_assets.stage_asset import split_inputs
        from rag_core.decision.holdout import SELECTION

        qa_fp = input_fingerprints(self.plan, self.instance)["qa_set"]
        split = {"qa_set": ArtifactRef(self.data, "qa_set", qa_fp)}
        if self.plan.holdout:  # the search sees the selection split only
            split = split_inputs(self.plan, SELECTION, split)
        return self._cached_ids(split["qa_set"])

    def _cached_ids(self, ref) -> list[str]:
        if not hasattr(self, "_ids"):
            self._ids = ref.read()["query_id"].to_list()
        return self._ids

    def _questions_if_weighed(self) -> int:
        """The questions an evaluation answers, where the strategy weighs LLM calls (cost_aware); else 1."""
        from rag_core.search.cost_aware import CostAware

        if STRATEGIES.get(self.plan.sweep.search.strategy).factory is not CostAware:
            return 1
        return len(self.question_ids())

    def advance(self, progress: Callable[[str], None] = lambda _: None) -> Advance:
        """Replay the search: the steps it needs next, or its report when it is over."""
        self.ran = set(runs_of(self.instance, self.state, [dg.DagsterRunStatus.SUCCESS]))
        if self._before is None:
            self._before = set(self.ran)
        self._rungs.clear()  # completeness is read afresh; artifacts read before are kept (immutable)
        plan = self.plan
        try:
            if plan.sweep.search.how == "halving":
                report = run_halving(
                    plan,
                    self.question_ids(),
                    self._replay_step,
                    lambda key, n: self._read("evaluations", key, n, "per_query"),
                    self.spent,
                    progress,
                    admission=self.admission,
                )
            else:

                def summary_of(key: str) -> dict | None:
                    if key not in self.state.known and not self.done(CONFIG_STAGE, key):
                        return None
                    return self._read("evaluations", key, None).to_dicts()[0]

                todo = [(s, k) for s, keys in plan.partitions.items() for k in keys]
                report = run_search(
                    plan,
                    todo,
                    lambda s, k: self._replay_step(s, k),
                    summary_of,
                    self.spent,
                    progress,
                    resume=bool(self.state.known),
                    admission=self.admission,
                    known=self.state.known,
                    built={(s, k) for s, k in self.state.built},
                    n_queries=self._questions_if_weighed(),
                )
        except Pending as p:
            return Advance(list(dict.fromkeys(p.steps)))  # shared upstream steps once
        # what this controller's driver computed (rather than found complete): new indexes, and the configs
        # it evaluated; the rest of `evaluated` was evaluated before (an earlier run, or found complete)
        new = self.ran - self._before
        report.index_builds = len({k for s, k, _ in new if s == "vector_index"})
        fresh = {k for s, k, _ in new if s == CONFIG_STAGE}
        report.resumed = len([k for k in report.evaluated if k not in fresh])
        return Advance([], report)

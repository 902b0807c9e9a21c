"""Search strategies behind one interface: `propose()` a candidate (None when done), `observe()` its
objective values (higher is better unless the direction says otherwise). No candidate is proposed twice.

The registry of strategies (`search.strategy`) is here too. A strategy runs one of three ways:
- `upfront`: it picks `budget.max_configs` configs when the sweep loads (`choose`), and the plan holds only
  those (grid, random);
- `sequential`: the plan holds every config and the run evaluates them one at a time as the strategy
  proposes them, telling it each result (bayesian; a plug-in's `Strategy` subclass runs this way too);
- `halving`: rungs of questions over a sample of the configs (rag_core/search/halving.py).
A plug-in registers a `Strategy` subclass (its docstring's first line describes it) under the entry-point
group `rag_sweep.search_strategies`.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from rag_core.common.registry import Registry, first_line
from rag_core.search.space import Candidate, Space


class Strategy:
    """A search over the sweep's configs: `propose()` the next candidate (None when done), `observe()` what
    it scored; `best()` the best observed."""

    def __init__(self, space: Space, seed: int = 0):
        self.space, self.seed = space, seed
        self.seen: dict[tuple, tuple[float, ...]] = {}

    def propose(self) -> Candidate | None:
        raise NotImplementedError

    def observe(self, c: Candidate, values: float | Sequence[float]) -> None:
        values = (float(values),) if isinstance(values, int | float) else tuple(map(float, values))
        self.seen[self.space.key(c)] = values
        self.space.mark_built(c)

    def best(self) -> Candidate | None:
        """The candidate with the highest first objective among those observed."""
        if not self.seen:
            return None
        key = max(self.seen, key=lambda k: (self.seen[k][0], tuple(map(str, k))))
        return dict(zip(self.space.dims, key, strict=True))


class Grid(Strategy):
    """Every candidate in the space's order."""

    @staticmethod
    def choose(n_configs: int, n: int, seed: int) -> list[int]:
        """The first n configs (upfront)."""
        return list(range(min(n, n_configs)))

    def propose(self) -> Candidate | None:
        return next((c for c in self.space.all() if self.space.key(c) not in self.seen), None)


class RandomSearch(Strategy):
    """Candidates in a random order (seeded), without repetition."""

    def __init__(self, space: Space, seed: int = 0):
        super().__init__(space, seed)
        self.order = space.all()
        random.Random(seed).shuffle(self.order)

    @staticmethod
    def choose(n_configs: int, n: int, seed: int) -> list[int]:
        """A seeded sample of n configs, in the sweep's order (upfront)."""
        return sorted(random.Random(seed).sample(range(n_configs), min(n, n_configs)))

    def propose(self) -> Candidate | None:
        return next((c for c in self.order if self.space.key(c) not in self.seen), None)


class Bayesian(Strategy):
    """Optuna's TPE sampler (multivariate; multi-objective with several `directions`). With `pool` > 1 it
    is reuse-aware: it keeps that many TPE suggestions open and proposes the cheapest to evaluate given
    the indexes that exist (the oldest among equals), so a new index is built only when every open
    suggestion needs one; suggestions older than `pool` steps are dropped."""

    def __init__(
        self,
        space: Space,
        seed: int = 0,
        directions: Sequence[str] = ("maximize",),
        pool: int = 1,
        n_startup_trials: int = 5,
    ):
        import optuna

        super().__init__(space, seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, n_startup_trials=n_startup_trials, constant_liar=True
        )
        self.study = optuna.create_study(directions=list(directions), sampler=sampler)
        self.dists = {
            d: optuna.distributions.CategoricalDistribution(list(range(len(v))))
            for d, v in space.dims.items()
        }
        self.pool_size, self.step = pool, 0
        self.open: list[tuple[object, int]] = []  # (asked trial, step it was asked at)
        self.trial_of: dict[tuple, object] = {}

    def _candidate(self, trial) -> Candidate:
        return {d: self.space.dims[d][trial.params[d]] for d in self.space.dims}

    def _open_keys(self) -> set[tuple]:
        return {self.space.key(self._candidate(t)) for t, _ in self.open}

    def propose(self) -> Candidate | None:
        from optuna.trial import TrialState

        self.step += 1
        keep = []  # drop suggestions evaluated meanwhile or older than the pool
        for trial, born in self.open:
            key = self.space.key(self._candidate(trial))
            if key in self.seen:
                self.study.tell(trial, self._directed(self.seen[key]))
            elif self.step - born > self.pool_size:
                self.study.tell(trial, state=TrialState.FAIL)
            else:
                keep.append((trial, born))
        self.open = keep
        for _ in range(20 * self.pool_size):
            if len(self.open) >= self.pool_size or len(self.seen) + len(self.open) >= len(self.space):
                break
            trial = self.study.ask(self.dists)
            key = self.space.key(self._candidate(trial))
            if key in self.seen:  # TPE suggested a known candidate: answer from memory, no evaluation
                self.study.tell(trial, self._directed(self.seen[key]))
            elif key in self._open_keys() or not self.space.valid(self._candidate(trial)):
                self.study.tell(trial, state=TrialState.FAIL)  # already open, or not a point of the space
            else:
                self.open.append((trial, self.step))
        if not self.open:  # TPE keeps to known ground: take the next unseen candidate, as a trial
            rest = [c for c in self.space.all() if self.space.key(c) not in self.seen]
            if not rest:
                return None
            self.study.enqueue_trial({d: self.space.dims[d].index(rest[0][d]) for d in self.space.dims})
            self.open.append((self.study.ask(self.dists), self.step))
        # the cheapest open suggestion given the indexes that exist; the oldest among equals
        pick = min(
            range(len(self.open)),
            key=lambda i: (self.space.cost(self._candidate(self.open[i][0])), self.open[i][1]),
        )
        trial, _ = self.open.pop(pick)
        c = self._candidate(trial)
        self.trial_of[self.space.key(c)] = trial
        return c

    def _directed(self, values):
        return list(values) if len(self.study.directions) > 1 else values[0]

    def observe(self, c: Candidate, values) -> None:
        super().observe(c, values)
        trial = self.trial_of.pop(self.space.key(c), None)
        if trial is not None:
            self.study.tell(trial, self._directed(self.seen[self.space.key(c)]))


@dataclass(frozen=True)
class SearchStrategy:
    name: str
    description: str
    how: Literal["upfront", "sequential", "halving"]
    factory: Callable[..., Strategy] | None = None  # upfront and sequential: a Strategy over a space
    choose: Callable[[int, int, int], list[int]] | None = None  # upfront: (configs, n, seed) -> indices

    @property
    def adaptive(self) -> bool:
        """Whether the run chooses what to evaluate as it goes (the plan holds the whole space)."""
        return self.how != "upfront"


def _adapt(name: str, obj: object) -> SearchStrategy:
    if isinstance(obj, SearchStrategy):
        return (
            obj
            if obj.name == name
            else SearchStrategy(name, obj.description, obj.how, obj.factory, obj.choose)
        )
    if inspect.isclass(obj) and issubclass(obj, Strategy):
        return SearchStrategy(name, first_line(obj.__doc__) or f"{name} (no description)", "sequential", obj)
    raise TypeError(f"got {type(obj).__name__}; expected a Strategy subclass (propose and observe)")


STRATEGIES: Registry[SearchStrategy] = Registry(
    "search strategy",
    "rag_sweep.search_strategies",
    ("rag_core.search.strategies", "rag_core.search.cost_aware"),
    _adapt,
)
for _strategy in (
    SearchStrategy("grid", "every config, or the first budget.max_configs", "upfront", Grid, Grid.choose),
    SearchStrategy(
        "random",
        "a seeded sample of budget.max_configs configs",
        "upfront",
        RandomSearch,
        RandomSearch.choose,
    ),
    SearchStrategy(
        "bayesian",
        "Optuna's TPE, one config at a time, preferring one that reuses an index",
        "sequential",
        Bayesian,
    ),
    SearchStrategy(
        "halving",
        "successive halving over questions with a paired test against the leader (rag_core/search/halving.py)",
        "halving",
    ),
):
    STRATEGIES.register(_strategy.name, _strategy)


def make(name: str, space: Space, seed: int = 0, **options) -> Strategy:
    """A registered strategy over `space` by name, given the options its constructor takes (bayesian:
    directions, pool, n_startup_trials; cost_aware: directions, budget)."""
    strategy = STRATEGIES.get(name)
    if strategy.factory is None:
        raise ValueError(f"search strategy {name!r} proposes no single configs (it runs as {strategy.how})")
    accepted = inspect.signature(strategy.factory).parameters
    return strategy.factory(space, seed, **{k: v for k, v in options.items() if k in accepted})

"""Search strategies behind one interface: `propose()` a candidate (None when done), `observe()` its
objective values (higher is better unless the direction says otherwise). No candidate is proposed twice.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rag_core.search.space import Candidate, Space


class Strategy:
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

    def propose(self) -> Candidate | None:
        return next((c for c in self.space.all() if self.space.key(c) not in self.seen), None)


class RandomSearch(Strategy):
    """Candidates in a random order (seeded), without repetition."""

    def __init__(self, space: Space, seed: int = 0):
        super().__init__(space, seed)
        self.order = space.all()
        random.Random(seed).shuffle(self.order)

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


STRATEGIES = {"grid": Grid, "random": RandomSearch, "bayesian": Bayesian}


def make(name: str, space: Space, seed: int = 0, **options) -> Strategy:
    """A strategy by name: grid, random or bayesian (options: directions, pool, n_startup_trials)."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown search strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name](space, seed, **options) if name == "bayesian" else STRATEGIES[name](space, seed)

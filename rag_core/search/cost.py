"""What a candidate costs NOW, given what is already built: a candidate is a chain of steps (the plan's stage
graph: chunkset -> embeddings -> index -> retrieval -> rerank -> answers -> evaluation), each step with its
own cost; a step that exists (built before, or by a candidate evaluated earlier) is free, so a candidate
sharing a built prefix pays only for its new stages.

Costs are in the units a sweep pays: index builds (a corpus embedded), LLM calls, and dollars where the
price is known. `CostBudget` caps them; `CostModel.scalar` weighs the units into one number (each against a
fresh candidate's mean cost in it) for choosing by improvement per unit of cost. Pure: the caller says what
each step costs (rag_core/planning/bill.py `cost_model` for a sweep's plan, or a benchmark's own table).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, fields

UNITS = ("index_builds", "llm_calls", "usd")


@dataclass(frozen=True)
class Cost:
    index_builds: float = 0.0
    llm_calls: float = 0.0
    usd: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.index_builds + other.index_builds, self.llm_calls + other.llm_calls, self.usd + other.usd
        )

    def __bool__(self) -> bool:
        return any(getattr(self, u) for u in UNITS)


@dataclass(frozen=True)
class CostBudget:
    """Caps in cost units; None: no cap in that unit."""

    index_builds: float | None = None
    llm_calls: float | None = None
    usd: float | None = None

    def exceeded_by(self, spent: Cost) -> str | None:
        """The first unit `spent` passes, if any."""
        for u in UNITS:
            cap = getattr(self, u)
            if cap is not None and getattr(spent, u) > cap + 1e-9:
                return u
        return None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


Step = Hashable  # a step of the stage graph, e.g. (stage, partition key)


@dataclass
class CostModel:
    """candidate key -> its steps, upstream first, each with what computing it costs."""

    steps: dict[Hashable, tuple[tuple[Step, Cost], ...]]
    built: set[Step] = field(default_factory=set)
    _new: dict[Hashable, Cost] = field(default_factory=dict, repr=False)  # new costs since the last build

    def new_cost(self, candidate: Hashable) -> Cost:
        """What evaluating `candidate` costs now: its steps that are not built yet."""
        total = self._new.get(candidate)
        if total is None:
            total, built = Cost(), self.built
            for step, cost in dict(self.steps[candidate]).items():
                if step not in built:
                    total = total + cost
            self._new[candidate] = total
        return total

    def full_cost(self, candidate: Hashable) -> Cost:
        """What it costs with nothing built."""
        total = Cost()
        for _, cost in self.steps[candidate]:
            total = total + cost
        return total

    def mark_built(self, candidate: Hashable) -> None:
        self.assume_built(step for step, _ in self.steps[candidate])

    def assume_built(self, steps: Iterable[Step]) -> None:
        """Steps that exist already (built before the search)."""
        new = set(steps) - self.built
        if new:
            self.built |= new
            self._new.clear()

    def total(self, candidates: Iterable[Hashable]) -> Cost:
        """What evaluating all of `candidates` costs now, each shared step paid once (what a bill counts)."""
        total, seen = Cost(), set(self.built)
        for c in candidates:
            for step, cost in self.steps[c]:
                if step not in seen:
                    total, seen = total + cost, seen | {step}
        return total

    def scales(self) -> dict[str, float]:
        """What one unit of each kind weighs: the mean over candidates of a candidate's full cost in that
        unit, so that each kind of cost counts about once per fresh candidate. Not the budget: a search
        continued with a larger budget must make the same choices up to where the smaller one stopped it.
        Units no candidate pays are left out."""
        out = {}
        n = max(len(self.steps), 1)
        for u in UNITS:
            mean = sum(getattr(self.full_cost(c), u) for c in self.steps) / n
            if mean > 0:
                out[u] = mean
        return out

    @staticmethod
    def scalar(cost: Cost, scales: dict[str, float], floor: float) -> float:
        """One number to divide an expected gain by: each unit as a share of its scale, plus `floor` (an
        evaluation is never free: it takes its time)."""
        return floor + sum(getattr(cost, u) / s for u, s in scales.items())


def chain_model(
    candidates: Iterable[dict],
    stages: list[tuple[str, tuple[str, ...], Cost | Callable[[dict], Cost]]],
    key: Callable[[dict], Hashable] = lambda c: tuple(sorted(c.items())),
) -> CostModel:
    """A cost model of candidates (dicts) over a chain of stages, each stage named with the dimensions it
    adds and what one step of it costs (or a function of the candidate that says): a step's identity is its
    stage and the values of every dimension up to and including its own (a stage's key extends its
    upstream's, as in a sweep's plan). Keyed by `key` of each candidate (a Space's `key`)."""
    steps = {}
    for c in candidates:
        chain, upto = [], []
        for name, dims, cost in stages:
            upto += [c[d] for d in dims]
            chain.append(((name, tuple(upto)), cost(c) if callable(cost) else cost))
        steps[key(c)] = tuple(chain)
    return CostModel(steps)


def most_spent(model: CostModel, budget: CostBudget, evaluations: int) -> tuple[Cost, Cost]:
    """(the most a search of at most `evaluations` candidates can spend, what evaluating every candidate
    costs): in each unit, the least of its budget, the whole space's cost (each shared step once) and the
    full costs of the `evaluations` costliest candidates."""
    every = model.total(model.steps)
    most = {}
    for u in UNITS:
        costliest = sorted((getattr(model.new_cost(c), u) for c in model.steps), reverse=True)[:evaluations]
        cap = getattr(budget, u)
        most[u] = min(getattr(every, u), sum(costliest), cap if cap is not None else float("inf"))
    return Cost(**most), every
